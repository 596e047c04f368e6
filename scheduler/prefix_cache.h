// The prefix cache's index on rank 0: which token prefixes have a snapshot of their
// recurrent state in a state row (and, for a model with attention layers, of their K/V in
// pages), and the longest of them that a new prompt starts with.
// Prefixes are whole chunks of `chunk_size` tokens (the scheduler splits prompts only at
// chunk multiples, so a run resumed there gives the bits of a run that never stopped). One
// node per chunk, keyed by a hash of the chunk's tokens chained with its parent's key and
// checked token for token on every walk, so a hash collision can cost a hit but never give
// a wrong one. Snapshots are evicted least recently used first.
// Invariant: every node holds a snapshot or has a child; a node's parent outlives it; each
// held row belongs to exactly one node, and each snapshot holds its pages once.
#ifndef COIL_SCHEDULER_PREFIX_CACHE_H_
#define COIL_SCHEDULER_PREFIX_CACHE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "scheduler/kv_page_pool.h"
#include "scheduler/state_row_pool.h"

namespace coil {

// What a snapshot of a prefix holds: the recurrent state in `row` and, for a model with
// attention layers, the prefix's K/V in `pages` (whole pages, shared with the requests that
// resume from it; empty without attention layers).
struct Snapshot {
  StateRow row;
  KvBlocks pages;
};

class PrefixCache {
 public:
  explicit PrefixCache(int32_t chunk_size);

  // A snapshot found for a prompt: its first `length` tokens' state is in row `slot`.
  struct Match {
    int32_t length = 0;  // 0: none
    int32_t slot = -1;
    uint64_t key = 0;
    const KvBlocks* pages = nullptr;  // the snapshot's pages, valid until the cache changes
  };

  // The longest snapshot of tokens[0, n) with n <= max_length.
  Match Find(absl::Span<const int32_t> tokens, int32_t max_length) const;
  // Whether tokens[0, length) has a snapshot (length a multiple of the chunk size).
  bool Contains(absl::Span<const int32_t> tokens, int32_t length) const;
  // Makes `match` (from Find, with no change in between) the most recently used.
  void Touch(const Match& match);

  // Keeps `snapshot` as that of tokens[0, length), length a positive multiple of the chunk
  // size. Hands it back untouched when that prefix has a snapshot already, or when its
  // chain of keys meets a collision; nothing when the cache took it.
  std::optional<Snapshot> Insert(absl::Span<const int32_t> tokens, int32_t length,
                                 Snapshot snapshot);
  // Drops the least recently used snapshot (and the nodes only it needed) and hands its row
  // and pages back; nothing when there is no snapshot. `keep` (a key from Find) is never
  // chosen; nothing when it is the only snapshot.
  std::optional<Snapshot> EvictLeastRecent(uint64_t keep = 0);

  int32_t chunk_size() const { return chunk_size_; }
  int32_t num_snapshots() const { return static_cast<int32_t>(lru_.size()); }
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }

 private:
  struct Node {
    uint64_t parent = 0;  // kRoot for the first chunk
    std::vector<int32_t> chunk;
    int32_t children = 0;
    StateRow row;    // held when this prefix has a snapshot
    KvBlocks pages;  // the snapshot's pages
    uint64_t last_use = 0;
  };
  static constexpr uint64_t kRoot = 0;

  // The key of the chunk tokens[k * chunk, (k + 1) * chunk) after the node keyed `parent`.
  uint64_t ChunkKey(uint64_t parent, absl::Span<const int32_t> tokens, int32_t k) const;
  // The node keyed `key` when it is the child of `parent` holding exactly that chunk.
  const Node* Verified(uint64_t key, uint64_t parent, absl::Span<const int32_t> tokens,
                       int32_t k) const;

  int32_t chunk_size_;
  absl::flat_hash_map<uint64_t, Node> nodes_;
  std::set<std::pair<uint64_t, uint64_t>> lru_;  // (last use, key) of every snapshot
  uint64_t clock_ = 0;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_PREFIX_CACHE_H_
