#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace coil::tokenizer {

BpeModel::BpeModel(const std::array<int32_t, 256>& byte_tokens,
                   const std::vector<MergeRule>& merges, size_t cache_entries)
    : byte_tokens_(byte_tokens), cache_(std::make_unique<Cache>()) {
  cache_->capacity = cache_entries;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& rule = merges[rank];
    merges_.try_emplace(PairKey(rule.left, rule.right),
                        Merge{static_cast<int32_t>(rank), rule.result});
  }
}

void BpeModel::EncodeUncached(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    const int32_t token = byte_tokens_[static_cast<unsigned char>(word[0])];
    if (token >= 0) out->push_back(token);
    return;
  }
  Symbols tokens;
  tokens.reserve(word.size());
  for (const char c : word) {
    const int32_t token = byte_tokens_[static_cast<unsigned char>(c)];
    if (token >= 0) tokens.push_back(token);
  }
  if (tokens.size() <= kMaxScannedSymbols) {
    MergeByScanning(tokens, out);
  } else {
    MergeWithHeap(tokens, out);
  }
}

void BpeModel::MergeByScanning(Symbols& tokens, std::vector<int32_t>* out) const {
  // ranks[i] and results[i] describe the pair (tokens[i], tokens[i + 1]). Each step finds
  // the lowest rank by a linear scan (leftmost on a tie), merges, and looks up only the two
  // pairs that changed: on short words this beats a heap.
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  const size_t n = tokens.size();
  Symbols ranks(n, kNone);
  Symbols results(n, 0);
  const auto look_up = [&](size_t i) {
    const auto it = merges_.find(PairKey(tokens[i], tokens[i + 1]));
    if (it == merges_.end()) {
      ranks[i] = kNone;
    } else {
      ranks[i] = it->second.rank;
      results[i] = it->second.result;
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  size_t size = n;
  while (size > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < size; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    tokens[best] = results[best];
    tokens.erase(tokens.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
    results.erase(results.begin() + static_cast<ptrdiff_t>(best) + 1);
    --size;
    if (best + 1 < size) {
      look_up(best);
    } else {
      ranks[best] = kNone;
    }
    if (best > 0) look_up(best - 1);
  }
  out->insert(out->end(), tokens.begin(), tokens.end());
}

void BpeModel::MergeWithHeap(Symbols& tokens, std::vector<int32_t>* out) const {
  // A doubly linked list over the symbols (a merged symbol keeps the left position) and a
  // min-heap of candidate merges keyed by (rank, position): O(n log n) for the long runs
  // (digits, base64) where rescanning would be quadratic. An entry is stale when its pair
  // has changed since it was pushed; a rank names one pair, so comparing the pair's current
  // rank with the entry's detects that.
  const size_t n = tokens.size();
  std::vector<int32_t> prev(n);
  std::vector<int32_t> next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
  };
  // std heap functions build a max-heap; "later" puts the lowest (rank, pos) on top.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::vector<Candidate> heap;
  const auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merges_.find(PairKey(tokens[pos], tokens[next[pos]]));
    if (it == merges_.end()) return;
    heap.push_back(Candidate{it->second.rank, pos});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    const int32_t right = next[top.pos];
    // A merged-away symbol has tokens[] == -1, so its stale entries are skipped here.
    if (tokens[top.pos] < 0 || right < 0) continue;
    const auto it = merges_.find(PairKey(tokens[top.pos], tokens[right]));
    if (it == merges_.end() || it->second.rank != top.rank) continue;
    tokens[top.pos] = it->second.result;
    tokens[right] = -1;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = next[pos]) out->push_back(tokens[pos]);
}

void BpeModel::Encode(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.size() <= 1 || word.size() > kMaxCachedWordBytes || cache_->capacity == 0) {
    EncodeUncached(word, out);
    return;
  }
  {
    absl::ReaderMutexLock lock(&cache_->mutex);
    const auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  EncodeUncached(word, out);
  absl::MutexLock lock(&cache_->mutex);
  // A full cache keeps what it has: the frequent words arrive first and stay.
  if (cache_->words.size() < cache_->capacity) {
    cache_->words.try_emplace(std::string(word), out->begin() + static_cast<ptrdiff_t>(first),
                              out->end());
  }
}

}  // namespace coil::tokenizer
