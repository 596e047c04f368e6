// coil-loadgen: drives a running coil-serve with generation requests and reports throughput,
// latency percentiles and errors by gRPC code, over coil's gRPC API or (--api openai) the
// OpenAI HTTP API.
//
//   coil-loadgen --target HOST:PORT (--concurrency N | --rate R) (--duration S | --requests N)
//                [--api grpc | --api openai --http-target HOST:PORT]
//                [--prompt-tokens 128 | 64-256 | 128,32] [--prompt-source text|ids]
//                [--prompts FILE.jsonl] [--output-tokens 128] [--natural] [--warmup N]
//                [--shared-prefixes N --shared-prefix-tokens 1024-4096 [--cache-prefix]]
//                [--out FILE.json] [--summary-tsv FILE] [--label NAME] [--metrics HOST:PORT]
//
// With --metrics (the server's Prometheus endpoint) the report also counts the requests the
// server preempted during the measured phase (coil_preemptions_total before and after): a
// hybrid model's KV pages running out.
//
// With --shared-prefixes, each request is one of N fixed "system prompts" (drawn once, with
// lengths from --shared-prefix-tokens) followed by a question of its own (--prompt-tokens):
// chat traffic, for the server's prefix cache; the report counts the prompt tokens the
// server took from its cache.
//
// Closed loop: N clients, each sends its next request when the previous one ends. Open loop:
// requests arrive as a Poisson process of rate R, whatever is in flight. Every request sent
// in the measured phase ends as completed or as an error with its gRPC code, so the counts
// always add up; requests still running --drain seconds after sending stops are cancelled
// and counted as CANCELLED.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/status_macros.h"
#include "engine/client/client.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tools/loadgen/generation_api.h"
#include "tools/loadgen/load_stats.h"
#include "tools/loadgen/prompt_source.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "coil-serve's gRPC address, HOST:PORT (model info and prompt text's tokens come from it)");
ABSL_FLAG(std::string, api, "grpc",
          "how generation requests are sent: grpc (coil.v1.Generation at --target) or openai "
          "(POST /v1/completions, streamed, at --http-target)");
ABSL_FLAG(std::string, http_target, "",
          "with --api openai: coil-serve's OpenAI API address, HOST:PORT (its --http-port)");
ABSL_FLAG(std::string, model, "", "with --api openai: the model name to send (default: none)");
ABSL_FLAG(int32_t, concurrency, 0, "closed loop: this many requests in flight at all times");
ABSL_FLAG(double, rate, 0, "open loop: Poisson arrivals at this many requests per second");
ABSL_FLAG(double, duration, 0, "send requests for this many seconds");
ABSL_FLAG(int64_t, requests, 0, "send this many requests");
ABSL_FLAG(std::string, prompt_tokens, "128",
          "prompt length: N (fixed), A-B (uniform) or MEAN,STD (normal)");
ABSL_FLAG(std::string, prompt_source, "text",
          "synthetic prompts: text (cut from real text) or ids (random token ids)");
ABSL_FLAG(std::string, prompt_text_file, "", "text to cut prompts from (default: built-in prose)");
ABSL_FLAG(std::string, prompts, "", "JSONL file of prompts instead of synthetic ones");
ABSL_FLAG(int32_t, shared_prefixes, 0,
          "prefix every prompt with one of this many fixed system prompts, chosen at random "
          "(0: none)");
ABSL_FLAG(std::string, shared_prefix_tokens, "1024-4096",
          "the system prompts' lengths, as --prompt-tokens (the question's length)");
ABSL_FLAG(bool, cache_prefix, true,
          "with --shared-prefixes: send each system prompt's length as cache_prefix_tokens, "
          "as a chat front end that knows where its system prompt ends would");
ABSL_FLAG(int32_t, output_tokens, 128, "tokens to generate per request (the cap with --natural)");
ABSL_FLAG(bool, natural, false,
          "stop at the end-of-text token (natural length) instead of ignoring it");
ABSL_FLAG(int32_t, warmup, 0, "requests sent before measuring, not counted");
ABSL_FLAG(double, drain, 60, "seconds in-flight requests may run after sending stops");
ABSL_FLAG(double, timeout, 0, "deadline of each request in seconds (0: none)");
ABSL_FLAG(uint64_t, seed, 0, "random seed of prompt lengths, prompts and arrivals");
ABSL_FLAG(std::string, out, "", "write the result as JSON to this file");
ABSL_FLAG(bool, samples, false, "include every latency sample (sorted) in the JSON");
ABSL_FLAG(std::string, summary_tsv, "", "append one summary row to this TSV file");
ABSL_FLAG(std::string, ttft_cdf, "", "write the TTFT CDF (ms, fraction) to this file");
ABSL_FLAG(std::string, label, "", "name of this run in the TSV row and the JSON");
ABSL_FLAG(int32_t, connect_timeout_ms, 10000, "how long to wait for the server");
ABSL_FLAG(std::string, metrics, "",
          "HOST:PORT of coil-serve's Prometheus endpoint: also report the requests it preempted "
          "during the run (empty: not reported)");

namespace coil::load {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int32_t concurrency = 0;
  double rate = 0;
  double duration_s = 0;
  int64_t requests = 0;
  int32_t output_tokens = 0;
  bool natural = false;
  bool cache_prefix = false;  // with shared prefixes: mark where each one ends
  double drain_s = 0;
  double timeout_s = 0;
};

// Hands out requests: synthetic prompts drawn from the length spec (after one of the shared
// prefixes, when there are some), or the file's, cycled.
class RequestFactory {
 public:
  RequestFactory(const Options& options, LengthSpec lengths, std::vector<int32_t> corpus,
                 int32_t vocab_size, std::vector<Prompt> file_prompts,
                 std::vector<std::vector<int32_t>> prefixes, uint64_t seed)
      : options_(options),
        lengths_(lengths),
        corpus_(std::move(corpus)),
        vocab_size_(vocab_size),
        file_prompts_(std::move(file_prompts)),
        prefixes_(std::move(prefixes)),
        rng_(seed) {}

  coil::v1::GenerateRequest Next() {
    std::lock_guard<std::mutex> lock(mu_);
    coil::v1::GenerateRequest request;
    Prompt prompt;
    if (!file_prompts_.empty()) {
      prompt = file_prompts_[next_file_prompt_++ % file_prompts_.size()];
    } else {
      const int32_t length = lengths_.Sample(rng_);
      // Ids from 1: id 0 is GPT-NeoX's end-of-text token.
      std::vector<int32_t> question = corpus_.empty() ? RandomIds(length, 1, vocab_size_, rng_)
                                                      : CutWindow(corpus_, length, rng_);
      if (!prefixes_.empty()) {
        const std::vector<int32_t>& prefix =
            prefixes_[std::uniform_int_distribution<size_t>(0, prefixes_.size() - 1)(rng_)];
        prompt.ids = prefix;
        if (options_.cache_prefix) {
          request.set_cache_prefix_tokens(static_cast<int32_t>(prefix.size()));
        }
      }
      prompt.ids.insert(prompt.ids.end(), question.begin(), question.end());
    }
    if (prompt.text.has_value()) {
      request.set_text(*prompt.text);
    } else {
      request.mutable_token_ids()->mutable_ids()->Add(prompt.ids.begin(), prompt.ids.end());
    }
    coil::v1::SamplingParams& sampling = *request.mutable_sampling();
    sampling.set_max_tokens(prompt.output_tokens.value_or(options_.output_tokens));
    sampling.set_ignore_eos(!options_.natural);
    sampling.set_temperature(0);
    return request;
  }

 private:
  const Options options_;
  const LengthSpec lengths_;
  const std::vector<int32_t> corpus_;
  const int32_t vocab_size_;
  const std::vector<Prompt> file_prompts_;
  const std::vector<std::vector<int32_t>> prefixes_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  size_t next_file_prompt_ = 0;
};

// One phase of the run (warm-up or measured): what was sent, what is in flight, the records.
class Phase {
 public:
  explicit Phase(Clock::time_point start) : start_(start) {}

  double Now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // Sends one request and records it; blocks until it ends.
  void Execute(GenerationApi& api, const coil::v1::GenerateRequest& request, double timeout_s) {
    RequestCancel cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_all_) cancel.Cancel();
      in_flight_.insert(&cancel);
    }
    sent_.fetch_add(1);
    RequestRecord record;
    record.sent_s = Now();
    const auto on_tokens = [&](int tokens) { RecordTokens(record, Now(), tokens); };
    absl::StatusOr<PromptUsage> result = api.Generate(request, on_tokens, cancel, timeout_s);
    record.done_s = Now();
    record.code = result.status().code();
    if (result.ok()) {
      record.prompt_tokens = result->prompt_tokens;
      record.cached_prompt_tokens = result->cached_prompt_tokens;
    }
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(&cancel);
    (record.code == absl::StatusCode::kOk ? completed_ : errors_) += 1;
    records_.push_back(std::move(record));
  }

  // Cancels every request in flight and every one sent from now on.
  void CancelAll() {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all_ = true;
    for (RequestCancel* cancel : in_flight_) cancel->Cancel();
  }

  Clock::time_point start() const { return start_; }
  int64_t sent() const { return sent_.load(); }
  int64_t completed() {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_;
  }
  int64_t errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  std::vector<RequestRecord> TakeRecords() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(records_);
  }

 private:
  const Clock::time_point start_;
  std::atomic<int64_t> sent_{0};
  std::mutex mu_;
  std::set<RequestCancel*> in_flight_;
  bool cancel_all_ = false;
  int64_t completed_ = 0, errors_ = 0;
  std::vector<RequestRecord> records_;
};

// Decides whether another request may start: by count (claimed atomically) or by time.
class Budget {
 public:
  Budget(const Options& options, const Phase& phase)
      : requests_(options.requests), duration_s_(options.duration_s), phase_(phase) {}
  bool Claim() {
    if (requests_ > 0) return claimed_.fetch_add(1) < requests_;
    return phase_.Now() < duration_s_;
  }
  // Progress in [0, 1].
  double Fraction(int64_t ended) const {
    if (requests_ > 0) return static_cast<double>(ended) / static_cast<double>(requests_);
    return std::min(1.0, phase_.Now() / duration_s_);
  }

 private:
  const int64_t requests_;
  const double duration_s_;
  const Phase& phase_;
  std::atomic<int64_t> claimed_{0};
};

// Redraws one status line on stderr while the run lasts.
class ProgressBar {
 public:
  ProgressBar(Phase& phase, const Budget& budget) : phase_(phase), budget_(budget) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressBar() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    Draw();
    std::fputc('\n', stderr);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stop_; })) Draw();
  }
  void Draw() {
    const int64_t completed = phase_.completed();
    const int64_t errors = phase_.errors();
    const int64_t in_flight = phase_.sent() - completed - errors;
    const double fraction = budget_.Fraction(completed + errors);
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::fprintf(stderr, "\r[%s%s] %3d%%  %6.1f s  done %lld  errors %lld  in flight %lld   ",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 static_cast<int>(fraction * 100), phase_.Now(), static_cast<long long>(completed),
                 static_cast<long long>(errors), static_cast<long long>(in_flight));
    std::fflush(stderr);
  }

  Phase& phase_;
  const Budget& budget_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Counts what is still sending: closed-loop clients, or open-loop requests not yet ended.
class ThreadCount {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++active_;
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
    ended_.notify_all();
  }
  // True when every thread ended within `timeout_s`.
  bool WaitAll(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    return ended_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                           [&] { return active_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable ended_;
  int64_t active_ = 0;
};

// The open loop's senders: an arrival goes to an idle thread, or to a new one when all are
// busy, so the thread count follows the peak number of requests in flight rather than the
// number of arrivals.
class SenderPool {
 public:
  SenderPool(Phase& phase, GenerationApi& api, double timeout_s, ThreadCount& count)
      : phase_(phase), api_(api), timeout_s_(timeout_s), count_(count) {}
  ~SenderPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Submit(coil::v1::GenerateRequest request) {
    count_.Add();
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(request));
    if (idle_ >= queue_.size()) {
      ready_.notify_one();
    } else {
      threads_.emplace_back([this] { Loop(); });
    }
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
      --idle_;
      if (queue_.empty()) return;  // closed
      coil::v1::GenerateRequest request = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      phase_.Execute(api_, request, timeout_s_);
      count_.Done();
      lock.lock();
    }
  }

  Phase& phase_;
  GenerationApi& api_;
  const double timeout_s_;
  ThreadCount& count_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<coil::v1::GenerateRequest> queue_;
  size_t idle_ = 0;
  bool closed_ = false;
  std::vector<std::thread> threads_;
};

struct PhaseResult {
  std::vector<RequestRecord> records;
  double seconds = 0;  // from the phase's start to its last request's end
};

// Runs one phase to its end and returns its records. Once sending stops (the duration is
// over, or an open loop has sent --requests), requests in flight get --drain seconds before
// they are cancelled; a closed loop run by --requests simply waits for its last requests.
PhaseResult RunPhase(const Options& options, GenerationApi& api, RequestFactory& factory,
                     uint64_t seed, bool progress) {
  Phase phase(Clock::now());
  Budget budget(options, phase);
  std::optional<ProgressBar> bar;
  if (progress) bar.emplace(phase, budget);
  std::vector<std::thread> threads;  // closed loop
  ThreadCount count;
  std::optional<SenderPool> senders;  // open loop
  const auto at = [&](double seconds) {
    return phase.start() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  if (options.concurrency > 0) {
    for (int32_t i = 0; i < options.concurrency; ++i) {
      count.Add();
      threads.emplace_back([&] {
        while (budget.Claim()) phase.Execute(api, factory.Next(), options.timeout_s);
        count.Done();
      });
    }
    if (options.duration_s > 0) std::this_thread::sleep_until(at(options.duration_s));
  } else {
    // Poisson arrivals: exponential gaps, scheduled against absolute times so that a late
    // wake-up does not lower the rate.
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
    std::exponential_distribution<double> gap(options.rate);
    senders.emplace(phase, api, options.timeout_s, count);
    double arrival_s = 0;
    // By count: the loop ends with the last arrival. By time: it claims until the window ends.
    while (budget.Claim()) {
      arrival_s += gap(rng);
      if (options.duration_s > 0 && arrival_s >= options.duration_s) {
        std::this_thread::sleep_until(at(options.duration_s));
        break;
      }
      std::this_thread::sleep_until(at(arrival_s));
      senders->Submit(factory.Next());
    }
  }
  const bool drains = options.duration_s > 0 || options.concurrency == 0;
  if (drains && !count.WaitAll(options.drain_s)) phase.CancelAll();
  for (std::thread& t : threads) t.join();
  senders.reset();
  bar.reset();
  return {phase.TakeRecords(), phase.Now()};
}

absl::Status CheckOptions(const Options& o) {
  if ((o.concurrency > 0) == (o.rate > 0)) {
    return absl::InvalidArgumentError(
        "give exactly one of --concurrency N (closed loop) and --rate R (open loop)");
  }
  if (o.concurrency < 0 || o.rate < 0) {
    return absl::InvalidArgumentError("--concurrency and --rate must be positive");
  }
  if ((o.duration_s > 0) == (o.requests > 0)) {
    return absl::InvalidArgumentError(
        "give exactly one of --duration SECONDS and --requests N, both positive");
  }
  if (o.output_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output-tokens is ", o.output_tokens, "; it must be at least 1"));
  }
  if (o.drain_s < 0 || o.timeout_s < 0) {
    return absl::InvalidArgumentError("--drain and --timeout must not be negative");
  }
  return absl::OkStatus();
}

// The value of counter `name` on the Prometheus page at http://`hostport`/metrics.
absl::StatusOr<double> ReadCounter(const std::string& hostport, const std::string& name) {
  const size_t colon = hostport.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(hostport.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics is \"", hostport, "\"; give HOST:PORT of the metrics endpoint"));
  }
  httplib::Client http(hostport.substr(0, colon), port);
  http.set_connection_timeout(5);
  const httplib::Result got = http.Get("/metrics");
  if (!got || got->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("cannot read http://", hostport, "/metrics",
                     got ? absl::StrCat(" (HTTP ", got->status, ")") : std::string()));
  }
  const std::string prefix = name + " ";
  for (absl::string_view line : absl::StrSplit(got->body, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(prefix.size()), &value)) return value;
  }
  return absl::NotFoundError(absl::StrCat(name, " is not on http://", hostport, "/metrics"));
}

nlohmann::json ServerJson(const coil::v1::ModelInfo& info) {
  return {{"architecture", info.architecture()},
          {"d_model", info.d_model()},
          {"n_layer", info.n_layer()},
          {"vocab_size", info.vocab_size()},
          {"dtype", info.dtype()},
          {"device", info.device()},
          {"tp_size", info.tp_size()},
          {"max_model_len", info.max_model_len()},
          {"state_rows", info.state_rows_total()},
          {"prefix_cache", info.prefix_cache()},
          {"prefix_cache_max_rows", info.prefix_cache_max_rows()},
          {"kv_pages", info.kv_pages_total()},
          {"block_size", info.block_size()},
          {"num_attention_layers", info.num_attention_layers()}};
}

absl::Status WriteFile(const std::string& path, const std::string& text, bool append) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// One row of --summary-tsv (latencies in ms), with a header when the file is new or empty.
// `preemptions`: during the run, or -1 when not measured (no --metrics).
std::string SummaryRow(const std::string& path, const std::string& label, const Options& o,
                       const LoadReport& r, int64_t preemptions) {
  std::string text;
  std::ifstream existing(path);
  if (!existing || existing.peek() == std::ifstream::traits_type::eof()) {
    text =
        "label\tmode\tconcurrency\trate\tsent\tcompleted\terrors\tduration_s\treq_per_s\t"
        "out_tok_per_s\ttotal_tok_per_s\tttft_p50\tttft_p90\tttft_p99\tttft_max\titl_p50\t"
        "itl_p90\titl_p99\titl_max\te2e_p50\te2e_p90\te2e_p99\te2e_max\tprompt_tokens\t"
        "cache_hit_requests\tcached_prompt_tokens\tpreemptions\n";
  }
  absl::StrAppendFormat(&text, "%s\t%s\t%d\t%.3f\t%d\t%d\t%d\t%.3f\t%.4f\t%.2f\t%.2f", label,
                        o.concurrency > 0 ? "closed" : "open", o.concurrency, o.rate, r.sent,
                        r.completed, r.errors(), r.duration_s, r.requests_per_s,
                        r.output_tokens_per_s, r.total_tokens_per_s);
  for (const Distribution* d : {&r.ttft_s, &r.itl_s, &r.e2e_s}) {
    absl::StrAppendFormat(&text, "\t%.3f\t%.3f\t%.3f\t%.3f", d->p50 * 1e3, d->p90 * 1e3,
                          d->p99 * 1e3, d->max * 1e3);
  }
  absl::StrAppendFormat(&text, "\t%d\t%d\t%d\t%d\n", r.prompt_tokens, r.cache_hits,
                        r.cached_prompt_tokens, preemptions);
  return text;
}

absl::Status Run() {
  Options options;
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.duration_s = absl::GetFlag(FLAGS_duration);
  options.requests = absl::GetFlag(FLAGS_requests);
  options.output_tokens = absl::GetFlag(FLAGS_output_tokens);
  options.natural = absl::GetFlag(FLAGS_natural);
  options.cache_prefix = absl::GetFlag(FLAGS_cache_prefix);
  const int32_t shared_prefixes = absl::GetFlag(FLAGS_shared_prefixes);
  if (shared_prefixes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared-prefixes is ", shared_prefixes, "; give a count, or 0 for none"));
  }
  COIL_ASSIGN_OR_RETURN(const LengthSpec prefix_lengths,
                        LengthSpec::Parse(absl::GetFlag(FLAGS_shared_prefix_tokens)));
  options.drain_s = absl::GetFlag(FLAGS_drain);
  options.timeout_s = absl::GetFlag(FLAGS_timeout);
  COIL_RETURN_IF_ERROR(CheckOptions(options));
  COIL_ASSIGN_OR_RETURN(const LengthSpec lengths,
                        LengthSpec::Parse(absl::GetFlag(FLAGS_prompt_tokens)));
  const std::string source = absl::GetFlag(FLAGS_prompt_source);
  if (source != "text" && source != "ids") {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompt-source is \"", source, "\"; use text or ids"));
  }

  const std::string api_name = absl::GetFlag(FLAGS_api);
  if (api_name != "grpc" && api_name != "openai") {
    return absl::InvalidArgumentError(
        absl::StrCat("--api is \"", api_name, "\"; use grpc or openai"));
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  COIL_ASSIGN_OR_RETURN(
      std::unique_ptr<Client> client,
      Client::Connect(target, std::chrono::milliseconds(absl::GetFlag(FLAGS_connect_timeout_ms))));
  COIL_ASSIGN_OR_RETURN(const coil::v1::ModelInfo info, client->Info());
  std::unique_ptr<GenerationApi> api;
  if (api_name == "openai") {
    if (absl::GetFlag(FLAGS_http_target).empty()) {
      return absl::InvalidArgumentError(
          "--api openai needs --http-target HOST:PORT, coil-serve's --http-port");
    }
    COIL_ASSIGN_OR_RETURN(api, MakeOpenAiApi(absl::GetFlag(FLAGS_http_target), absl::GetFlag(FLAGS_model)));
  } else {
    api = MakeGrpcApi(*client);
  }

  std::vector<Prompt> file_prompts;
  std::vector<int32_t> corpus;
  if (!absl::GetFlag(FLAGS_prompts).empty()) {
    if (shared_prefixes > 0) {
      return absl::InvalidArgumentError(
          "--shared-prefixes prefixes synthetic prompts; it does not go with --prompts");
    }
    COIL_ASSIGN_OR_RETURN(file_prompts, ReadPromptsJsonl(absl::GetFlag(FLAGS_prompts)));
  } else {
    const int32_t prefix_max = shared_prefixes > 0 ? prefix_lengths.Max() : 0;
    const int32_t longest = prefix_max + lengths.Max() + options.output_tokens;
    if (info.max_model_len() > 0 && longest > info.max_model_len()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompts of up to ", prefix_max + lengths.Max(), " tokens plus ", options.output_tokens,
          " output tokens exceed the server's limit of ", info.max_model_len(),
          "; lower --shared-prefix-tokens, --prompt-tokens or --output-tokens, or raise "
          "coil-serve's --max-model-len"));
    }
    if (source == "text") {
      std::string text = DefaultPromptText();
      const std::string text_file = absl::GetFlag(FLAGS_prompt_text_file);
      if (!text_file.empty()) {
        std::ifstream in(text_file);
        if (!in)
          return absl::NotFoundError(absl::StrCat("cannot open --prompt-text-file ", text_file));
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      COIL_ASSIGN_OR_RETURN(corpus, client->Tokenize(text));
      if (corpus.empty()) {
        return absl::InvalidArgumentError("the prompt text tokenizes to nothing; give more text");
      }
      // A test model may have fewer rows than the tokenizer has ids; fold the ids into the
      // model's vocabulary (skipping id 0) so that every prompt stays valid.
      const int32_t vocab = info.vocab_size();
      if (vocab > 1 && *std::max_element(corpus.begin(), corpus.end()) >= vocab) {
        std::fprintf(stderr,
                     "coil-loadgen: the model's vocabulary (%d) is smaller than the tokenizer's; "
                     "folding the text's ids into it\n",
                     vocab);
        for (int32_t& id : corpus) id = id < vocab ? id : 1 + id % (vocab - 1);
      }
    } else if (info.vocab_size() < 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the server reports a vocabulary of ", info.vocab_size(), "; use --prompt-source text"));
    }
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  // The system prompts, drawn once from a generator of their own: the same --seed gives the
  // same ones whatever else changes (the server's cache on or off, say).
  std::vector<std::vector<int32_t>> prefixes;
  std::mt19937_64 prefix_rng(seed ^ 0x5851F42D4C957F2DULL);
  for (int32_t i = 0; i < shared_prefixes; ++i) {
    const int32_t length = prefix_lengths.Sample(prefix_rng);
    prefixes.push_back(corpus.empty() ? RandomIds(length, 1, info.vocab_size(), prefix_rng)
                                      : CutWindow(corpus, length, prefix_rng));
  }
  RequestFactory factory(options, lengths, std::move(corpus), info.vocab_size(),
                         std::move(file_prompts), std::move(prefixes), seed);
  const bool progress = isatty(STDERR_FILENO) != 0;

  if (const int32_t warmup = absl::GetFlag(FLAGS_warmup); warmup > 0) {
    Options warm = options;
    warm.rate = 0;
    warm.duration_s = 0;
    warm.requests = warmup;
    warm.concurrency = std::max(1, std::min(warmup, std::max(options.concurrency, 1)));
    const LoadReport report =
        BuildReport(RunPhase(warm, *api, factory, seed + 1, false).records);
    std::fprintf(stderr, "warm-up: %lld requests, %lld errors\n",
                 static_cast<long long>(report.sent), static_cast<long long>(report.errors()));
  }

  const std::string metrics = absl::GetFlag(FLAGS_metrics);
  double preempted_before = 0;
  if (!metrics.empty()) {
    COIL_ASSIGN_OR_RETURN(preempted_before, ReadCounter(metrics, "coil_preemptions_total"));
  }
  const PhaseResult measured = RunPhase(options, *api, factory, seed, progress);
  const LoadReport report = BuildReport(measured.records, measured.seconds);
  int64_t preemptions = -1;
  if (!metrics.empty()) {
    COIL_ASSIGN_OR_RETURN(const double after, ReadCounter(metrics, "coil_preemptions_total"));
    preemptions = static_cast<int64_t>(after - preempted_before);
  }

  const std::string label = absl::GetFlag(FLAGS_label);
  const nlohmann::json config = {
      {"label", label},
      {"target", target},
      {"api", api_name},
      {"http_target", absl::GetFlag(FLAGS_http_target)},
      {"mode", options.concurrency > 0 ? "closed" : "open"},
      {"concurrency", options.concurrency},
      {"rate", options.rate},
      {"duration_s", options.duration_s},
      {"requests", options.requests},
      {"prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens)},
      {"shared_prefixes", shared_prefixes},
      {"shared_prefix_tokens", absl::GetFlag(FLAGS_shared_prefix_tokens)},
      {"cache_prefix", shared_prefixes > 0 && options.cache_prefix},
      {"prompt_source", absl::GetFlag(FLAGS_prompts).empty() ? source : "file"},
      {"prompts_file", absl::GetFlag(FLAGS_prompts)},
      {"output_tokens", options.output_tokens},
      {"natural", options.natural},
      {"warmup", absl::GetFlag(FLAGS_warmup)},
      {"seed", seed}};
  nlohmann::json result =
      ReportToJson(report, config, ServerJson(info), absl::GetFlag(FLAGS_samples));
  if (preemptions >= 0) result["preemptions"] = preemptions;
  if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
    COIL_RETURN_IF_ERROR(WriteFile(out, result.dump(2) + "\n", false));
  }
  if (const std::string tsv = absl::GetFlag(FLAGS_summary_tsv); !tsv.empty()) {
    COIL_RETURN_IF_ERROR(
        WriteFile(tsv, SummaryRow(tsv, label, options, report, preemptions), true));
  }
  if (const std::string cdf = absl::GetFlag(FLAGS_ttft_cdf); !cdf.empty()) {
    std::string text;
    const std::vector<double>& ttft = report.ttft_s.sorted;
    for (size_t i = 0; i < ttft.size(); ++i) {
      absl::StrAppendFormat(&text, "%.4f\t%.6f\n", ttft[i] * 1e3,
                            static_cast<double>(i + 1) / static_cast<double>(ttft.size()));
    }
    COIL_RETURN_IF_ERROR(WriteFile(cdf, text, false));
  }
  const std::string load = options.concurrency > 0
                               ? absl::StrCat("closed loop, concurrency ", options.concurrency)
                               : absl::StrFormat("open loop, %.2f req/s", options.rate);
  std::printf("coil-loadgen%s%s: %s against %s over %s (TP %d)\n%s", label.empty() ? "" : " ",
              label.c_str(), load.c_str(),
              api_name == "openai" ? absl::GetFlag(FLAGS_http_target).c_str() : target.c_str(),
              api_name == "openai" ? "the OpenAI API" : "gRPC", info.tp_size(),
              FormatTable(report).c_str());
  if (preemptions >= 0) {
    std::printf("preemptions  %lld (KV pages: %d of %d tokens)\n",
                static_cast<long long>(preemptions), info.kv_pages_total(), info.block_size());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace coil::load

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coil-loadgen --target HOST:PORT (--concurrency N | --rate R) (--duration S | --requests N) "
      "[--prompt-tokens SPEC] [--output-tokens N] [--out FILE.json]");
  const std::vector<std::string> args = coil::ParseDashedCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "coil-loadgen: unexpected argument %s; every option is a --flag\n",
                 args[1].c_str());
    return 2;
  }
  const absl::Status status = coil::load::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "coil-loadgen: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
