// The text <-> token id conversion of a Hugging Face tokenizer.json of the byte-level BPE
// family (GPT-2, GPT-NeoX-20B): added tokens, NFC, the GPT-2 split, BPE merges by rank, and
// the ByteLevel decoder. Encode gives exactly the ids the reference library gives. A
// Tokenizer is immutable after loading (its word cache is internally locked), so one
// instance serves every thread.
#ifndef COIL_ENGINE_TOKENIZER_TOKENIZER_H_
#define COIL_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace coil::tokenizer {

struct TokenizerOptions {
  // Entries of the word -> ids cache (0: no cache).
  size_t word_cache_entries = BpeModel::kDefaultCacheEntries;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json file. NOT_FOUND when it cannot be read; INVALID_ARGUMENT when
  // it is malformed; UNIMPLEMENTED when it needs a feature coil does not have.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path,
                                                             const TokenizerOptions& options = {});
  // The same from the file's contents.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view json_text,
                                                             const TokenizerOptions& options = {});

  explicit Tokenizer(TokenizerSpec spec, const TokenizerOptions& options = {});

  // The ids of `text`, which must be valid UTF-8 (INVALID_ARGUMENT otherwise). Adds no
  // BOS or EOS token (the GPT-NeoX post-processor adds none).
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;

  // The text of `ids`; with `skip_special_tokens`, special added tokens (such as
  // <|endoftext|>) are left out. Byte sequences that are not UTF-8 become U+FFFD.
  // INVALID_ARGUMENT for an id that names no token.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens = false) const;

  // The bytes token `id` decodes to (possibly part of a UTF-8 sequence).
  absl::StatusOr<absl::string_view> TokenBytes(int32_t id) const;

  // True when `id` is a special added token.
  bool IsSpecial(int32_t id) const {
    return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
  }

  // The id of the added token whose content is `content` (e.g. "<|endoftext|>").
  std::optional<int32_t> AddedTokenId(absl::string_view content) const;

  // One more than the largest id (50277 for GPT-NeoX-20B).
  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }

 private:
  // Encodes a stretch of raw text holding no raw-matched added token.
  absl::Status EncodeSegment(absl::string_view segment, std::vector<int32_t>* ids) const;
  // Encodes a stretch of normalized text holding no added token.
  void EncodePlain(absl::string_view text, std::vector<int32_t>* ids) const;

  bool nfc_;
  bool add_prefix_space_;
  bool use_regex_;
  BpeModel bpe_;
  AddedTokenMatcher raw_added_;         // matched before normalization
  AddedTokenMatcher normalized_added_;  // matched in the NFC text
  std::vector<std::string> token_bytes_;
  std::vector<bool> present_;
  std::vector<bool> special_;
  absl::flat_hash_map<std::string, int32_t> added_ids_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_TOKENIZER_H_
