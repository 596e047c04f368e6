// Byte-pair encoding of one pre-tokenized word. Each character of the word starts as its own
// token (a byte-level model's words are raw bytes, each standing for its ByteLevel
// character; a character without a token falls back to its byte tokens <0xNN>, to the
// unknown token, or is dropped, as the options say), then the adjacent pair with the lowest
// merge rank is merged (the leftmost on a tie) until no pair has a merge, which is what the
// reference's priority queue computes. With ignore_merges, a word that is a vocabulary entry
// is that entry. A bounded cache of word -> ids makes repeated words (most of prose) one
// hash lookup. Thread-safe: Encode may be called from several threads at once.
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

// The model options of tokenizer.json that change the encoding.
struct BpeOptions {
  bool byte_level = false;     // words are raw bytes (a ByteLevel pre-tokenizer ran)
  bool ignore_merges = false;  // a word that is a vocabulary entry is that entry
  bool byte_fallback = false;  // a character without a token becomes its <0xNN> tokens
  int32_t unk_id = -1;         // the unknown token, or -1 (such a character is dropped)
  bool fuse_unk = false;       // consecutive unknown characters give one unknown token
};

class BpeModel {
 public:
  // Words up to this many bytes are cached; longer ones are rare and would crowd the cache.
  static constexpr size_t kMaxCachedWordBytes = 64;
  static constexpr size_t kDefaultCacheEntries = 1 << 16;

  // `byte_tokens[b]` is the token of the single byte b (-1: none; such a byte is dropped,
  // as the reference drops a character it has no token for); `merges` in rank order. A later
  // rule for a pair that already has one replaces it, as in the reference's merge map.
  BpeModel(const std::array<int32_t, 256>& byte_tokens, const std::vector<MergeRule>& merges,
           size_t cache_entries = kDefaultCacheEntries);

  // A model over a vocabulary: `tokens[id]` is the entry's text as tokenizer.json spells it
  // (ByteLevel characters in a byte-level vocabulary), `present[id]` whether id has one.
  BpeModel(const std::vector<std::string>& tokens, const std::vector<bool>& present,
           const std::vector<MergeRule>& merges, const BpeOptions& options,
           size_t cache_entries = kDefaultCacheEntries);

  // Appends the tokens of `word` (non-empty bytes) to `out`, using and filling the cache.
  void Encode(absl::string_view word, std::vector<int32_t>* out) const;

  // The same without the cache.
  void EncodeUncached(absl::string_view word, std::vector<int32_t>* out) const;

  // Whether a word is cut before each split character (below) that no merge can cross.
  bool splits_words() const { return !split_character_.empty(); }

 private:
  // Words of up to this many symbols merge by rescanning a small array; longer ones use a
  // priority queue. Both give the same result (the tests compare them with the textbook).
  static constexpr size_t kMaxScannedSymbols = 48;
  using Symbols = absl::InlinedVector<int32_t, 32>;
  // The tokens of one character: its vocabulary entry, its <0xNN> byte tokens, the unknown
  // token (kUnknown), or nothing (an empty list).
  struct CharTokens {
    static constexpr int32_t kUnknown = -2;
    absl::InlinedVector<int32_t, 4> ids;
  };
  void MergeRules(const std::vector<MergeRule>& merges);
  // Chooses the split character of a character-level model (see split_character_).
  void FindSplitCharacter(const std::vector<std::string>& tokens, const std::vector<bool>& present);
  // Encodes a part of a word: merges only (ignore_merges applies to whole words).
  void EncodePart(absl::string_view part, std::vector<int32_t>* out) const;
  // Merges one word (no ignore_merges, no cache).
  void MergeWord(absl::string_view word, std::vector<int32_t>* out) const;
  CharTokens TokensOfCharacter(absl::string_view character, int32_t id) const;
  // Appends the starting tokens of `word` to `tokens`.
  void InitialTokens(absl::string_view word, Symbols* tokens) const;
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

  BpeOptions options_;
  // Byte-level models: the tokens of each byte's character.
  std::array<CharTokens, 256> byte_chars_;
  bool simple_bytes_ = true;  // every byte is one token or dropped: the fast path
  std::array<int32_t, 256> byte_tokens_;
  // Character-level models: the entry of each single-character token, and the <0xNN> tokens.
  absl::flat_hash_map<char32_t, int32_t> char_ids_;
  std::array<int32_t, 256> fallback_ids_;
  // ignore_merges: every entry, by the word it matches (bytes for a byte-level model).
  absl::flat_hash_map<std::string, int32_t> word_ids_;
  // SentencePiece-style models see whole texts as one word (nothing splits them before the
  // model). Merges are local, so a word can be cut where no merge can ever join the two
  // sides: before the split character (U+2581) when the character before it has a token of
  // its own and no vocabulary entry contains that character followed by U+2581. The parts
  // merge exactly as the whole would, and each is small enough for the word cache.
  std::string split_character_;
  absl::flat_hash_map<char32_t, bool> joins_split_character_;  // chars some entry puts before it
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_BPE_H_
