// How coil-loadgen's requests reach the server: coil's gRPC API (coil.v1.Generation, through
// coil::Client) or the OpenAI HTTP API (POST /v1/completions, streamed as server-sent
// events). Both report every output token as it arrives, the prompt tokens the server
// counted, and end with a status whose code the load report counts, so the same load can be
// compared across the two paths.
#ifndef COIL_TOOLS_LOADGEN_GENERATION_API_H_
#define COIL_TOOLS_LOADGEN_GENERATION_API_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coil/v1/generation.pb.h"
#include "engine/client/client.h"

namespace coil::load {

// Cancels one request from another thread: before it starts (it then ends at once as
// CANCELLED), or while it runs (the API closes its call). One per request.
class RequestCancel {
 public:
  void Cancel();
  bool cancelled();
  // Called by the API while a request runs: `abort` ends the call (run once, on Cancel, or
  // now when already cancelled). Cleared with nullptr when the call ends.
  void SetAbort(std::function<void()> abort);

 private:
  std::mutex mu_;
  bool cancelled_ = false;
  std::function<void()> abort_;
};

// What the server counted of a request's prompt.
struct PromptUsage {
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // resumed from the server's prefix cache
};

class GenerationApi {
 public:
  virtual ~GenerationApi() = default;
  // Sends `request` (its prompt, max_tokens, ignore_eos and temperature are what is sent,
  // and over gRPC its cache_prefix_tokens) and blocks until it ends, calling on_tokens(n)
  // whenever n output tokens arrive. Returns the prompt tokens the server counted, or the
  // status the request ended with (CANCELLED when `cancel` fired, DEADLINE_EXCEEDED past
  // `timeout_s` when that is positive).
  virtual absl::StatusOr<PromptUsage> Generate(const coil::v1::GenerateRequest& request,
                                               const std::function<void(int)>& on_tokens,
                                               RequestCancel& cancel, double timeout_s) = 0;
};

// coil.v1.Generation through `client`, which must outlive the API.
std::unique_ptr<GenerationApi> MakeGrpcApi(Client& client);

// The OpenAI API at `target` (HOST:PORT, coil-serve's --http-port): POST /v1/completions with
// the prompt as text or token ids, "stream": true, "return_token_ids": true and
// stream_options.include_usage, naming model `model` unless it is empty. INVALID_ARGUMENT for
// a malformed target.
absl::StatusOr<std::unique_ptr<GenerationApi>> MakeOpenAiApi(const std::string& target,
                                                             const std::string& model);

// The status an OpenAI API error answer stands for: 400 INVALID_ARGUMENT, 404 NOT_FOUND,
// 413 and 431 INVALID_ARGUMENT, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, other 5xx INTERNAL
// (coil's own mapping of gRPC codes to HTTP, read backwards), with the error object's message.
absl::Status StatusFromHttp(int http_status, const std::string& body);

// The body of the POST /v1/completions request that stands for `request` (exposed for tests).
std::string CompletionsBody(const coil::v1::GenerateRequest& request, const std::string& model);

// Feeds a server-sent-events byte stream and hands each complete event's data (the text after
// "data: ") to a callback, whatever the chunking of the bytes.
class SseParser {
 public:
  explicit SseParser(std::function<void(const std::string& data)> on_event)
      : on_event_(std::move(on_event)) {}
  void Feed(const char* bytes, size_t size);

 private:
  std::function<void(const std::string&)> on_event_;
  std::string pending_;
};

}  // namespace coil::load

#endif  // COIL_TOOLS_LOADGEN_GENERATION_API_H_
