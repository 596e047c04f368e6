#include "scheduler/prefix_cache.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"

namespace coil {
namespace {

// splitmix64's finalizer: every input bit reaches every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixCache::PrefixCache(int32_t chunk_size) : chunk_size_(chunk_size) {
  COIL_CHECK(chunk_size_ > 0) << "chunk_size " << chunk_size_;
}

uint64_t PrefixCache::ChunkKey(uint64_t parent, absl::Span<const int32_t> tokens, int32_t k) const {
  uint64_t key = Mix(parent + 0x9E3779B97F4A7C15ull);
  for (int32_t i = k * chunk_size_; i < (k + 1) * chunk_size_; ++i) {
    key = Mix(key ^ static_cast<uint32_t>(tokens[i]));
  }
  // kRoot names no node; a chunk that hashes to it takes the next key instead.
  return key == kRoot ? 1 : key;
}

const PrefixCache::Node* PrefixCache::Verified(uint64_t key, uint64_t parent,
                                               absl::Span<const int32_t> tokens, int32_t k) const {
  auto it = nodes_.find(key);
  if (it == nodes_.end() || it->second.parent != parent) return nullptr;
  const auto chunk = tokens.subspan(static_cast<size_t>(k) * chunk_size_, chunk_size_);
  if (!std::equal(chunk.begin(), chunk.end(), it->second.chunk.begin())) return nullptr;
  return &it->second;
}

PrefixCache::Match PrefixCache::Find(absl::Span<const int32_t> tokens, int32_t max_length) const {
  Match best;
  const int32_t chunks =
      std::min<int32_t>(max_length, static_cast<int32_t>(tokens.size())) / chunk_size_;
  uint64_t parent = kRoot;
  for (int32_t k = 0; k < chunks; ++k) {
    const uint64_t key = ChunkKey(parent, tokens, k);
    const Node* node = Verified(key, parent, tokens, k);
    if (node == nullptr) break;
    if (node->row.held()) best = {(k + 1) * chunk_size_, node->row.slot(), key, &node->pages};
    parent = key;
  }
  return best;
}

bool PrefixCache::Contains(absl::Span<const int32_t> tokens, int32_t length) const {
  if (length <= 0 || length % chunk_size_ != 0) return false;
  const Match match = Find(tokens, length);
  return match.length == length;
}

void PrefixCache::Touch(const Match& match) {
  auto it = nodes_.find(match.key);
  COIL_CHECK(it != nodes_.end() && it->second.row.held()) << "touching a snapshot that is gone";
  Node& node = it->second;
  lru_.erase({node.last_use, match.key});
  node.last_use = ++clock_;
  lru_.insert({node.last_use, match.key});
}

std::optional<Snapshot> PrefixCache::Insert(absl::Span<const int32_t> tokens, int32_t length,
                                            Snapshot snapshot) {
  COIL_CHECK(snapshot.row.held() && length > 0 && length % chunk_size_ == 0 &&
             length <= static_cast<int32_t>(tokens.size()))
      << "snapshot of " << length << " tokens";
  const int32_t chunks = length / chunk_size_;
  // The nodes that exist already, verified; then the keys of those to add, none of which
  // may be taken (by another prefix: a collision), or the chain could not be walked.
  std::vector<uint64_t> keys;
  keys.reserve(static_cast<size_t>(chunks));
  uint64_t parent = kRoot;
  int32_t k = 0;
  for (; k < chunks; ++k) {
    const uint64_t key = ChunkKey(parent, tokens, k);
    if (Verified(key, parent, tokens, k) == nullptr) {
      if (nodes_.contains(key)) return snapshot;
      break;
    }
    keys.push_back(key);
    parent = key;
  }
  const int32_t existing = k;
  for (; k < chunks; ++k) {
    const uint64_t key = ChunkKey(parent, tokens, k);
    if (nodes_.contains(key) || std::find(keys.begin(), keys.end(), key) != keys.end()) {
      return snapshot;
    }
    keys.push_back(key);
    parent = key;
  }
  if (existing == chunks && nodes_.at(keys.back()).row.held()) return snapshot;
  for (k = existing; k < chunks; ++k) {
    const uint64_t up = k == 0 ? kRoot : keys[k - 1];
    Node& node = nodes_[keys[k]];
    node.parent = up;
    const auto chunk = tokens.subspan(static_cast<size_t>(k) * chunk_size_, chunk_size_);
    node.chunk.assign(chunk.begin(), chunk.end());
    if (up != kRoot) ++nodes_.at(up).children;
  }
  Node& node = nodes_.at(keys.back());
  node.row = snapshot.row;
  node.pages = std::move(snapshot.pages);
  node.last_use = ++clock_;
  lru_.insert({node.last_use, keys.back()});
  return std::nullopt;
}

std::optional<Snapshot> PrefixCache::EvictLeastRecent(uint64_t keep) {
  auto oldest = lru_.begin();
  if (oldest != lru_.end() && keep != 0 && oldest->second == keep) ++oldest;
  if (oldest == lru_.end()) return std::nullopt;
  const uint64_t key = oldest->second;
  lru_.erase(oldest);
  auto it = nodes_.find(key);
  Snapshot snapshot{it->second.row, std::move(it->second.pages)};
  it->second.row = StateRow();
  it->second.pages = KvBlocks();
  // Prune the chain up to the first node that still holds a snapshot or another child.
  while (it != nodes_.end() && !it->second.row.held() && it->second.children == 0) {
    const uint64_t parent = it->second.parent;
    nodes_.erase(it);
    if (parent == kRoot) break;
    it = nodes_.find(parent);
    COIL_CHECK(it != nodes_.end()) << "a prefix node outlived its parent";
    --it->second.children;
  }
  return snapshot;
}

}  // namespace coil
