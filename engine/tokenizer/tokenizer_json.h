// Reads a Hugging Face tokenizer.json into a TokenizerSpec: the vocabulary as token bytes,
// the merges as token ids, the added tokens and the pipeline options. Everything coil does
// not implement is refused here, by name, rather than encoded differently from the
// reference: a malformed file is INVALID_ARGUMENT, a valid but unsupported one UNIMPLEMENTED.
#ifndef COIL_ENGINE_TOKENIZER_TOKENIZER_JSON_H_
#define COIL_ENGINE_TOKENIZER_TOKENIZER_JSON_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/bpe.h"

namespace coil::tokenizer {

struct AddedTokenSpec {
  int32_t id = 0;
  std::string content;     // UTF-8, as written in the file
  bool special = false;    // dropped by decoding with skip_special_tokens
  bool normalized = true;  // matched in the normalized text (else in the raw text)
};

struct TokenizerSpec {
  bool nfc = false;               // normalizer NFC
  bool add_prefix_space = false;  // ByteLevel: a space before each text that lacks one
  bool use_regex = true;          // ByteLevel: split with the GPT-2 pattern
  int32_t vocab_size = 0;         // the largest id (vocabulary or added) plus one
  // The bytes of each id (empty and `present` false for an id no token has).
  std::vector<std::string> token_bytes;
  std::vector<bool> present;
  std::array<int32_t, 256> byte_tokens{};  // the token of each byte, -1 if none
  std::vector<MergeRule> merges;           // in rank order
  std::vector<AddedTokenSpec> added_tokens;
};

// Parses the contents of a tokenizer.json file.
absl::StatusOr<TokenizerSpec> ParseTokenizerJson(absl::string_view json_text);

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_TOKENIZER_JSON_H_
