// Where coil-loadgen's prompts come from: synthetic prompts of a chosen length distribution,
// cut from real text (tokenized once by the server) or made of random token ids, or the
// prompts of a JSONL file, cycled. Synthetic prompts are sent as token ids, so a prompt has
// exactly the sampled length whatever the tokenizer does at the edges of a cut.
#ifndef COIL_TESTS_LOAD_PROMPT_SOURCE_H_
#define COIL_TESTS_LOAD_PROMPT_SOURCE_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace coil::load {

// A prompt length distribution: "128" (fixed), "64-256" (uniform, both ends included) or
// "128,32" (normal with mean 128 and standard deviation 32, rounded, at least 1).
class LengthSpec {
 public:
  static absl::StatusOr<LengthSpec> Parse(const std::string& spec);
  int32_t Sample(std::mt19937_64& rng) const;
  // The largest length Sample can return (mean + 4 std for a normal).
  int32_t Max() const;

  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind() const { return kind_; }

 private:
  Kind kind_ = Kind::kFixed;
  double a_ = 1, b_ = 1;  // fixed: a; uniform: [a, b]; normal: mean a, std b
};

struct Prompt {
  std::optional<std::string> text;  // set: sent as text; otherwise `ids`
  std::vector<int32_t> ids;
  std::optional<int32_t> output_tokens;  // a JSONL line's own output length
};

// A few paragraphs of plain English prose written for coil's load tests, used when no
// --prompt-text-file is given.
const char* DefaultPromptText();

// Cuts a window of `length` tokens from `corpus` at a random offset, wrapping around.
std::vector<int32_t> CutWindow(const std::vector<int32_t>& corpus, int32_t length,
                               std::mt19937_64& rng);

// `length` ids drawn uniformly from [first_id, end_id).
std::vector<int32_t> RandomIds(int32_t length, int32_t first_id, int32_t end_id,
                               std::mt19937_64& rng);

// Reads a JSONL file: one object per line with "prompt" (text) or "prompt_token_ids" (ids),
// and optionally "output_tokens". Blank lines are skipped.
absl::StatusOr<std::vector<Prompt>> ReadPromptsJsonl(const std::string& path);

}  // namespace coil::load

#endif  // COIL_TESTS_LOAD_PROMPT_SOURCE_H_
