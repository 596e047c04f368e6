// The OpenAI API's request and response shapes, free of any HTTP server: parses a
// /v1/completions or /v1/chat/completions body into engine inputs (one per choice) and
// writes responses, stream chunks and error objects. Invariant: a request that parses is
// valid for the engine (ValidateGeneration passed for every choice), and every refusal is
// an ApiError with the HTTP status a client expects and the parameter it names.
#ifndef COIL_ENGINE_HTTP_OPENAI_PROTOCOL_H_
#define COIL_ENGINE_HTTP_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/request_stream.h"
#include "engine/request_validation.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace coil::http {

using Json = nlohmann::ordered_json;

// {"error": {"message", "type", "param", "code"}} and its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  Json ToJson() const;
};

ApiError BadParam(std::string param, std::string message);

enum class Endpoint { kCompletions, kChatCompletions };

// What the server needs to know to parse a request.
struct ProtocolContext {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const chat::ChatTemplate* chat_template = nullptr;  // null: chat answers 400
  std::string served_model_name;
  ServingLimits limits;
  int32_t max_n = 16;  // most choices one request may ask for (prompts times n)
};

// One engine request: a prompt's choice.
struct ChoiceInput {
  int32_t index = 0;         // the choice's index in the response
  int32_t prompt_index = 0;  // which prompt it continues
  GenerationInput input;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;
  // vLLM's return_token_ids: each choice (and each streamed chunk's choice) also carries the
  // output token ids it adds, so a client can count tokens exactly.
  bool return_token_ids = false;
  // completions: logprobs = N (0..20) gives N alternatives; chat: logprobs true and
  // top_logprobs N.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::vector<std::string> prompt_texts;  // per prompt, for echo
  std::vector<int32_t> prompt_tokens;     // per prompt
  std::vector<ChoiceInput> choices;
  std::vector<std::string> ignored_parameters;  // unknown names, ignored (see docs)
};

// Parses and validates a request body. `seed_source` gives a fresh seed for a choice whose
// request had none.
std::variant<ParsedRequest, ApiError> ParseRequest(Endpoint endpoint, const std::string& body,
                                                   const ProtocolContext& context,
                                                   uint64_t (*seed_source)());

// "length" or "stop" (stop string, stop token or end of sequence). A generation the server
// cuts short ends with an error instead (UNAVAILABLE: service_unavailable).
const char* FinishReasonName(StreamFinish reason);

// The logprobs of some tokens in the endpoint's format. Completions:
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, starting at `text_offset`;
// chat: {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}.
Json LogprobsJson(Endpoint endpoint, const std::vector<StreamLogprob>& logprobs,
                  const tokenizer::Tokenizer& tokenizer, bool with_top, int32_t text_offset);

// An engine error as an ApiError: INVALID_ARGUMENT 400, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE 503, anything else 500.
ApiError FromStatus(const absl::Status& status, const std::string& param);

}  // namespace coil::http

#endif  // COIL_ENGINE_HTTP_OPENAI_PROTOCOL_H_
