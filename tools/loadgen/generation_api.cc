#include "tools/loadgen/generation_api.h"

#include <httplib.h>

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace coil::load {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

void RunAbort(std::function<void()>& abort) {
  if (abort) abort();
}

class GrpcApi final : public GenerationApi {
 public:
  explicit GrpcApi(Client& client) : client_(client) {}

  absl::StatusOr<PromptUsage> Generate(const coil::v1::GenerateRequest& request,
                                       const std::function<void(int)>& on_tokens,
                                       RequestCancel& cancel, double timeout_s) override {
    CancelToken token;
    cancel.SetAbort([&token] { token.Cancel(); });
    CallOptions options;
    options.cancel = &token;
    if (timeout_s > 0) {
      options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
    }
    const auto on_response = [&](const coil::v1::GenerateResponse& response) {
      if (response.token_ids_size() > 0) on_tokens(response.token_ids_size());
      return true;
    };
    absl::StatusOr<Generation> result = client_.Generate(request, on_response, options);
    cancel.SetAbort(nullptr);
    if (!result.ok()) return result.status();
    PromptUsage usage;
    usage.prompt_tokens = result->final.usage().prompt_tokens();
    usage.cached_prompt_tokens = result->final.usage().cached_prompt_tokens();
    if (usage.prompt_tokens == 0 && request.has_token_ids()) {
      usage.prompt_tokens = request.token_ids().ids_size();
    }
    return usage;
  }

 private:
  Client& client_;
};

class OpenAiApi final : public GenerationApi {
 public:
  OpenAiApi(std::string host, int port, std::string model)
      : host_(std::move(host)), port_(port), model_(std::move(model)) {}

  absl::StatusOr<PromptUsage> Generate(const coil::v1::GenerateRequest& request,
                                       const std::function<void(int)>& on_tokens,
                                       RequestCancel& cancel, double timeout_s) override {
    const Clock::time_point deadline =
        timeout_s > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s))
                      : Clock::time_point::max();
    httplib::Client http(host_, port_);
    http.set_connection_timeout(10);
    // Between two reads: a queued request may wait long for its first token.
    http.set_read_timeout(timeout_s > 0 ? static_cast<time_t>(timeout_s) + 1 : 3600, 0);

    int status = 0;
    std::string error_body;
    int32_t prompt_tokens = -1;
    int32_t cached_prompt_tokens = 0;
    absl::Status stream_error;
    bool done = false;
    SseParser parser([&](const std::string& data) {
      if (data == "[DONE]") {
        done = true;
        return;
      }
      const Json event = Json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (!event.is_object()) {
        stream_error = absl::InternalError(absl::StrCat("a stream event is not JSON: ", data));
        return;
      }
      if (event.contains("error")) {
        const Json& error = event["error"];
        const std::string type = error.value("type", "");
        const std::string message = error.value("message", "");
        stream_error = type == "service_unavailable" ? absl::UnavailableError(message)
                                                     : absl::InternalError(message);
        return;
      }
      if (const auto choices = event.find("choices"); choices != event.end() && choices->is_array()) {
        for (const Json& choice : *choices) {
          const auto ids = choice.find("token_ids");
          if (ids != choice.end() && ids->is_array() && !ids->empty()) {
            on_tokens(static_cast<int>(ids->size()));
          }
        }
      }
      if (const auto usage = event.find("usage"); usage != event.end() && usage->is_object()) {
        prompt_tokens = usage->value("prompt_tokens", 0);
        if (const auto details = usage->find("prompt_tokens_details");
            details != usage->end() && details->is_object()) {
          cached_prompt_tokens = details->value("cached_tokens", 0);
        }
      }
    });

    httplib::Request post;
    post.method = "POST";
    post.path = "/v1/completions";
    post.headers = {{"Accept", "text/event-stream"}};
    post.set_header("Content-Type", "application/json");
    post.body = CompletionsBody(request, model_);
    post.response_handler = [&](const httplib::Response& response) {
      status = response.status;
      return !cancel.cancelled();
    };
    post.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (status != 200) {
        error_body.append(data, size);
        return true;
      }
      parser.Feed(data, size);
      return !cancel.cancelled() && Clock::now() < deadline;
    };
    cancel.SetAbort([&http] { http.stop(); });
    const httplib::Result result = http.send(post);
    cancel.SetAbort(nullptr);
    if (cancel.cancelled()) return absl::CancelledError("cancelled by the load generator");
    if (Clock::now() >= deadline) return absl::DeadlineExceededError("the request's --timeout passed");
    if (!result) {
      return absl::UnavailableError(
          absl::StrCat("POST http://", host_, ":", port_, "/v1/completions: ",
                       httplib::to_string(result.error())));
    }
    if (status != 200) return StatusFromHttp(status, error_body);
    if (!stream_error.ok()) return stream_error;
    if (!done) return absl::UnavailableError("the stream ended before data: [DONE]");
    if (prompt_tokens < 0) return absl::InternalError("the stream carried no usage");
    return PromptUsage{prompt_tokens, cached_prompt_tokens};
  }

 private:
  const std::string host_;
  const int port_;
  const std::string model_;
};

}  // namespace

void RequestCancel::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  RunAbort(abort_);
}

bool RequestCancel::cancelled() {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void RequestCancel::SetAbort(std::function<void()> abort) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_ = std::move(abort);
  if (cancelled_) RunAbort(abort_);
}

std::unique_ptr<GenerationApi> MakeGrpcApi(Client& client) {
  return std::make_unique<GrpcApi>(client);
}

absl::StatusOr<std::unique_ptr<GenerationApi>> MakeOpenAiApi(const std::string& target,
                                                             const std::string& model) {
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(target.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the OpenAI API target is \"", target, "\"; give HOST:PORT, coil-serve's --http-port"));
  }
  return std::make_unique<OpenAiApi>(target.substr(0, colon), port, model);
}

absl::Status StatusFromHttp(int http_status, const std::string& body) {
  const Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::string message = absl::StrCat("HTTP ", http_status);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    absl::StrAppend(&message, ": ", parsed["error"].value("message", ""));
  }
  switch (http_status) {
    case 400:
    case 413:
    case 431:
      return absl::InvalidArgumentError(message);
    case 404:
      return absl::NotFoundError(message);
    case 429:
      return absl::ResourceExhaustedError(message);
    case 503:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string CompletionsBody(const coil::v1::GenerateRequest& request, const std::string& model) {
  Json body = Json::object();
  if (!model.empty()) body["model"] = model;  // optional: coil serves one model
  if (request.has_token_ids()) {
    body["prompt"] = Json(std::vector<int32_t>(request.token_ids().ids().begin(),
                                               request.token_ids().ids().end()));
  } else {
    body["prompt"] = request.text();
  }
  const coil::v1::SamplingParams& sampling = request.sampling();
  body["max_tokens"] = sampling.max_tokens();
  body["temperature"] = sampling.temperature();
  body["ignore_eos"] = sampling.ignore_eos();
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["return_token_ids"] = true;
  return body.dump();
}

void SseParser::Feed(const char* bytes, size_t size) {
  pending_.append(bytes, size);
  size_t begin = 0;
  while (true) {
    const size_t end = pending_.find("\n\n", begin);
    if (end == std::string::npos) break;
    // An event: its "data: " lines joined by newlines (coil sends one per event).
    std::string data;
    size_t line = begin;
    while (line < end) {
      size_t stop = pending_.find('\n', line);
      if (stop == std::string::npos || stop > end) stop = end;
      const std::string_view text(pending_.data() + line, stop - line);
      if (text.substr(0, 5) == "data:") {
        std::string_view value = text.substr(5);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (!data.empty()) data += '\n';
        data.append(value);
      }
      line = stop + 1;
    }
    if (!data.empty()) on_event_(data);
    begin = end + 2;
  }
  pending_.erase(0, begin);
}

}  // namespace coil::load
