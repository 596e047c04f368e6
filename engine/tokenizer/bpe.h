// Byte-pair encoding of one pre-tokenized word, over raw bytes: each byte starts as its own
// token, then the adjacent pair with the lowest merge rank is merged (the leftmost on a
// tie) until no pair has a merge, which is what the reference's priority queue computes.
// A bounded cache of word -> ids makes repeated words (most of prose) one hash lookup.
// Thread-safe: Encode may be called from several threads at once.
#ifndef COIL_ENGINE_TOKENIZER_BPE_H_
#define COIL_ENGINE_TOKENIZER_BPE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace coil::tokenizer {

// One merge rule: tokens `left` and `right`, adjacent, become `result`. Rules earlier in
// the list (lower rank) apply first.
struct MergeRule {
  int32_t left = 0;
  int32_t right = 0;
  int32_t result = 0;
};

class BpeModel {
 public:
  // Words up to this many bytes are cached; longer ones are rare and would crowd the cache.
  static constexpr size_t kMaxCachedWordBytes = 64;
  static constexpr size_t kDefaultCacheEntries = 1 << 16;

  // `byte_tokens[b]` is the token of the single byte b (-1: none; such a byte is dropped,
  // as the reference drops a character it has no token for); `merges` in rank order. A later
  // rule for a pair that already has one is ignored (the first rank wins).
  BpeModel(const std::array<int32_t, 256>& byte_tokens, const std::vector<MergeRule>& merges,
           size_t cache_entries = kDefaultCacheEntries);

  // Appends the tokens of `word` (non-empty bytes) to `out`, using and filling the cache.
  void Encode(absl::string_view word, std::vector<int32_t>* out) const;

  // The same without the cache.
  void EncodeUncached(absl::string_view word, std::vector<int32_t>* out) const;

 private:
  // Words of up to this many symbols merge by rescanning a small array; longer ones use a
  // priority queue. Both give the same result (the tests compare them with the textbook).
  static constexpr size_t kMaxScannedSymbols = 48;
  using Symbols = absl::InlinedVector<int32_t, 32>;
  void MergeByScanning(Symbols& tokens, std::vector<int32_t>* out) const;
  void MergeWithHeap(Symbols& tokens, std::vector<int32_t>* out) const;

  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // The cache lives behind a pointer so that the model stays movable (a Mutex is not).
  struct Cache {
    size_t capacity = 0;
    mutable absl::Mutex mutex;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words ABSL_GUARDED_BY(mutex);
  };

  std::array<int32_t, 256> byte_tokens_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_BPE_H_
