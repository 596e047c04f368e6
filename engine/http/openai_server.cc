#include "engine/http/openai_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace coil::http {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting handler looks at its socket: the longest a disconnect goes unnoticed
// while no output arrives.
constexpr std::chrono::milliseconds kPollInterval(50);
// How long a handler waits for the engine loop to take its requests (one step at most).
constexpr std::chrono::seconds kAdmissionTimeout(120);

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t RandomSeed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

absl::StatusCode CodeOfHttpStatus(int status) {
  switch (status) {
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 404:
      return absl::StatusCode::kNotFound;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

void WriteError(httplib::Response& response, const ApiError& error) {
  response.status = error.status;
  response.set_content(Dump(error.ToJson()), "application/json");
}

// Set on the thread that answers connections beyond the queue: every request it reads is
// answered 503 at once.
thread_local bool tls_refusing = false;

// cpp-httplib's task queue with a fixed number of connection threads and a bounded wait:
// connections beyond threads + max_queued go to one extra thread that answers them 503
// ("too many connections") and closes them, instead of piling up without bound.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(int threads, int max_queued) : max_queued_(static_cast<size_t>(max_queued)) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(jobs_, false); });
    refuser_ = std::thread([this] { Work(overflow_, true); });
  }
  ~BoundedTaskQueue() override = default;

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.size() < max_queued_) {
        jobs_.push_back(std::move(fn));
      } else {
        overflow_.push_back(std::move(fn));
      }
    }
    cv_.notify_all();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    refuser_.join();
  }

 private:
  void Work(std::deque<std::function<void()>>& queue, bool refusing) {
    tls_refusing = refusing;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return shutdown_ || !queue.empty(); });
        if (queue.empty()) return;  // shutting down with nothing left
        fn = std::move(queue.front());
        queue.pop_front();
      }
      fn();
    }
  }

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::deque<std::function<void()>> overflow_;
  bool shutdown_ = false;
  std::vector<std::thread> workers_;
  std::thread refuser_;
};

// One HTTP generation request: its choices' engine requests and what they produced.
class Exchange {
 public:
  Exchange(EngineLoop& engine, const ProtocolContext& context, ParsedRequest request,
           std::string id, int64_t created)
      : engine_(engine),
        context_(context),
        request_(std::move(request)),
        id_(std::move(id)),
        created_(created),
        choices_(request_.choices.size()) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      choices_[i].listener.exchange = this;
      choices_[i].listener.index = i;
    }
  }
  ~Exchange() { Close(); }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  const ParsedRequest& request() const { return request_; }

  // Hands every choice to the engine; an error when it refuses at once (draining).
  std::optional<ApiError> Submit() {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& choice = choices_[i];
      const uint64_t engine_id = engine_.NextRequestId();
      choice.stream = std::make_shared<RequestStream>(engine_id, absl::StrCat(id_, "-", i));
      choice.stream->Attach(&choice.listener);
      // Counted when its stream ends: a refusal or the end of its output.
      choice.stream->ObserveEnd(engine_.OutcomeCounter());
      const absl::Status submitted = engine_.Submit(choice.stream, request_.choices[i].input);
      if (!submitted.ok()) {
        choice.ended = true;  // never reached the engine
        return FromStatus(submitted, "");
      }
    }
    return std::nullopt;
  }

  // Waits until the engine took every choice, or refused one (e.g. a full queue).
  std::optional<ApiError> WaitAdmitted() {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = Clock::now() + kAdmissionTimeout;
    for (;;) {
      for (const auto& [index, batch] : events_) {
        if (!batch.error.ok()) return FromStatus(batch.error, "");
      }
      if (admitted_ == choices_.size()) return std::nullopt;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        ApiError error;
        error.status = 503;
        error.type = "service_unavailable";
        error.message = "the engine did not take the request in time; retry later";
        return error;
      }
    }
  }

  // Waits up to `timeout` for output and applies it. With `sse`, appends the server-sent
  // events for it.
  void Pump(std::chrono::milliseconds timeout, std::string* sse) {
    std::deque<std::pair<size_t, StreamBatch>> events;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
      events.swap(events_);
    }
    for (auto& [index, batch] : events) {
      Apply(index, std::move(batch), sse);
      choices_[index].stream->WriteDone();  // lets the stream deliver what piled up
    }
    if (sse != nullptr && finished() && !closing_sent_) {
      closing_sent_ = true;
      if (request_.include_usage) {
        Json chunk = Envelope(/*chunk=*/true);
        chunk["choices"] = Json::array();
        chunk["usage"] = Usage();
        AppendEvent(chunk, *sse);
      }
      *sse += "data: [DONE]\n\n";
    }
  }

  bool finished() const {
    for (const Choice& choice : choices_) {
      if (!choice.ended) return false;
    }
    return true;
  }

  // The non-streamed response (or the error that ended a choice).
  Json FinalBody() const {
    for (const Choice& choice : choices_) {
      if (!choice.error.ok()) return FromStatus(choice.error, "").ToJson();
    }
    const bool chat = request_.endpoint == Endpoint::kChatCompletions;
    Json body = Envelope(/*chunk=*/false);
    Json choices = Json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& choice = choices_[i];
      Json out = Json::object();
      out["index"] = static_cast<int>(i);
      std::string text = choice.text;
      if (request_.echo) {
        text = request_.prompt_texts[request_.choices[i].prompt_index] + text;
      }
      if (chat) {
        out["message"] = Json{{"role", "assistant"}, {"content", text}};
      } else {
        out["text"] = text;
      }
      out["logprobs"] = request_.logprobs
                            ? LogprobsJson(request_.endpoint, choice.logprobs, *context_.tokenizer,
                                           request_.top_logprobs > 0, 0)
                            : Json();
      out["finish_reason"] = FinishReasonName(choice.finish);
      out["stop_reason"] = choice.stop_reason.empty() ? Json() : Json(choice.stop_reason);
      if (request_.return_token_ids) out["token_ids"] = choice.token_ids;
      choices.push_back(std::move(out));
    }
    body["choices"] = std::move(choices);
    body["usage"] = Usage();
    return body;
  }

  // Cancels what still runs and detaches every stream; nothing is delivered after this.
  void Close() {
    for (Choice& choice : choices_) {
      if (choice.stream == nullptr) continue;
      if (!choice.ended) engine_.Cancel(choice.stream->request_id());
      choice.stream->Detach();
      choice.stream.reset();
    }
  }

 private:
  struct Listener final : RequestStream::Listener {
    Exchange* exchange = nullptr;
    size_t index = 0;
    void Deliver(StreamBatch batch) override { exchange->OnDeliver(index, std::move(batch)); }
    void Admitted() override { exchange->OnAdmitted(); }
  };
  struct Choice {
    Listener listener;
    std::shared_ptr<RequestStream> stream;
    std::string text;
    std::vector<int32_t> token_ids;  // return_token_ids, not streamed
    std::vector<StreamLogprob> logprobs;
    int32_t completion_tokens = 0;
    int32_t cached_tokens = 0;  // prompt tokens resumed from the prefix cache
    int32_t text_offset = 0;  // completions logprobs' text_offset, streamed
    bool started = false;     // a first chunk was sent (role, echo)
    bool ended = false;
    StreamFinish finish = StreamFinish::kNone;
    std::string stop_reason;
    absl::Status error;
  };

  // Engine thread, under the stream's mutex: only queue it.
  void OnDeliver(size_t index, StreamBatch batch) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.emplace_back(index, std::move(batch));
    }
    cv_.notify_all();
  }
  void OnAdmitted() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++admitted_;
    }
    cv_.notify_all();
  }

  Json Envelope(bool chunk) const {
    const bool chat = request_.endpoint == Endpoint::kChatCompletions;
    Json body = Json::object();
    body["id"] = id_;
    body["object"] =
        chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    body["created"] = created_;
    body["model"] = request_.model;
    return body;
  }

  Json Usage() const {
    int64_t prompt = 0;
    for (int32_t tokens : request_.prompt_tokens) prompt += tokens;
    int64_t completion = 0;
    for (const Choice& choice : choices_) completion += choice.completion_tokens;
    // A prompt's cached tokens are those every one of its choices resumed from the prefix
    // cache, so that, like the prompt, they count once.
    std::vector<int64_t> cached(request_.prompt_tokens.size(), -1);
    for (size_t i = 0; i < choices_.size(); ++i) {
      int64_t& least = cached[request_.choices[i].prompt_index];
      const int64_t tokens = choices_[i].cached_tokens;
      least = least < 0 ? tokens : std::min(least, tokens);
    }
    int64_t cached_tokens = 0;
    for (const int64_t tokens : cached) cached_tokens += std::max<int64_t>(tokens, 0);
    return Json{{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", Json{{"cached_tokens", cached_tokens}}}};
  }

  static void AppendEvent(const Json& data, std::string& sse) {
    sse += "data: ";
    sse += Dump(data);
    sse += "\n\n";
  }

  void Apply(size_t index, StreamBatch batch, std::string* sse) {
    Choice& choice = choices_[index];
    if (choice.ended) return;
    choice.completion_tokens += static_cast<int32_t>(batch.token_ids.size());
    if (batch.final.has_value()) {
      choice.ended = true;
      choice.finish = batch.final->reason;
      choice.stop_reason = batch.final->matched_stop;
      choice.completion_tokens = batch.final->completion_tokens;
      choice.cached_tokens = batch.final->cached_prompt_tokens;
    }
    if (!batch.error.ok()) {
      choice.ended = true;
      choice.error = batch.error;
    }
    if (sse == nullptr) {
      choice.text += batch.text;
      choice.token_ids.insert(choice.token_ids.end(), batch.token_ids.begin(),
                              batch.token_ids.end());
      for (StreamLogprob& logprob : batch.logprobs) choice.logprobs.push_back(std::move(logprob));
      return;
    }
    if (!batch.error.ok()) {
      AppendEvent(FromStatus(batch.error, "").ToJson(), *sse);
      return;
    }
    const bool chat = request_.endpoint == Endpoint::kChatCompletions;
    std::string text = std::move(batch.text);
    Json out = Json::object();
    out["index"] = static_cast<int>(index);
    if (!choice.started) {
      choice.started = true;
      if (!chat && request_.echo) {
        text = request_.prompt_texts[request_.choices[index].prompt_index] + text;
      }
      if (chat) {
        // The role comes first, alone, as OpenAI streams it.
        Json first = Envelope(true);
        first["choices"] =
            Json::array({Json{{"index", static_cast<int>(index)},
                              {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                              {"logprobs", nullptr},
                              {"finish_reason", nullptr}}});
        if (request_.include_usage) first["usage"] = nullptr;
        AppendEvent(first, *sse);
      }
    }
    if (text.empty() && batch.token_ids.empty() && !choice.ended) return;
    if (chat) {
      out["delta"] = text.empty() && choice.ended ? Json::object() : Json{{"content", text}};
    } else {
      out["text"] = text;
    }
    if (request_.logprobs && !batch.logprobs.empty()) {
      out["logprobs"] = LogprobsJson(request_.endpoint, batch.logprobs, *context_.tokenizer,
                                     request_.top_logprobs > 0, choice.text_offset);
    } else {
      out["logprobs"] = nullptr;
    }
    if (request_.return_token_ids) out["token_ids"] = batch.token_ids;
    choice.text_offset += static_cast<int32_t>(text.size());
    const char* finish = choice.ended ? FinishReasonName(choice.finish) : nullptr;
    out["finish_reason"] = finish != nullptr ? Json(finish) : Json();
    if (choice.ended) {
      out["stop_reason"] = choice.stop_reason.empty() ? Json() : Json(choice.stop_reason);
    }
    Json chunk = Envelope(true);
    chunk["choices"] = Json::array({std::move(out)});
    if (request_.include_usage) chunk["usage"] = nullptr;
    AppendEvent(chunk, *sse);
  }

  EngineLoop& engine_;
  const ProtocolContext& context_;
  const ParsedRequest request_;
  const std::string id_;
  const int64_t created_;
  std::vector<Choice> choices_;  // sized once: listeners' addresses stay put
  bool closing_sent_ = false;

  std::mutex mu_;  // guards the two below
  std::condition_variable cv_;
  std::deque<std::pair<size_t, StreamBatch>> events_;
  size_t admitted_ = 0;
};

}  // namespace

OpenAiServer::OpenAiServer(Key, const HttpServerOptions& options, EngineLoop& engine,
                           ProtocolContext context, metrics::CoilMetrics* metrics)
    : options_(options),
      engine_(engine),
      context_(std::move(context)),
      metrics_(metrics),
      created_(UnixSeconds()),
      server_(std::make_unique<httplib::Server>()) {}

OpenAiServer::~OpenAiServer() { Stop(); }

void OpenAiServer::Stop() {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (active_exchanges_->load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(const HttpServerOptions& options,
                                                                  EngineLoop& engine,
                                                                  ProtocolContext context,
                                                                  metrics::CoilMetrics* metrics) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http-port ", options.port, " is out of range; use 0 (any free port) to 65535"));
  }
  if (options.threads < 1 || options.max_queued_connections < 0) {
    return absl::InvalidArgumentError("--http-threads must be at least 1");
  }
  auto server = std::make_unique<OpenAiServer>(Key(), options, engine, std::move(context), metrics);
  server->Route();
  httplib::Server& http = *server->server_;
  // As for the metrics endpoint: SO_REUSEADDR only, so a second process cannot share the port.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (options.port == 0) {
    server->port_ = http.bind_to_any_port(options.host);
  } else {
    server->port_ = http.bind_to_port(options.host, options.port) ? options.port : -1;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.host, ":",
                                               options.port, "; choose another --http-port"));
  }
  std::atomic<bool>* returned = &server->listen_returned_;
  server->thread_ = std::thread([&http, returned] {
    http.listen_after_bind();
    returned->store(true);
  });
  while (!http.is_running() && !returned->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!http.is_running()) {
    return absl::UnavailableError(
        absl::StrCat("the HTTP server on ", options.host, ":", server->port_, " stopped at once"));
  }
  return server;
}

void OpenAiServer::Route() {
  httplib::Server& http = *server_;
  const HttpServerOptions options = options_;
  http.new_task_queue = [options] {
    return new BoundedTaskQueue(options.threads, options.max_queued_connections);
  };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_keep_alive_timeout(options.keep_alive_seconds);
  http.set_read_timeout(options.read_timeout_seconds, 0);
  http.set_write_timeout(options.write_timeout_seconds, 0);
  http.set_tcp_nodelay(true);

  http.set_pre_routing_handler(
      [options](const httplib::Request& request, httplib::Response& response) {
        if (tls_refusing) {
          ApiError error;
          error.status = 503;
          error.type = "service_unavailable";
          error.message = "too many connections; retry later";
          WriteError(response, error);
          response.set_header("Connection", "close");
          return httplib::Server::HandlerResponse::Handled;
        }
        // cpp-httplib bounds each header line (8 KiB) but not their number.
        size_t bytes = 0;
        for (const auto& [name, value] : request.headers) bytes += name.size() + value.size() + 4;
        if (request.headers.size() > static_cast<size_t>(options.max_header_count) + 4 ||
            bytes > options.max_header_bytes) {
          ApiError error;
          error.status = 431;
          error.message =
              absl::StrCat("the request headers are over the limit (", options.max_header_count,
                           " headers, ", options.max_header_bytes, " bytes)");
          WriteError(response, error);
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  // cpp-httplib's own refusals (413, 414, 400 for bad HTTP, 404 for no route) get an
  // OpenAI error object too.
  const size_t max_body = options.max_body_bytes;
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& request, httplib::Response& response) {
        if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError error;
        error.status = response.status;
        switch (response.status) {
          case 404:
            error.code = "not_found";
            error.message = absl::StrCat("no such endpoint: ", request.method, " ", request.path,
                                         "; coil serves POST /v1/completions, POST "
                                         "/v1/chat/completions, GET /v1/models and GET /health");
            break;
          case 413:
            error.message = absl::StrCat("the request body is over the limit of ", max_body,
                                         " bytes (--http-max-body)");
            break;
          case 414:
            error.message = "the request line is over the limit of 8192 bytes";
            break;
          default:
            error.message = absl::StrCat("the request is malformed (HTTP ", response.status, ")");
        }
        WriteError(response, error);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
        ApiError error;
        error.status = 500;
        error.type = "internal_error";
        error.message = "internal error while handling the request";
        WriteError(response, error);
      });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& response) {
    if (!engine_.failure().ok()) {
      response.status = 503;
      response.set_content("{\"status\": \"failed\"}", "application/json");
      return;
    }
    if (engine_.draining()) {
      response.status = 503;
      response.set_content("{\"status\": \"draining\"}", "application/json");
      return;
    }
    response.set_content("{\"status\": \"ok\"}", "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    Json model = {{"id", context_.served_model_name},
                  {"object", "model"},
                  {"created", created_},
                  {"owned_by", "coil"},
                  {"max_model_len", context_.limits.max_model_len}};
    response.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}),
                         "application/json");
  });

  auto generation = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& request, httplib::Response& response) {
      auto refuse = [&](const ApiError& error) {
        if (metrics_ != nullptr)
          metrics_->RequestsFailed(CodeOfHttpStatus(error.status)).Increment();
        WriteError(response, error);
      };
      if (const absl::Status open = engine_.CheckAccepting(); !open.ok()) {
        refuse(FromStatus(open, ""));
        return;
      }
      std::variant<ParsedRequest, ApiError> parsed =
          ParseRequest(endpoint, request.body, context_, &RandomSeed);
      if (auto* error = std::get_if<ApiError>(&parsed)) {
        refuse(*error);
        return;
      }
      ParsedRequest& parsed_request = std::get<ParsedRequest>(parsed);
      const bool stream = parsed_request.stream;
      if (!parsed_request.ignored_parameters.empty()) {
        response.set_header("coil-ignored-parameters",
                            absl::StrJoin(parsed_request.ignored_parameters, ","));
      }
      const uint64_t first_id = engine_.NextRequestId();
      const std::string id =
          absl::StrCat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", first_id);
      auto exchange = std::make_shared<Exchange>(engine_, context_, std::move(parsed_request), id,
                                                 UnixSeconds());
      if (auto error = exchange->Submit()) {
        exchange->Close();  // the engine counted its refusal
        WriteError(response, *error);
        return;
      }
      if (auto error = exchange->WaitAdmitted()) {
        exchange->Close();  // the engine counted its refusal
        WriteError(response, *error);
        return;
      }
      // Counted until the response is written (the provider's lambdas hold the exchange).
      std::shared_ptr<std::atomic<int>> active = active_exchanges_;
      active->fetch_add(1);
      auto release = [exchange, active](bool /*success*/) {
        exchange->Close();
        active->fetch_sub(1);
      };
      if (stream) {
        response.set_header("Cache-Control", "no-cache");
        response.set_chunked_content_provider(
            "text/event-stream",
            [exchange](size_t /*offset*/, httplib::DataSink& sink) {
              std::string events;
              exchange->Pump(kPollInterval, &events);
              if (!events.empty() && !sink.write(events.data(), events.size())) return false;
              if (exchange->finished()) {
                sink.done();
                return true;
              }
              return sink.is_writable();  // false: the client left; release() cancels
            },
            release);
      } else {
        response.set_chunked_content_provider(
            "application/json",
            [exchange](size_t /*offset*/, httplib::DataSink& sink) {
              exchange->Pump(kPollInterval, nullptr);
              if (exchange->finished()) {
                const std::string body = Dump(exchange->FinalBody());
                if (!sink.write(body.data(), body.size())) return false;
                sink.done();
                return true;
              }
              return sink.is_writable();
            },
            release);
      }
    };
  };
  http.Post("/v1/completions", generation(Endpoint::kCompletions));
  http.Post("/v1/chat/completions", generation(Endpoint::kChatCompletions));
}

}  // namespace coil::http
