// The text <-> token id conversion of a Hugging Face tokenizer.json whose model is BPE:
// byte-level files (GPT-2, GPT-NeoX-20B, Llama 3, Qwen, Nemotron-H: a regex Split and the
// ByteLevel pre-tokenizer) and SentencePiece-style ones (Llama 2, Mistral, Gemma: Metaspace
// or Replace, byte fallback). Encoding runs the reference library's pipeline: added tokens
// found in the raw text, the normalizer, added tokens found in the normalized text, the
// pre-tokenizer, BPE merges by rank, and on request the post-processor's special tokens;
// decoding runs the decoder (decoder.h). Both give exactly what the reference gives. A
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
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace coil::tokenizer {

struct TokenizerOptions {
  // Entries of the word -> ids cache (0: no cache).
  size_t word_cache_entries = BpeModel::kDefaultCacheEntries;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json file. NOT_FOUND when it cannot be read; INVALID_ARGUMENT when
  // it is malformed; UNIMPLEMENTED when it needs a component coil does not have (the
  // message names each one and where it is in the file).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path,
                                                             const TokenizerOptions& options = {});
  // The same from the file's contents.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view json_text,
                                                             const TokenizerOptions& options = {});
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSpec(TokenizerSpec spec,
                                                             const TokenizerOptions& options = {});

  // The ids of `text`, which must be valid UTF-8 (INVALID_ARGUMENT otherwise). With
  // `add_special_tokens`, the post-processor's special tokens go around them (the BOS
  // <s> of Llama 2, say) as the model expects; GPT-NeoX's adds none.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens = false) const;

  // The text of `ids`; with `skip_special_tokens`, special added tokens (such as
  // <|endoftext|>) are left out. Invalid UTF-8 becomes U+FFFD as the decoder says.
  // INVALID_ARGUMENT for an id that names no token.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens = false) const;

  // OK when `id` names a token; INVALID_ARGUMENT naming the valid range otherwise.
  absl::Status CheckId(int32_t id) const;

  // True when `id` is a special token: decoding with skip_special_tokens leaves it out.
  bool IsSpecial(int32_t id) const {
    return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
  }

  // The id of the added token whose content is `content` (e.g. "<|endoftext|>", "<s>").
  std::optional<int32_t> AddedTokenId(absl::string_view content) const;

  // The id of the token spelled `token` in tokenizer.json, added or in the vocabulary (an
  // entry of a byte-level vocabulary is spelled in ByteLevel characters: "Ġthe").
  std::optional<int32_t> TokenId(absl::string_view token) const;

  // The string tokenizer.json gives `id` (its vocabulary entry or added token's content),
  // or nullopt when no token has that id.
  std::optional<std::string> TokenString(int32_t id) const;

  // The special tokens the post-processor puts before and after a text when encoding with
  // add_special_tokens (empty when it adds none).
  const std::vector<int32_t>& special_prefix() const { return special_prefix_; }
  const std::vector<int32_t>& special_suffix() const { return special_suffix_; }

  // The added tokens as the file declares them, with the ids they got.
  const std::vector<AddedTokenSpec>& added_tokens() const { return added_tokens_; }

  // A one-line summary of the pipeline: "BPE byte-level ignore_merges, pre-tokenizer
  // Split(regex)+ByteLevel, decoder ByteLevel, post-processor ByteLevel".
  const std::string& description() const { return description_; }

  // One more than the largest id (50277 for GPT-NeoX-20B).
  int32_t vocab_size() const { return static_cast<int32_t>(present_.size()); }

  // The file it was loaded from (FromFile), or empty.
  const std::string& source_path() const { return source_path_; }

  // A new decoding stream (for IncrementalDetokenizer).
  Decoder::Stream NewDecodeStream() const { return decoder_.NewStream(); }

 private:
  Tokenizer(TokenizerSpec spec, const TokenizerOptions& options, Normalizer normalizer,
            PreTokenizer pre_tokenizer, Decoder decoder);

  // Encodes a stretch of raw text holding no raw-matched added token; `head` as in
  // normalizer.h.
  absl::Status EncodeSegment(absl::string_view segment, int32_t head,
                             std::vector<int32_t>* ids) const;
  // Encodes a stretch of normalized text holding no added token.
  void EncodePlain(absl::string_view text, int32_t head, std::vector<int32_t>* ids) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel bpe_;
  Decoder decoder_;
  AddedTokenMatcher raw_added_;         // matched before normalization
  AddedTokenMatcher normalized_added_;  // matched in the normalized text
  std::vector<bool> present_;
  std::vector<bool> special_;
  std::vector<std::string> token_strings_;
  absl::flat_hash_map<std::string, int32_t> added_ids_;
  absl::flat_hash_map<std::string, int32_t> vocab_ids_;
  std::vector<int32_t> special_prefix_;
  std::vector<int32_t> special_suffix_;
  std::vector<AddedTokenSpec> added_tokens_;
  std::string description_;
  std::string source_path_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_TOKENIZER_H_
