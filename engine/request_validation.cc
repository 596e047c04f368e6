#include "engine/request_validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/sampler.h"

namespace coil {

int64_t TextBytesLimit(int32_t max_model_len) {
  return std::max<int64_t>(int64_t{1} << 20, int64_t{16} * max_model_len);
}

absl::Status ValidateText(absl::string_view what, absl::string_view text, const ServingLimits& limits) {
  if (static_cast<int64_t>(text.size()) <= limits.max_text_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " has ", text.size(), " bytes; the limit is ", limits.max_text_bytes,
      " (16 bytes per token of --max-model-len ", limits.max_model_len,
      ", at least 1 MiB); shorten it, or send token ids"));
}

absl::Status ValidateRequestId(absl::string_view request_id, const ServingLimits& limits) {
  if (static_cast<int64_t>(request_id.size()) <= limits.max_request_id_bytes) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("request_id has ", request_id.size(),
                                                 " bytes; the limit is ",
                                                 limits.max_request_id_bytes, "; send a shorter id"));
}

absl::Status ValidateGeneration(const GenerationInput& input, const ServingLimits& limits) {
  const int64_t prompt_len = static_cast<int64_t>(input.prompt.size());
  if (prompt_len == 0) {
    return absl::InvalidArgumentError("the prompt is empty; send some text or at least one token id");
  }
  if (prompt_len >= limits.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", prompt_len, " tokens; the limit is ", limits.max_model_len - 1,
        " (--max-model-len ", limits.max_model_len, " leaves room for one output token); "
        "shorten the prompt"));
  }
  for (size_t i = 0; i < input.prompt.size(); ++i) {
    const int32_t id = input.prompt[i];
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is id ", id,
                                                     ", outside the vocabulary [0, ",
                                                     limits.vocab_size, "); send valid ids"));
    }
  }
  if (input.max_tokens.has_value()) {
    const int32_t max_tokens = *input.max_tokens;
    if (max_tokens < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_tokens is ", max_tokens, "; it must be at least 1 (leave it unset for "
          "up to the context limit)"));
    }
    if (prompt_len + max_tokens > limits.max_model_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the prompt (", prompt_len, " tokens) plus max_tokens (", max_tokens, ") is ",
          prompt_len + max_tokens, " tokens; the limit is ", limits.max_model_len,
          " (--max-model-len); lower max_tokens to at most ", limits.max_model_len - prompt_len));
    }
  }
  if (input.cache_prefix_tokens < 0 || input.cache_prefix_tokens > prompt_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_prefix_tokens is ", input.cache_prefix_tokens, "; the prompt has ",
                     prompt_len, " tokens: give the length of a prefix of it (0: none)"));
  }
  COIL_RETURN_IF_ERROR(ValidateSamplingParams(input.sampling));
  if (static_cast<int64_t>(input.stop.size()) > limits.max_stop_strings) {
    return absl::InvalidArgumentError(absl::StrCat("there are ", input.stop.size(),
                                                   " stop strings; the limit is ",
                                                   limits.max_stop_strings, "; send fewer"));
  }
  for (size_t i = 0; i < input.stop.size(); ++i) {
    const size_t bytes = input.stop[i].size();
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop string ", i, " is empty; remove it"));
    }
    if (static_cast<int64_t>(bytes) > limits.max_stop_string_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop string ", i, " has ", bytes,
                                                     " bytes; the limit is ",
                                                     limits.max_stop_string_bytes,
                                                     "; shorten it"));
    }
  }
  if (static_cast<int64_t>(input.stop_token_ids.size()) > limits.max_stop_token_ids) {
    return absl::InvalidArgumentError(absl::StrCat("there are ", input.stop_token_ids.size(),
                                                   " stop token ids; the limit is ",
                                                   limits.max_stop_token_ids, "; send fewer"));
  }
  for (int32_t id : input.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("stop token id ", id,
                                                     " is outside the vocabulary [0, ",
                                                     limits.vocab_size, "); send valid ids"));
    }
  }
  return absl::OkStatus();
}

}  // namespace coil
