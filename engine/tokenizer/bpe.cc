#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"

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
  // A doubly linked list over the symbols (a merged symbol keeps the left position) and a
  // min-heap of candidate merges keyed by (rank, position). An entry is stale when its
  // pair has changed since it was pushed; a rank names one pair, so comparing the pair's
  // current rank with the entry's detects that.
  absl::InlinedVector<int32_t, 32> tokens;
  tokens.reserve(word.size());
  for (const char c : word) {
    const int32_t token = byte_tokens_[static_cast<unsigned char>(c)];
    if (token >= 0) tokens.push_back(token);
  }
  const size_t n = tokens.size();
  if (n == 0) return;
  absl::InlinedVector<int32_t, 32> prev(n);
  absl::InlinedVector<int32_t, 32> next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
  };
  // std heap functions build a max-heap; "greater" puts the lowest (rank, pos) on top.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  absl::InlinedVector<Candidate, 32> heap;
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
    // A merged-away symbol has tokens[] == -1, so its stale entries fail the lookup below.
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
