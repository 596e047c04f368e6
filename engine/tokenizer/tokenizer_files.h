// Where a model's tokenizer comes from: an explicit file (--tokenizer), else the model
// directory's tokenizer.json, else the GPT-NeoX-20B file shipped with coil (the
// state-spaces/mamba2-* checkpoints ship none). The shipped file is found as every data file
// of coil is (common/data_files.h): in the install prefix, or at the top of the build tree.
#ifndef COIL_ENGINE_TOKENIZER_TOKENIZER_FILES_H_
#define COIL_ENGINE_TOKENIZER_TOKENIZER_FILES_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil::tokenizer {

// The shipped GPT-NeoX-20B file, relative to share/coil/.
inline constexpr char kShippedTokenizer[] = "gpt-neox-20b/tokenizer.json";

// Where the shipped file is; NOT_FOUND listing the places looked at otherwise.
absl::StatusOr<std::string> ShippedTokenizerPath();

// The tokenizer file for a model: `override_path` when not empty, else
// `model_dir`/tokenizer.json when `model_dir` is not empty and has one, else the shipped
// file.
absl::StatusOr<std::string> TokenizerPathForModel(const std::string& model_dir,
                                                  const std::string& override_path);

// Loads the file TokenizerPathForModel names, and logs what it holds (its pipeline, its
// special tokens).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_dir,
                                                                 const std::string& override_path);

// The special tokens tokenizer_config.json (beside the tokenizer's file) names, by content:
// each is a string or an object with "content". Absent ones are empty.
struct TokenizerConfigTokens {
  std::string bos_token;
  std::string eos_token;
  std::string pad_token;
  std::string unk_token;
};
// NOT_FOUND when there is no tokenizer_config.json beside `tokenizer_path`;
// INVALID_ARGUMENT when it is not a JSON object.
absl::StatusOr<TokenizerConfigTokens> ReadTokenizerConfig(const std::string& tokenizer_path);

// The end-of-sequence token generation stops at: tokenizer_config.json's eos_token when the
// tokenizer came from a file with one beside it, else the added token "<|endoftext|>" (the
// GPT-NeoX-20B file's), else none.
std::optional<int32_t> EndOfSequenceId(const Tokenizer& tokenizer);

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_TOKENIZER_FILES_H_
