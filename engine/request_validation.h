// Checks a generation request against the serving limits before it reaches the engine
// loop, so that bad input is refused with INVALID_ARGUMENT (a message naming the field, the
// value, the limit and the fix) and never touches the scheduler or another request.
// Invariant: a request that passes can be added to a scheduler built with the same
// max_model_len; only the queue length can still refuse it.
#ifndef COIL_ENGINE_REQUEST_VALIDATION_H_
#define COIL_ENGINE_REQUEST_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "scheduler/plan.h"

namespace coil {

struct ServingLimits {
  int32_t max_model_len = 4096;  // prompt plus output tokens
  int32_t vocab_size = 0;        // token ids must be in [0, vocab_size)
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t max_stop_token_ids = 64;
  int32_t max_request_id_bytes = 256;
  // Text to tokenize (a prompt, Tokenize's text), checked before the tokenizer runs:
  // TextBytesLimit(max_model_len).
  int64_t max_text_bytes = int64_t{1} << 20;
};

// The bytes of text a server with `max_model_len` takes: 16 per token of the context and
// at least 1 MiB, far more than ordinary text needs (about 4 bytes per token), so that
// only text that cannot fit is refused unread (text built of the vocabulary's longest
// tokens can be sent as token ids).
int64_t TextBytesLimit(int32_t max_model_len);

// A Generate call after its prompt was tokenized: plain values, no protobuf.
struct GenerationInput {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::optional<int32_t> max_tokens;  // unset: up to max_model_len
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // Also keep the prefix cache's snapshot after this many prompt tokens (0: none asked).
  int32_t cache_prefix_tokens = 0;
};

absl::Status ValidateGeneration(const GenerationInput& input, const ServingLimits& limits);

// `text` (what the error calls `what`, e.g. "the prompt text") against max_text_bytes.
absl::Status ValidateText(absl::string_view what, absl::string_view text, const ServingLimits& limits);
// A client's request id against max_request_id_bytes.
absl::Status ValidateRequestId(absl::string_view request_id, const ServingLimits& limits);

}  // namespace coil

#endif  // COIL_ENGINE_REQUEST_VALIDATION_H_
