// ValidateGeneration: each limit of the serving layer refuses with INVALID_ARGUMENT and a
// message naming the field and the limit; values just inside every limit pass. The
// limits below are chosen so each boundary is worked out by hand in the comments.
#include "engine/request_validation.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coil {
namespace {

using ::testing::HasSubstr;

ServingLimits Limits() {
  ServingLimits limits;
  limits.max_model_len = 16;  // prompts up to 15 tokens; prompt + max_tokens up to 16
  limits.vocab_size = 100;    // ids 0..99
  limits.max_stop_strings = 2;
  limits.max_stop_string_bytes = 4;
  limits.max_stop_token_ids = 2;
  return limits;
}

GenerationInput Valid() {
  GenerationInput input;
  input.prompt = {1, 2, 3};
  input.max_tokens = 13;  // 3 + 13 = 16: exactly the limit
  input.stop = {"abcd", "x"};
  input.stop_token_ids = {0, 99};
  return input;
}

void ExpectRefused(const GenerationInput& input, const std::string& fragment) {
  const absl::Status status = ValidateGeneration(input, Limits());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
}

TEST(RequestValidationTest, ValuesAtEveryLimitPass) {
  EXPECT_TRUE(ValidateGeneration(Valid(), Limits()).ok());
  GenerationInput longest = Valid();
  longest.prompt.assign(15, 99);  // 15 = max_model_len - 1, the largest id
  longest.max_tokens.reset();     // unset: up to the context limit
  EXPECT_TRUE(ValidateGeneration(longest, Limits()).ok());
}

TEST(RequestValidationTest, PromptLimits) {
  GenerationInput input = Valid();
  input.prompt.clear();
  ExpectRefused(input, "prompt is empty");
  input.prompt.assign(16, 1);  // 16 >= max_model_len
  input.max_tokens.reset();
  ExpectRefused(input, "the limit is 15");
  input = Valid();
  input.prompt = {1, 100};
  ExpectRefused(input, "id 100, outside the vocabulary [0, 100)");
  input.prompt = {-1};
  ExpectRefused(input, "id -1");
}

TEST(RequestValidationTest, CachePrefixTokensWithinThePrompt) {
  GenerationInput input = Valid();  // a prompt of 3 tokens
  input.cache_prefix_tokens = 3;
  EXPECT_TRUE(ValidateGeneration(input, Limits()).ok());
  input.cache_prefix_tokens = 4;
  ExpectRefused(input, "cache_prefix_tokens is 4; the prompt has 3 tokens");
  input.cache_prefix_tokens = -1;
  ExpectRefused(input, "cache_prefix_tokens is -1");
}

TEST(RequestValidationTest, MaxTokens) {
  GenerationInput input = Valid();
  input.max_tokens = 0;
  ExpectRefused(input, "max_tokens is 0");
  input.max_tokens = 14;  // 3 + 14 = 17 > 16
  ExpectRefused(input, "lower max_tokens to at most 13");
}

TEST(RequestValidationTest, SamplingParameters) {
  GenerationInput input = Valid();
  input.sampling.temperature = -0.5f;
  ExpectRefused(input, "temperature");
  input = Valid();
  input.sampling.top_p = 0.0f;
  ExpectRefused(input, "top_p");
  input.sampling.top_p = 1.5f;
  ExpectRefused(input, "top_p");
  input = Valid();
  input.sampling.top_k = -1;
  ExpectRefused(input, "top_k");
  input = Valid();
  input.sampling.min_p = 1.5f;
  ExpectRefused(input, "min_p");
}

TEST(RequestValidationTest, StopLimits) {
  GenerationInput input = Valid();
  input.stop = {"a", "b", "c"};
  ExpectRefused(input, "3 stop strings; the limit is 2");
  input.stop = {"abcde"};
  ExpectRefused(input, "5 bytes; the limit is 4");
  input.stop = {""};
  ExpectRefused(input, "stop string 0 is empty");
  input = Valid();
  input.stop_token_ids = {1, 2, 3};
  ExpectRefused(input, "3 stop token ids");
  input.stop_token_ids = {100};
  ExpectRefused(input, "stop token id 100");
}

}  // namespace
}  // namespace coil
