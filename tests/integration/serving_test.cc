// coil-serve end to end: real gRPC over loopback to servers this test starts under mpirun
// (TP1 and TP2) on a tiny random model written by coil-make-model. Expected values come
// from independent runs (the same request alone, at the other TP size, without the stop
// string), from the request itself (token counts, finish reasons), or from the server's
// pool invariant (every state row free again once nothing runs).
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/client/client.h"
#include "gmock/gmock.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace coil::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kMaxModelLen = 8192;
// For requests that must still run while the test acts (about 0.15 ms per token here).
constexpr int kLongModelLen = 65536;

// The tiny model (64 wide, 2 layers, 8 heads, vocabulary 250), made once for the program.
class ServingEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>();
    model_dir_ = dir_->path() + "/tiny";
    absl::StatusOr<int> code = RunProgram(
        {COIL_MAKE_MODEL_PATH, "--shape", "tiny", "--out", model_dir_}, dir_->path() + "/make.log");
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << "coil-make-model failed";
  }
  void TearDown() override {
    tp1_.reset();
    tp2_.reset();
    dir_.reset();
  }

  static ServingEnvironment* Get() { return instance_; }
  static void Set(ServingEnvironment* env) { instance_ = env; }
  const std::string& model_dir() const { return model_dir_; }

  // Shared servers: 8 state rows, so 50 clients queue and share batches.
  ServerProcess& Tp(int ranks) {
    std::unique_ptr<ServerProcess>& server = ranks == 1 ? tp1_ : tp2_;
    if (server == nullptr) {
      ServerOptions options;
      options.ranks = ranks;
      options.flags = {"--state-rows", "8", "--max-queue", "64", "--max-model-len",
                       std::to_string(kMaxModelLen), "--max-batched-tokens", "256"};
      auto started = ServerProcess::Start(model_dir_, options);
      EXPECT_TRUE(started.ok()) << started.status();
      if (started.ok()) server = std::move(started).value();
    }
    return *server;
  }
  bool has(int ranks) const { return (ranks == 1 ? tp1_ : tp2_) != nullptr; }

 private:
  static inline ServingEnvironment* instance_ = nullptr;
  std::unique_ptr<TempDir> dir_;
  std::string model_dir_;
  std::unique_ptr<ServerProcess> tp1_;
  std::unique_ptr<ServerProcess> tp2_;
};

coil::v1::GenerateRequest IdsRequest(const std::vector<int32_t>& ids, int32_t max_tokens,
                                     float temperature = 0.0f, uint64_t seed = 0) {
  coil::v1::GenerateRequest request;
  for (int32_t id : ids) request.mutable_token_ids()->add_ids(id);
  request.mutable_sampling()->set_max_tokens(max_tokens);
  request.mutable_sampling()->set_temperature(temperature);
  request.mutable_sampling()->set_seed(seed);
  request.mutable_sampling()->set_ignore_eos(true);
  return request;
}

// A distinct prompt per client index.
std::vector<int32_t> PromptFor(int index) {
  return {static_cast<int32_t>(2 + index % 200), static_cast<int32_t>(7 + (index * 13) % 240),
          static_cast<int32_t>(11 + (index * 29) % 230), static_cast<int32_t>(3 + index)};
}

// Waits until the server shows every state row free (or holding a prefix-cache snapshot,
// which any request may take back) and nothing waiting or running.
void ExpectAllRowsFree(Client& client) {
  coil::v1::ModelInfo info;
  for (int attempt = 0; attempt < 250; ++attempt) {
    auto got = client.Info();
    ASSERT_TRUE(got.ok()) << got.status();
    info = *got;
    if (info.state_rows_free() + info.prefix_cache_rows() == info.state_rows_total() &&
        info.running_requests() == 0 && info.waiting_requests() == 0) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL() << "rows still held: " << info.DebugString();
}

Client& Tp1() { return ServingEnvironment::Get()->Tp(1).client(); }

TEST(ServingTest, HealthInfoAndReflection) {
  ServerProcess& server = ServingEnvironment::Get()->Tp(1);
  auto serving = server.client().Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  // Health answers for the service by name too.
  auto named = server.client().Health("coil.v1.Generation");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_TRUE(*named);
  auto info = server.client().Info();
  ASSERT_TRUE(info.ok()) << info.status();
  // coil-make-model's tiny shape: d_model 64, 2 layers, vocab 250, headdim 16, expand 2.
  EXPECT_EQ(info->architecture(), "mamba2");
  EXPECT_EQ(info->d_model(), 64);
  EXPECT_EQ(info->n_layer(), 2);
  EXPECT_EQ(info->vocab_size(), 250);
  EXPECT_EQ(info->nheads(), 8);
  EXPECT_EQ(info->tp_size(), 1);
  EXPECT_EQ(info->max_model_len(), kMaxModelLen);
  EXPECT_EQ(info->state_rows_total(), 8);

  // Server reflection: list the services.
  auto channel = grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> names;
  for (const auto& service : response.list_services_response().service()) {
    names.push_back(service.name());
  }
  EXPECT_THAT(names, ::testing::Contains("coil.v1.Generation"));
  EXPECT_THAT(names, ::testing::Contains("grpc.health.v1.Health"));
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

// The tiny model's tokenizer is cut to its 250 ids: text prompts (any UTF-8) encode to ids
// the model has, Detokenize agrees with ModelInfo about the vocabulary, and a text prompt
// generates like the same prompt sent as its token ids (which Tokenize gives).
void ExpectTextPromptsWork(Client& client) {
  auto info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->vocab_size(), 250);
  const std::string text = "Hello, world! Ünïcødé ✓ 数 🙂 tabs\tand\nlines";
  auto ids = client.Tokenize(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  for (int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, info->vocab_size());
  }
  auto back = client.Detokenize(*ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  EXPECT_TRUE(client.Detokenize({info->vocab_size() - 1}).ok());
  EXPECT_EQ(client.Detokenize({info->vocab_size()}).status().code(),
            absl::StatusCode::kInvalidArgument);
  coil::v1::GenerateRequest by_text = IdsRequest({}, 6);
  by_text.clear_token_ids();
  by_text.set_text(text);
  auto from_text = client.Generate(by_text);
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  auto from_ids = client.Generate(IdsRequest(*ids, 6));
  ASSERT_TRUE(from_ids.ok()) << from_ids.status();
  EXPECT_EQ(from_text->token_ids, from_ids->token_ids);
  EXPECT_EQ(from_text->final.usage().prompt_tokens(), static_cast<int32_t>(ids->size()));
}

TEST(ServingTest, TextPromptsWorkOnTheTinyModelTp1) { ExpectTextPromptsWork(Tp1()); }

TEST(ServingTest, TextPromptsWorkOnTheTinyModelTp2) {
  ExpectTextPromptsWork(ServingEnvironment::Get()->Tp(2).client());
}

TEST(ServingTest, StreamsTokensAndText) {
  Client& client = Tp1();
  std::vector<int32_t> streamed;
  int calls = 0;
  auto generation = client.Generate(IdsRequest({5, 6, 7}, 12), [&](const auto& response) {
    ++calls;
    streamed.insert(streamed.end(), response.token_ids().begin(), response.token_ids().end());
    return true;
  });
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(generation->token_ids.size(), 12u);
  EXPECT_EQ(streamed, generation->token_ids);
  // The first token is written alone (no write in flight yet) and the final response
  // follows it, so 12 tokens arrive in at least two messages.
  EXPECT_GE(calls, 2);
  EXPECT_EQ(generation->final.finish_reason(), coil::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(generation->final.usage().prompt_tokens(), 3);
  EXPECT_EQ(generation->final.usage().completion_tokens(), 12);
  EXPECT_GT(generation->final.timings().total_seconds(), 0.0);
  EXPECT_GE(generation->final.timings().total_seconds(),
            generation->final.timings().time_to_first_token_seconds());
  for (int32_t id : generation->token_ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 250);
  }
  // The streamed text is the detokenized tokens (special tokens skipped).
  auto text = client.Detokenize(generation->token_ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(generation->text, *text);
  ExpectAllRowsFree(client);
}

// Greedy with logprobs: each token is the argmax, so it is the first of its alternatives and
// carries that alternative's logprob; alternatives come most likely first; logprobs <= 0.
TEST(ServingTest, LogprobsOfGreedyTokens) {
  coil::v1::GenerateRequest request = IdsRequest({12, 34, 56}, 6);
  request.mutable_sampling()->set_logprobs(true);
  request.mutable_sampling()->set_top_logprobs(3);
  auto generation = Tp1().Generate(request);
  ASSERT_TRUE(generation.ok()) << generation.status();
  ASSERT_EQ(generation->logprobs.size(), 6u);
  for (size_t i = 0; i < generation->logprobs.size(); ++i) {
    const coil::v1::TokenLogprob& logprob = generation->logprobs[i];
    EXPECT_EQ(logprob.token_id(), generation->token_ids[i]);
    EXPECT_LE(logprob.logprob(), 0.0f);
    ASSERT_EQ(logprob.top_size(), 3);
    EXPECT_EQ(logprob.top(0).token_id(), logprob.token_id());
    EXPECT_FLOAT_EQ(logprob.top(0).logprob(), logprob.logprob());
    EXPECT_GE(logprob.top(0).logprob(), logprob.top(1).logprob());
    EXPECT_GE(logprob.top(1).logprob(), logprob.top(2).logprob());
  }
}

// The value of one sample line ("name{labels} value") of a Prometheus text page; -1 if absent.
double MetricValue(const std::string& page, const std::string& series) {
  const std::string prefix = series + " ";
  for (size_t at = 0; at < page.size();) {
    const size_t end = page.find('\n', at);
    const std::string line = page.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return -1.0;
}

// One request of 7 tokens moves the counters by exactly its own figures (the test runs
// alone against this server).
TEST(ServingTest, MetricsCountARequest) {
  ServerProcess& server = ServingEnvironment::Get()->Tp(1);
  ASSERT_GT(server.metrics_port(), 0);
  const std::string length = "coil_requests_finished_total{reason=\"length\"}";
  // A call is counted when gRPC is done with it, a moment after its client returns: wait
  // for the earlier tests' last call, then for this one.
  absl::StatusOr<std::string> before = server.FetchMetrics();
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    absl::StatusOr<std::string> again = server.FetchMetrics();
    ASSERT_TRUE(before.ok() && again.ok()) << before.status() << " " << again.status();
    if (MetricValue(*again, length) == MetricValue(*before, length)) break;
    before = again;
  }
  auto generation = server.client().Generate(IdsRequest({5, 9, 13, 17, 21}, 7));
  ASSERT_TRUE(generation.ok()) << generation.status();
  ExpectAllRowsFree(server.client());  // the gauges are set before the snapshot it reads
  absl::StatusOr<std::string> after;
  for (int attempt = 0; attempt < 100; ++attempt) {
    after = server.FetchMetrics();
    ASSERT_TRUE(after.ok()) << after.status();
    if (MetricValue(*after, length) > MetricValue(*before, length)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(MetricValue(*after, "coil_generated_tokens_total") -
                MetricValue(*before, "coil_generated_tokens_total"), 7.0);
  EXPECT_EQ(MetricValue(*after, "coil_prompt_tokens_total") -
                MetricValue(*before, "coil_prompt_tokens_total"), 5.0);
  EXPECT_EQ(MetricValue(*after, "coil_requests_finished_total{reason=\"length\"}") -
                MetricValue(*before, "coil_requests_finished_total{reason=\"length\"}"), 1.0);
  EXPECT_EQ(
      MetricValue(*after, "coil_state_rows_free") + MetricValue(*after, "coil_prefix_cache_rows"),
      8.0);
}

// Prefix caching through the API at TP1 and TP2: a prompt sent again resumes from the
// snapshot its first run left at its last whole chunk (the tiny model's chunk is 8: 25
// tokens leave one at 24) and gives the first run's tokens and logprobs exactly; another
// question after the same 20 tokens resumes at 16, the cut the first request asked for
// (20 rounded down). The hits show in the usage and in the metrics.
TEST(ServingTest, PrefixCacheResumesSharedPromptsExactly) {
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("TP", ranks));
    ServerProcess& server = ServingEnvironment::Get()->Tp(ranks);
    auto info = server.client().Info();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(info->prefix_cache());
    auto before = server.FetchMetrics();
    ASSERT_TRUE(before.ok()) << before.status();
    // Tokens no other test sends, so that nothing of them is cached yet.
    std::vector<int32_t> shared;
    for (int32_t i = 0; i < 20; ++i) shared.push_back(100 + ranks * 40 + i);
    std::vector<int32_t> prompt = shared;
    prompt.insert(prompt.end(), {3, 1, 4, 1, 5});
    coil::v1::GenerateRequest request = IdsRequest(prompt, 10, 0.8f, 99);
    request.mutable_sampling()->set_logprobs(true);
    request.set_cache_prefix_tokens(20);
    auto cold = server.client().Generate(request);
    ASSERT_TRUE(cold.ok()) << cold.status();
    EXPECT_EQ(cold->final.usage().cached_prompt_tokens(), 0);
    auto warm = server.client().Generate(request);
    ASSERT_TRUE(warm.ok()) << warm.status();
    EXPECT_EQ(warm->final.usage().cached_prompt_tokens(), 24);
    EXPECT_EQ(warm->final.usage().prompt_tokens(), 25);
    EXPECT_EQ(warm->token_ids, cold->token_ids);
    ASSERT_EQ(warm->logprobs.size(), cold->logprobs.size());
    for (size_t i = 0; i < cold->logprobs.size(); ++i) {
      EXPECT_EQ(warm->logprobs[i].logprob(), cold->logprobs[i].logprob()) << "token " << i;
    }
    std::vector<int32_t> other = shared;
    other.insert(other.end(), {2, 7, 1, 8});
    auto resumed = server.client().Generate(IdsRequest(other, 4));
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->final.usage().cached_prompt_tokens(), 16);
    ExpectAllRowsFree(server.client());
    auto after = server.FetchMetrics();
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(MetricValue(*after, "coil_prefix_cache_hits_total") -
                  MetricValue(*before, "coil_prefix_cache_hits_total"),
              2.0);
    EXPECT_EQ(MetricValue(*after, "coil_prefix_cache_misses_total") -
                  MetricValue(*before, "coil_prefix_cache_misses_total"),
              1.0);
    EXPECT_EQ(MetricValue(*after, "coil_prefix_cache_hit_tokens_total") -
                  MetricValue(*before, "coil_prefix_cache_hit_tokens_total"),
              40.0);
    EXPECT_GT(MetricValue(*after, "coil_prefix_cache_rows"), 0.0);
  }
  // A cut past the prompt's end is bad input.
  coil::v1::GenerateRequest bad = IdsRequest({1, 2, 3}, 2);
  bad.set_cache_prefix_tokens(4);
  auto refused = Tp1().Generate(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("cache_prefix_tokens is 4"));
}

// The request counters by outcome: "OK" (finished, every reason) and each error code, read
// from coil_requests_finished_total and coil_requests_failed_total.
std::map<std::string, double> OutcomeCounts(const std::string& page) {
  std::map<std::string, double> counts;
  for (size_t at = 0; at < page.size();) {
    size_t end = page.find('\n', at);
    if (end == std::string::npos) end = page.size();
    const std::string line = page.substr(at, end - at);
    at = end + 1;
    const bool finished = line.rfind("coil_requests_finished_total{", 0) == 0;
    const bool failed = line.rfind("coil_requests_failed_total{code=\"", 0) == 0;
    if (!finished && !failed) continue;
    const size_t close = line.find("} ");
    if (close == std::string::npos) continue;
    const double value = std::stod(line.substr(close + 2));
    if (finished) {
      counts["OK"] += value;
    } else {
      const size_t begin = std::string("coil_requests_failed_total{code=\"").size();
      counts[line.substr(begin, close - 1 - begin)] += value;
    }
  }
  return counts;
}

std::string StatusCodeName(absl::StatusCode code) {
  return code == absl::StatusCode::kOk ? "OK" : absl::StatusCodeToString(code);
}

// The request counters, outcome by outcome, from a page of /metrics.
std::map<std::string, double> OutcomeDeltas(const std::string& page,
                                            const std::map<std::string, double>& before) {
  std::map<std::string, double> moved;
  for (const auto& [outcome, value] : OutcomeCounts(page)) {
    const double delta = value - (before.count(outcome) ? before.at(outcome) : 0.0);
    if (delta != 0) moved[outcome] = delta;
  }
  return moved;
}

double Sum(const std::map<std::string, double>& counts) {
  double total = 0;
  for (const auto& [key, value] : counts) total += value;
  return total;
}

// A storm of 240 concurrent requests with every kind of ending: finished, refused as
// invalid, refused because the queue is full, cancelled by the client before its first
// token (queued or in prefill: its prompt is long) and after it, past a short deadline
// (queued or in prefill) and a longer one (mid-stream). Each request is counted once (the
// counters' sum is the number sent), under the code its client saw but for the one race
// below; every row is free again afterwards.
void ExpectStormCountedOnce(ServerProcess& server) {
  ASSERT_GT(server.metrics_port(), 0);
  Client& client = server.client();
  ExpectAllRowsFree(client);
  auto before_page = server.FetchMetrics();
  ASSERT_TRUE(before_page.ok()) << before_page.status();
  const std::map<std::string, double> before = OutcomeCounts(*before_page);
  constexpr int kRequests = 240;
  std::vector<absl::StatusCode> codes(kRequests);
  std::vector<int> tokens_seen(kRequests, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      coil::v1::GenerateRequest request = IdsRequest(PromptFor(i), 6 + i % 5);
      CallOptions options;
      CancelToken token;
      bool cancel_after_first = false;
      std::thread canceller;
      switch (i % 8) {
        case 0:  // refused by validation
          request.mutable_token_ids()->add_ids(100000);
          break;
        case 1:  // cancelled by the client once it streams
          request.mutable_sampling()->set_max_tokens(kMaxModelLen - 8);
          cancel_after_first = true;
          break;
        case 2:  // its deadline passes mid-stream (or while it waits for a row)
          request.mutable_sampling()->set_max_tokens(kMaxModelLen - 8);
          options.timeout = std::chrono::milliseconds(300);
          break;
        case 3:  // its deadline passes while it waits or is prefilled
          options.timeout = std::chrono::milliseconds(50);
          break;
        case 4:  // cancelled before its first token: a long prompt, cancelled 20 ms in
          for (int k = 0; k < 3000; ++k) request.mutable_token_ids()->add_ids(3 + (i + k) % 240);
          options.cancel = &token;
          canceller = std::thread([&token] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20 * TimeScale()));
            token.Cancel();
          });
          break;
        default:  // finishes (or is refused RESOURCE_EXHAUSTED when the queue is full)
          break;
      }
      auto generation = client.Generate(
          request,
          [&](const coil::v1::GenerateResponse& response) {
            tokens_seen[i] += response.token_ids_size();
            return !cancel_after_first;
          },
          options);
      codes[i] = generation.status().code();
      if (canceller.joinable()) canceller.join();
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::map<std::string, double> seen;
  for (absl::StatusCode code : codes) seen[StatusCodeName(code)] += 1;
  // A call is counted when gRPC is done with it, which can follow the client's return by a
  // moment: wait until every request is counted (or those gRPC dropped stay missing).
  std::map<std::string, double> moved;
  for (int attempt = 0; attempt < 100 && Sum(moved) < kRequests; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto page = server.FetchMetrics();
    ASSERT_TRUE(page.ok()) << page.status();
    moved = OutcomeDeltas(*page, before);
  }
  const std::string both =
      "server: " + ::testing::PrintToString(moved) + " clients: " + ::testing::PrintToString(seen);
  // Each request that reached coil is counted once, as the status the server sent, unless
  // gRPC reports the call cancelled or expired before that status went out. Two things
  // stand between that and the clients' counts, and only for requests their clients
  // abandoned (cancelled, or with a deadline):
  // - a call cancelled (or expired) while it still waited in gRPC's own queue on this
  //   busy server never reaches coil, and is not counted at all;
  // - a client that cancels while the status is on its way sees CANCELLED where the
  //   server counted what it sent (a full queue's RESOURCE_EXHAUSTED, or the finish).
  // So the server's CANCELLED and DEADLINE_EXCEEDED fall short of the clients' by exactly
  // those two, and every other code matches exactly.
  const double dropped = kRequests - Sum(moved);
  EXPECT_GE(dropped, 0) << both;
  std::map<std::string, double> abandoned_sent;  // server minus clients, for sent codes
  for (const char* code : {"RESOURCE_EXHAUSTED", "OK"}) {
    abandoned_sent[code] = moved[code] - seen[code];
    EXPECT_GE(abandoned_sent[code], 0) << code << " " << both;
  }
  // A deadline is told from a cancel by the server's copy of it, which starts when gRPC
  // reads the call: a sanitizer build reads calls so late that its copy can run hundreds of
  // milliseconds behind the client's, past the 100 ms the server allows, so there the two
  // are only checked together.
  if (TimeScale() == 1) {
    EXPECT_LE(moved["CANCELLED"], seen["CANCELLED"]) << both;
    EXPECT_LE(moved["DEADLINE_EXCEEDED"], seen["DEADLINE_EXCEEDED"]) << both;
  }
  EXPECT_EQ(seen["CANCELLED"] + seen["DEADLINE_EXCEEDED"] - moved["CANCELLED"] -
                moved["DEADLINE_EXCEEDED"],
            abandoned_sent["RESOURCE_EXHAUSTED"] + abandoned_sent["OK"] + dropped)
      << both;
  // Most abandoned requests reach coil and are counted as their clients saw them.
  EXPECT_GT(moved["CANCELLED"] + moved["DEADLINE_EXCEEDED"],
            (seen["CANCELLED"] + seen["DEADLINE_EXCEEDED"]) / 2)
      << both;
  EXPECT_EQ(moved["INVALID_ARGUMENT"], seen["INVALID_ARGUMENT"]) << both;
  for (const auto& [code, count] : moved) {
    if (code == "RESOURCE_EXHAUSTED" || code == "OK" || code == "CANCELLED" ||
        code == "DEADLINE_EXCEEDED") {
      continue;
    }
    EXPECT_EQ(count, seen[code]) << code << " " << both;
  }
  EXPECT_GT(seen["INVALID_ARGUMENT"], 0);
  EXPECT_GT(seen["CANCELLED"], 0);
  EXPECT_GT(seen["DEADLINE_EXCEEDED"], 0);
  // Cancelled before the first token.
  int early_cancels = 0;
  for (int i = 4; i < kRequests; i += 8) {
    early_cancels += codes[i] == absl::StatusCode::kCancelled && tokens_seen[i] == 0 ? 1 : 0;
  }
  EXPECT_GT(early_cancels, 0);
  ExpectAllRowsFree(client);
}

TEST(ServingTest, RequestCountersAddUpInAStormTp1) {
  ExpectStormCountedOnce(ServingEnvironment::Get()->Tp(1));
}

TEST(ServingTest, RequestCountersAddUpInAStormTp2) {
  ExpectStormCountedOnce(ServingEnvironment::Get()->Tp(2));
}

TEST(ServingTest, StopStringEndsGenerationAndNeverLeaks) {
  Client& client = Tp1();
  // A reference run without stops, then the same request stopping at a piece of its text.
  // Sampled (seeded) rather than greedy: the random model's argmax repeats one token.
  const coil::v1::GenerateRequest base = IdsRequest({9, 8, 7, 6}, 40, 1.0f, 12345);
  auto reference = client.Generate(base);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string& text = reference->text;
  ASSERT_GE(text.size(), 6u) << "the tiny model produced too little text to cut";
  // Two bytes from the middle, kept on a character boundary (ASCII bytes only).
  size_t cut = text.size() / 2;
  while (cut + 2 < text.size() && (static_cast<unsigned char>(text[cut]) >= 0x80 ||
                                   static_cast<unsigned char>(text[cut + 1]) >= 0x80)) {
    ++cut;
  }
  if (cut + 2 >= text.size()) GTEST_SKIP() << "no ASCII pair in the reference text";
  const std::string stop = text.substr(cut, 2);
  const std::string expected = text.substr(0, text.find(stop));
  coil::v1::GenerateRequest request = base;
  request.mutable_sampling()->add_stop(stop);
  std::string streamed;
  auto stopped = client.Generate(request, [&](const auto& response) {
    streamed += response.text();
    return true;
  });
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->text, expected);
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(stopped->final.finish_reason(), coil::v1::FINISH_REASON_STOP);
  EXPECT_EQ(stopped->final.matched_stop(), stop);
  EXPECT_LE(stopped->token_ids.size(), reference->token_ids.size());
  ExpectAllRowsFree(client);
}

// 50 clients at once, each with its own prompt and seed: each gets exactly the tokens its
// request gives alone (batch invariance, and no stream mixed up with another).
TEST(ServingTest, FiftyConcurrentClientsGetTheirOwnStreams) {
  Client& client = Tp1();
  constexpr int kClients = 50;
  std::vector<std::vector<int32_t>> alone(kClients);
  for (int i = 0; i < kClients; ++i) {
    auto generation = client.Generate(IdsRequest(PromptFor(i), 10, i % 2 ? 0.9f : 0.0f, 1000 + i));
    ASSERT_TRUE(generation.ok()) << generation.status();
    alone[i] = generation->token_ids;
  }
  std::vector<std::vector<int32_t>> together(kClients);
  std::vector<std::string> ids(kClients);
  std::vector<absl::Status> statuses(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      coil::v1::GenerateRequest request = IdsRequest(PromptFor(i), 10, i % 2 ? 0.9f : 0.0f, 1000 + i);
      request.set_request_id(absl::StrCat("client-", i));
      // The id comes once, in the first response.
      bool first = true;
      auto generation = client.Generate(request, [&](const auto& response) {
        const std::string expected = first ? absl::StrCat("client-", i) : "";
        if (response.request_id() != expected) ids[i] = response.request_id();
        first = false;
        return true;
      });
      statuses[i] = generation.status();
      if (generation.ok()) together[i] = generation->token_ids;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << "client " << i << ": " << statuses[i];
    EXPECT_TRUE(ids[i].empty()) << "client " << i << " received a response with id " << ids[i];
    EXPECT_EQ(together[i], alone[i]) << "client " << i;
  }
  ExpectAllRowsFree(client);
}

// The same requests at TP2 give the same tokens as at TP1 (greedy and seeded sampling).
TEST(ServingTest, Tp2GivesTheSameTokensAsTp1) {
  Client& tp1 = Tp1();
  Client& tp2 = ServingEnvironment::Get()->Tp(2).client();
  auto info = tp2.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tp_size(), 2);
  for (int i = 0; i < 6; ++i) {
    const coil::v1::GenerateRequest request =
        IdsRequest(PromptFor(i), 16, i % 2 ? 0.8f : 0.0f, 77 + i);
    auto one = tp1.Generate(request);
    auto two = tp2.Generate(request);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(one->token_ids, two->token_ids) << "request " << i;
    EXPECT_EQ(one->text, two->text) << "request " << i;
  }
  ExpectAllRowsFree(tp2);
}

TEST(ServingTest, CancelMidStreamFreesTheRow) {
  Client& client = Tp1();
  int responses = 0;
  auto generation = client.Generate(IdsRequest({4, 4, 4}, kMaxModelLen - 3),
                                    [&](const auto&) { return ++responses < 2; });
  EXPECT_EQ(generation.status().code(), absl::StatusCode::kCancelled) << generation.status();
  ExpectAllRowsFree(client);
}

TEST(ServingTest, ExpiredDeadlineFreesTheRow) {
  Client& client = Tp1();
  CallOptions options;
  // 8189 tokens take at least 0.2 s here even on an idle machine: the deadline expires
  // mid-stream.
  options.timeout = std::chrono::milliseconds(40);
  auto generation = client.Generate(IdsRequest({4, 5, 4}, kMaxModelLen - 3), nullptr, options);
  EXPECT_EQ(generation.status().code(), absl::StatusCode::kDeadlineExceeded) << generation.status();
  ExpectAllRowsFree(client);
}

// Long generations holding every row of the shared server until Release (each then ends
// CANCELLED), so that a request sent meanwhile waits in the queue.
class RowHolders {
 public:
  RowHolders(Client& client, int rows) : tokens_(rows) {
    for (int i = 0; i < rows; ++i) {
      threads_.emplace_back([&client, this, i] {
        CallOptions options;
        options.cancel = &tokens_[i];
        client.Generate(IdsRequest({4, 7, 4, static_cast<int32_t>(i)}, kLongModelLen - 8), nullptr,
                        options)
            .IgnoreError();
      });
    }
  }
  ~RowHolders() { Release(); }
  void Release() {
    for (CancelToken& token : tokens_) token.Cancel();
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
  }

 private:
  std::vector<CancelToken> tokens_;
  std::vector<std::thread> threads_;
};

// Waits until the server shows at least `running` running and `waiting` waiting requests.
void WaitForLoad(Client& client, int running, int waiting) {
  for (int attempt = 0; attempt < 500; ++attempt) {
    auto info = client.Info();
    ASSERT_TRUE(info.ok()) << info.status();
    if (info->running_requests() >= running && info->waiting_requests() >= waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "the server never showed " << running << " running and " << waiting << " waiting";
}

// Every way a request can end, one at a time, on a server of its own with a long context
// (so a holder of a row outlasts the test): the client sees the code it expects, the
// counters move by exactly that one request under that code (nothing else moves), and
// every state row is free again (or holds a prefix-cache snapshot, which the next request
// takes back when it needs the row).
TEST(ServingTest, EveryEndingIsCountedOnceAndFreesItsRow) {
  ServerOptions server_options;
  server_options.flags = {"--state-rows", "2", "--max-queue", "8", "--max-model-len",
                          std::to_string(kLongModelLen), "--max-batched-tokens", "256"};
  auto started = ServerProcess::Start(ServingEnvironment::Get()->model_dir(), server_options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  Client& client = server.client();
  auto page = server.FetchMetrics();
  ASSERT_TRUE(page.ok()) << page.status();
  std::map<std::string, double> expected;  // the counters' moves so far
  const std::map<std::string, double> before = OutcomeCounts(*page);
  auto expect_counted = [&](const std::string& ending,
                            const std::map<std::string, double>& outcomes) {
    SCOPED_TRACE(ending);
    for (const auto& [outcome, count] : outcomes) expected[outcome] += count;
    std::map<std::string, double> moved;
    for (int attempt = 0; attempt < 250 && moved != expected; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto now = server.FetchMetrics();
      ASSERT_TRUE(now.ok()) << now.status();
      moved = OutcomeDeltas(*now, before);
    }
    EXPECT_EQ(moved, expected);
    ExpectAllRowsFree(client);
  };
  auto code_of = [](const absl::StatusOr<Generation>& generation) {
    return StatusCodeName(generation.status().code());
  };

  // Finished by length.
  auto finished = client.Generate(IdsRequest({5, 6, 7}, 4));
  ASSERT_TRUE(finished.ok()) << finished.status();
  expect_counted("max_tokens", {{"OK", 1}});
  // Finished by a stop token id (the first token greedy decoding gives).
  coil::v1::GenerateRequest stopping = IdsRequest({5, 6, 7}, 40);
  stopping.mutable_sampling()->add_stop_token_ids(finished->token_ids.at(0));
  auto stopped = client.Generate(stopping);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->final.finish_reason(), coil::v1::FINISH_REASON_STOP);
  expect_counted("stop token", {{"OK", 1}});
  // Cancelled after its first token, and its deadline passing mid-stream.
  int tokens = 0;
  auto cancelled = client.Generate(IdsRequest({4, 4, 9}, kLongModelLen - 8), [&](const auto& response) {
    tokens += response.token_ids_size();
    return false;
  });
  EXPECT_EQ(code_of(cancelled), "CANCELLED");
  EXPECT_GT(tokens, 0);
  expect_counted("cancel after the first token", {{"CANCELLED", 1}});
  CallOptions mid_stream;
  mid_stream.timeout = std::chrono::milliseconds(200 * TimeScale());
  tokens = 0;
  auto expired = client.Generate(IdsRequest({4, 5, 9}, kLongModelLen - 8), [&](const auto& response) {
    tokens += response.token_ids_size();
    return true;
  }, mid_stream);
  EXPECT_EQ(code_of(expired), "DEADLINE_EXCEEDED");
  EXPECT_GT(tokens, 0);
  expect_counted("deadline during decode", {{"DEADLINE_EXCEEDED", 1}});
  // Before its first token: a deadline passing while it waits for a row, a cancel while it
  // waits, and a deadline passing in a long prompt's prefill (or while it waits).
  {
    RowHolders holders(client, 2);
    WaitForLoad(client, 2, 0);
    CallOptions queued;
    queued.timeout = std::chrono::milliseconds(300 * TimeScale());
    auto waited = client.Generate(IdsRequest({3, 3, 3}, 4), nullptr, queued);
    EXPECT_EQ(code_of(waited), "DEADLINE_EXCEEDED");
    CancelToken token;
    CallOptions cancellable;
    cancellable.cancel = &token;
    std::thread canceller([&] {
      WaitForLoad(client, 2, 1);
      token.Cancel();
    });
    auto withdrawn = client.Generate(IdsRequest({3, 3, 4}, 4), nullptr, cancellable);
    canceller.join();
    EXPECT_EQ(code_of(withdrawn), "CANCELLED");
    holders.Release();
  }
  expect_counted("while queued (and the two row holders)",
                 {{"DEADLINE_EXCEEDED", 1}, {"CANCELLED", 3}});
  coil::v1::GenerateRequest long_prompt = IdsRequest({}, 4);
  for (int k = 0; k < 60000; ++k) long_prompt.mutable_token_ids()->add_ids(3 + k % 240);
  CallOptions short_deadline;
  short_deadline.timeout = std::chrono::milliseconds(10);
  tokens = 0;
  auto prefilling = client.Generate(long_prompt, [&](const auto& response) {
    tokens += response.token_ids_size();
    return true;
  }, short_deadline);
  EXPECT_EQ(code_of(prefilling), "DEADLINE_EXCEEDED");
  EXPECT_EQ(tokens, 0);
  expect_counted("deadline before the first token", {{"DEADLINE_EXCEEDED", 1}});
  // Refused: invalid, and a full queue.
  coil::v1::GenerateRequest invalid = IdsRequest({1, 100000}, 4);
  EXPECT_EQ(code_of(client.Generate(invalid)), "INVALID_ARGUMENT");
  expect_counted("invalid", {{"INVALID_ARGUMENT", 1}});
}

TEST(ServingTest, CancelTokenFromAnotherThread) {
  Client& client = Tp1();
  CancelToken token;
  CallOptions options;
  options.cancel = &token;
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    token.Cancel();
  });
  auto generation = client.Generate(IdsRequest({4, 6, 4}, kMaxModelLen - 3), [&](const auto&) {
    started = true;
    return true;
  }, options);
  canceller.join();
  EXPECT_EQ(generation.status().code(), absl::StatusCode::kCancelled) << generation.status();
  ExpectAllRowsFree(client);
}

TEST(ServingTest, BadInputGetsItsCodeAndMessage) {
  Client& client = Tp1();
  struct Case {
    std::string name;
    coil::v1::GenerateRequest request;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, std::string message, auto edit) {
    coil::v1::GenerateRequest request = IdsRequest({1, 2, 3}, 4);
    edit(request);
    cases.push_back({std::move(name), std::move(request), std::move(message)});
  };
  add("empty prompt", "prompt is empty", [](auto& r) { r.clear_token_ids(); });
  add("empty text", "prompt is empty", [](auto& r) { r.set_text(""); });
  add("prompt at max-model-len", "shorten the prompt", [](auto& r) {
    r.mutable_token_ids()->clear_ids();
    for (int i = 0; i < kMaxModelLen; ++i) r.mutable_token_ids()->add_ids(5);
    r.mutable_sampling()->clear_max_tokens();
  });
  add("id out of vocab", "outside the vocabulary [0, 250)",
      [](auto& r) { r.mutable_token_ids()->add_ids(250); });
  add("negative id", "outside the vocabulary", [](auto& r) { r.mutable_token_ids()->add_ids(-3); });
  add("temperature", "temperature", [](auto& r) { r.mutable_sampling()->set_temperature(-1); });
  add("top_p zero", "top_p", [](auto& r) { r.mutable_sampling()->set_top_p(0.0f); });
  add("top_p over one", "top_p", [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); });
  add("top_k", "top_k", [](auto& r) { r.mutable_sampling()->set_top_k(-2); });
  add("min_p", "min_p", [](auto& r) { r.mutable_sampling()->set_min_p(2.0f); });
  add("max_tokens zero", "max_tokens is 0", [](auto& r) { r.mutable_sampling()->set_max_tokens(0); });
  add("prompt plus max_tokens", "lower max_tokens to at most",
      [](auto& r) { r.mutable_sampling()->set_max_tokens(kMaxModelLen); });
  add("too many stops", "stop strings; the limit is", [](auto& r) {
    for (int i = 0; i < 40; ++i) r.mutable_sampling()->add_stop(absl::StrCat("s", i));
  });
  add("stop too long", "bytes; the limit is",
      [](auto& r) { r.mutable_sampling()->add_stop(std::string(1000, 'x')); });
  add("request_id too long", "request_id has 300 bytes; the limit is 256",
      [](auto& r) { r.set_request_id(std::string(300, 'r')); });
  add("text over the limit", "the prompt text has 1048577 bytes; the limit is 1048576",
      [](auto& r) { r.set_text(std::string((1 << 20) + 1, 'x')); });
  for (const Case& c : cases) {
    auto generation = client.Generate(c.request);
    EXPECT_EQ(generation.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name << ": " << generation.status();
    EXPECT_THAT(std::string(generation.status().message()), HasSubstr(c.message)) << c.name;
  }
  auto tokenized = client.Tokenize(std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(tokenized.status().code(), absl::StatusCode::kInvalidArgument) << tokenized.status();
  EXPECT_THAT(std::string(tokenized.status().message()), HasSubstr("the text has 1048577 bytes"));
  // The server keeps serving, with nothing held.
  auto generation = client.Generate(IdsRequest({1, 2, 3}, 4));
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(generation->token_ids.size(), 4u);
  ExpectAllRowsFree(client);
}

// Sends `bytes` as the request of `method` ("/coil.v1.Generation/Generate") with gRPC's
// generic stub, which does no serialization of its own, and returns the call's status.
grpc::Status RawCall(const std::string& target, const std::string& method, const std::string& bytes) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30 * TimeScale()));
  grpc::CompletionQueue queue;
  void* tag = nullptr;
  bool ok = false;
  auto next = [&] { return queue.Next(&tag, &ok); };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  call->StartCall(reinterpret_cast<void*>(1));
  next();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  next();
  call->WritesDone(reinterpret_cast<void*>(3));
  next();
  grpc::ByteBuffer response;
  do {
    call->Read(&response, reinterpret_cast<void*>(4));
    next();
  } while (ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  next();
  queue.Shutdown();
  while (next()) {
  }
  return status;
}

// Bytes that are not a valid request get INVALID_ARGUMENT with a message naming what is
// wrong (gRPC's own deserialization answers UNIMPLEMENTED with no message), and however
// many a client sends, the server logs only a line or two about them and never protobuf's
// own error line. The wire bytes are written by hand from the proto's field numbers.
void ExpectMalformedBytesRefused(ServerProcess& server) {
  struct Case {
    std::string name;
    std::string method;
    std::string bytes;
    std::string message;
  };
  const std::string generate = "/coil.v1.Generation/Generate";
  const std::vector<Case> cases = {
      // text (field 1) = 0xff 0xfe
      {"text", generate, std::string("\x0a\x02\xff\xfe", 4), "field text is not valid UTF-8"},
      // text "a", request_id (field 4) = 0xc3 0x28 (a lead byte without its continuation)
      {"request_id", generate, std::string("\x0a\x01" "a" "\x22\x02\xc3\x28", 7),
       "field request_id is not valid UTF-8"},
      // text "a", sampling (field 3) { stop (field 10) = 0xff }
      {"stop", generate, std::string("\x0a\x01" "a" "\x1a\x03\x52\x01\xff", 8),
       "field sampling.stop is not valid UTF-8"},
      // not protobuf at all ('t' is an end-group tag with no group open)
      {"not protobuf", generate, "this is not protobuf", "not a valid coil.v1.GenerateRequest"},
      // token_ids (field 2) { ids (field 1, packed) = a varint cut short }
      {"packed ids cut short", generate, std::string("\x12\x03\x0a\x01\xff", 5),
       "not a valid coil.v1.GenerateRequest"},
      {"tokenize text", "/coil.v1.Generation/Tokenize", std::string("\x0a\x01\x80", 3),
       "field text is not valid UTF-8"},
      {"detokenize garbage", "/coil.v1.Generation/Detokenize", "this is not protobuf",
       "not a valid coil.v1.DetokenizeRequest"},
      {"model info garbage", "/coil.v1.Generation/GetModelInfo", "\xff",
       "not a valid coil.v1.GetModelInfoRequest"},
  };
  for (const Case& c : cases) {
    const grpc::Status status = RawCall(server.target(), c.method, c.bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  // A flood: a hundred more; the server keeps serving and its log stays short.
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(RawCall(server.target(), generate, cases[i % 3].bytes).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  auto generation = server.client().Generate(IdsRequest({1, 2, 3}, 4));
  ASSERT_TRUE(generation.ok()) << generation.status();
  const std::string log = server.Log();
  EXPECT_EQ(log.find("libprotobuf"), std::string::npos) << log.substr(0, 2000);
  size_t lines = 0;
  for (size_t at = log.find("refused a malformed"); at != std::string::npos;
       at = log.find("refused a malformed", at + 1)) {
    ++lines;
  }
  // One line per 10 s: this test takes far less, but the shared server may have logged one
  // before it (the other TP size runs the same cases against its own server).
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 2u) << log.substr(0, 4000);
}

TEST(ServingTest, MalformedBytesAreInvalidArgumentTp1) {
  ExpectMalformedBytesRefused(ServingEnvironment::Get()->Tp(1));
}

TEST(ServingTest, MalformedBytesAreInvalidArgumentTp2) {
  ExpectMalformedBytesRefused(ServingEnvironment::Get()->Tp(2));
}

// A raw TCP connection to 127.0.0.1:`port` that sends nothing (-1 when refused).
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int PortOf(const std::string& target) { return std::stoi(target.substr(target.rfind(':') + 1)); }

// A fresh client (its own connection) gets SERVING and a generation, within `timeout`.
void ExpectANewClientIsServed(const ServerProcess& server, std::chrono::seconds timeout) {
  const std::string& target = server.target();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status last = absl::UnknownError("not tried");
  while (std::chrono::steady_clock::now() < deadline) {
    auto client = Client::Connect(target, std::chrono::seconds(2));
    if (client.ok()) {
      auto generation = (*client)->Generate(IdsRequest({3, 1, 4}, 5));
      if (generation.ok()) {
        EXPECT_EQ(generation->token_ids.size(), 5u);
        return;
      }
      last = generation.status();
    } else {
      last = client.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL() << "no new client was served after the descriptors were released: " << last << "\n"
         << server.LogTail();
}

// 300 idle connections against a descriptor limit of 256: the server refuses what would
// leave it short of descriptors (or what is over its cap), a connection made before keeps
// working, and once the idle ones close a new client is served: the port never stops
// accepting.
void ExpectDescriptorExhaustionRecovers(ServerOptions options) {
  options.prefix = {"/usr/bin/prlimit", "--nofile=256:256"};  // util-linux
  auto server = ServerProcess::Start(ServingEnvironment::Get()->model_dir(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = PortOf((*server)->target());
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = RawConnect(port);
    if (fd >= 0) idle.push_back(fd);
  }
  // The server takes what it can and then refuses the rest, over its cap or for lack of
  // descriptors, and says so in its log.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * TimeScale());
  bool refused = false;
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    const std::string log = (*server)->Log();
    refused = log.find("gRPC: refused a connection") != std::string::npos ||
              log.find("gRPC: accept failed: Too many open files") != std::string::npos;
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(refused) << "no refusal logged\n" << (*server)->LogTail();
  auto serving = (*server)->client().Health();
  EXPECT_TRUE(serving.ok() && *serving) << "the connection made before stopped working: "
                                        << serving.status();
  for (int fd : idle) close(fd);
  ExpectANewClientIsServed(**server, std::chrono::seconds(20 * TimeScale()));
}

TEST(ServingTest, DescriptorExhaustionDoesNotStopTheListenerTp1) {
  ServerOptions options;
  // No cap of its own below the descriptor limit: the descriptors themselves run short.
  options.flags = {"--max-connections", "100000"};
  ExpectDescriptorExhaustionRecovers(options);
}

TEST(ServingTest, ConnectionCapRefusesBeyondItTp2) {
  ServerOptions options;
  options.ranks = 2;
  // The default cap: the descriptor limit (256) less 256, at least 16.
  ExpectDescriptorExhaustionRecovers(options);
}

// A connection without a call is closed after --idle-timeout; a gRPC client that waited
// longer than that simply reconnects on its next call.
TEST(ServingTest, IdleConnectionsAreClosed) {
  ServerOptions options;
  options.ranks = 2;
  options.flags = {"--idle-timeout", "1"};
  auto server = ServerProcess::Start(ServingEnvironment::Get()->model_dir(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = RawConnect(PortOf((*server)->target()));
  ASSERT_GE(fd, 0);
  timeval timeout{};
  timeout.tv_sec = 20 * TimeScale();
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const auto start = std::chrono::steady_clock::now();
  // gRPC may first write its SETTINGS frame; the connection then ends (EOF or reset).
  char buffer[4096];
  ssize_t n = 0;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "read ended with " << std::strerror(errno);
  EXPECT_LT(waited, std::chrono::seconds(10 * TimeScale()));
  close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto generation = (*server)->client().Generate(IdsRequest({2, 7, 1}, 3));
  EXPECT_TRUE(generation.ok()) << generation.status();
}

// The metrics endpoint answers at once with a hundred silent connections open to it.
void ExpectMetricsNotStarved(ServerProcess& server) {
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(RawConnect(server.metrics_port()));
  const auto start = std::chrono::steady_clock::now();
  auto page = server.FetchMetrics();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find("coil_requests_running"), std::string::npos);
  EXPECT_LT(took, std::chrono::seconds(2 * TimeScale()));
  for (int fd : idle) {
    if (fd >= 0) close(fd);
  }
}

TEST(ServingTest, IdleScrapersCannotStarveMetricsTp1) {
  ExpectMetricsNotStarved(ServingEnvironment::Get()->Tp(1));
}

TEST(ServingTest, IdleScrapersCannotStarveMetricsTp2) {
  ExpectMetricsNotStarved(ServingEnvironment::Get()->Tp(2));
}

TEST(ServingTest, FullQueueIsResourceExhausted) {
  ServerOptions options;
  options.flags = {"--state-rows", "1", "--max-num-seqs", "1", "--max-queue", "1",
                   "--max-model-len", std::to_string(kLongModelLen)};
  auto server = ServerProcess::Start(ServingEnvironment::Get()->model_dir(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  Client& client = (*server)->client();
  // A runs (the only row), B waits (the only queue place), C is refused.
  CancelToken cancel_a, cancel_b;
  absl::Status status_a, status_b;
  std::atomic<bool> a_started{false};
  std::thread a([&] {
    CallOptions call;
    call.cancel = &cancel_a;
    status_a = client.Generate(IdsRequest({3, 3}, kLongModelLen - 2), [&](const auto&) {
      a_started = true;
      return true;
    }, call).status();
  });
  while (!a_started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread b([&] {
    CallOptions call;
    call.cancel = &cancel_b;
    status_b = client.Generate(IdsRequest({3, 4}, 8), nullptr, call).status();
  });
  for (int i = 0; i < 500; ++i) {
    auto info = client.Info();
    if (info.ok() && info->waiting_requests() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto refused = client.Generate(IdsRequest({3, 5}, 8));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("queue is full"));
  cancel_a.Cancel();
  a.join();
  b.join();  // B runs once A's row is free
  EXPECT_EQ(status_a.code(), absl::StatusCode::kCancelled) << status_a;
  EXPECT_TRUE(status_b.ok()) << status_b;
  auto after = client.Generate(IdsRequest({3, 6}, 8));
  EXPECT_TRUE(after.ok()) << after.status();
  ExpectAllRowsFree(client);
}

// Configuration errors stop every rank before anything is loaded, with a message that
// names the flag to change; rank 0 reports.
TEST(ServingTest, ConfigurationErrorsNameTheFlag) {
  const std::string model = ServingEnvironment::Get()->model_dir();
  TempDir dir;
  struct Case {
    std::vector<std::string> argv;
    std::string message;
  };
  const std::vector<Case> cases = {
      // The tiny model has 8 heads.
      {{COIL_MPIEXEC_PATH, "-np", "3", "--oversubscribe", "--allow-run-as-root", COIL_SERVE_PATH,
        "--model", model, "--metrics-port", "-1", "--threads", "1"},
       "does not divide the model's 8 heads"},
      {{COIL_SERVE_PATH, "--model", model, "--memory-budget", "1KiB", "--metrics-port", "-1"},
       "holds no state row"},
      {{COIL_SERVE_PATH, "--model", model, "--memory-budget", "1000000GiB", "--metrics-port", "-1"},
       "lower --memory-budget"},
      {{COIL_SERVE_PATH, "--model", model, "--state-rows", "-1", "--metrics-port", "-1"},
       "--state-rows is -1"},
      {{COIL_SERVE_PATH, "--model", dir.path() + "/missing", "--metrics-port", "-1"}, "config.json"},
      {{COIL_SERVE_PATH, "--metrics-port", "-1"}, "--model is required"},
  };
  for (const Case& c : cases) {
    const std::string log = dir.path() + "/config.log";
    absl::StatusOr<int> code = RunProgram(c.argv, log);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_NE(*code, 0) << c.message;
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr(c.message));
  }
}

// SIGTERM: health turns NOT_SERVING, a new request is refused UNAVAILABLE, the in-flight
// request completes with all its tokens, and the process exits 0. Run with coil-serve alone,
// and under mpirun with two ranks and the signal sent to rank 0 alone, so the workers can
// only end through rank 0's shutdown plan (and mpirun must then exit 0 by itself).
void ExpectDrain(ServerOptions options, int32_t num_tokens) {
  options.flags.insert(options.flags.end(), {"--state-rows", "2", "--max-model-len",
                                             std::to_string(kLongModelLen), "--drain-timeout",
                                             std::to_string(60 * TimeScale())});
  auto server = ServerProcess::Start(ServingEnvironment::Get()->model_dir(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  Client& client = (*server)->client();
  // Long enough (about a second or more) that the drain is observed while it runs; a
  // sanitizer build generates more slowly, so fewer tokens take as long.
  const int32_t kTokens = num_tokens / TimeScale();
  absl::StatusOr<Generation> in_flight;
  std::atomic<bool> started{false};
  std::thread runner([&] {
    in_flight = client.Generate(IdsRequest({8, 9}, kTokens), [&](const auto&) {
      started = true;
      return true;
    });
  });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  (*server)->Signal(SIGTERM);
  bool saw_not_serving = false;
  for (int i = 0; i < 200 && !saw_not_serving; ++i) {
    auto serving = client.Health();
    auto named = client.Health("coil.v1.Generation");
    saw_not_serving = serving.ok() && !*serving && named.ok() && !*named;
    if (!saw_not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto refused = client.Generate(IdsRequest({8, 10}, 4));
  runner.join();
  EXPECT_TRUE(saw_not_serving) << "health never reported NOT_SERVING while draining";
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  ASSERT_TRUE(in_flight.ok()) << in_flight.status();
  EXPECT_EQ(in_flight->token_ids.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(in_flight->final.finish_reason(), coil::v1::FINISH_REASON_LENGTH);
  std::optional<int> code = (*server)->Wait(std::chrono::seconds(60 * TimeScale()));
  ASSERT_TRUE(code.has_value()) << "coil-serve did not exit after draining";
  EXPECT_EQ(*code, 0) << (*server)->LogTail();
}

// A request still running when --drain-timeout passes ends with UNAVAILABLE (so that a
// retry policy keyed on status codes retries it elsewhere) after the tokens so far, with a
// message saying why; the server still exits 0.
TEST(ServingTest, DrainTimeoutEndsWhatIsLeftUnavailable) {
  ServerOptions options;
  options.use_mpirun = false;
  options.flags = {"--state-rows", "1", "--max-model-len", std::to_string(kLongModelLen),
                   "--drain-timeout", "1"};
  auto server = ServerProcess::Start(ServingEnvironment::Get()->model_dir(), options);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<Generation> in_flight;
  std::atomic<size_t> streamed{0};
  std::thread runner([&] {
    // Far more than one second of work at about 50 µs per token.
    in_flight = (*server)->client().Generate(IdsRequest({8, 9}, kLongModelLen - 2),
                                             [&](const auto& response) {
                                               streamed += response.token_ids_size();
                                               return true;
                                             });
  });
  while (streamed.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  (*server)->Signal(SIGTERM);
  runner.join();
  EXPECT_EQ(in_flight.status().code(), absl::StatusCode::kUnavailable) << in_flight.status();
  EXPECT_THAT(std::string(in_flight.status().message()), HasSubstr("drain timeout"));
  EXPECT_GT(streamed.load(), 0u);
  EXPECT_LT(streamed.load(), static_cast<size_t>(kLongModelLen - 2));
  std::optional<int> code = (*server)->Wait(std::chrono::seconds(30 * TimeScale()));
  ASSERT_TRUE(code.has_value()) << "coil-serve did not exit after the drain timeout";
  EXPECT_EQ(*code, 0) << (*server)->LogTail();
}

TEST(ServingTest, SigtermDrainsAlone) {
  ServerOptions options;
  options.use_mpirun = false;
  ExpectDrain(options, 40000);
}

TEST(ServingTest, SigtermToRankZeroDrainsTp2) {
  ServerOptions options;
  options.ranks = 2;
  ExpectDrain(options, 20000);
}

}  // namespace
}  // namespace coil::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* env = new coil::testing::ServingEnvironment();  // owned by GoogleTest
  coil::testing::ServingEnvironment::Set(env);
  ::testing::AddGlobalTestEnvironment(env);
  return RUN_ALL_TESTS();
}
