// coil-serve end to end on a hybrid model (nemotron-tiny: Mamba2, attention and MLP blocks,
// written by coil-make-model), with real KV pages. Expected values come from independent
// runs: each request alone on a server whose KV budget holds every request at once. Against
// them, a server whose KV budget is too small for the requests that arrive together must
// preempt (the counter says it did) and still give every stream exactly the tokens it gives
// alone, greedy and seeded, at TP1 and TP2; afterwards every page and row is free again
// (the gauges and the info say so: nothing leaked). With the prefix cache (on by default), a
// prompt that shares 20 tokens with an earlier one resumes at 16 (nemotron-tiny's chunk is
// 8) from its snapshot, whose KV pages it shares, and gives the tokens of a server without
// the cache, at TP1 and TP2. Fifty streams under that small budget, with cancels and
// deadlines mixed in, give the same tokens (or a prefix of them), and leave nothing held.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace coil::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRequests = 10;
constexpr int kMaxTokens = 36;
constexpr int kBlockSize = 4;
// Each request takes 4 prompt tokens + 35 fed-back outputs = 39 positions: 10 pages. The
// small budget's 30 pages hold three such requests, so ten arriving together preempt.
constexpr int kSmallPages = 30;

class HybridEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>();
    model_dir_ = dir_->path() + "/nemotron-tiny";
    absl::StatusOr<int> code = RunProgram(
        {COIL_MAKE_MODEL_PATH, "--shape", "nemotron-tiny", "--dtype", "bf16", "--out", model_dir_},
        dir_->path() + "/make.log");
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << "coil-make-model failed";
  }
  void TearDown() override { dir_.reset(); }
  static HybridEnvironment* Get() { return instance_; }
  static void Set(HybridEnvironment* env) { instance_ = env; }
  const std::string& model_dir() const { return model_dir_; }

 private:
  static inline HybridEnvironment* instance_ = nullptr;
  std::unique_ptr<TempDir> dir_;
  std::string model_dir_;
};

std::unique_ptr<ServerProcess> Start(int ranks, int kv_pages) {
  ServerOptions options;
  options.ranks = ranks;
  options.flags = {"--state-rows",
                   "8",
                   "--kv-pages",
                   std::to_string(kv_pages),
                   "--block-size",
                   std::to_string(kBlockSize),
                   "--max-model-len",
                   "128",
                   "--max-batched-tokens",
                   "64",
                   "--threads",
                   "1"};
  auto started = ServerProcess::Start(HybridEnvironment::Get()->model_dir(), options);
  EXPECT_TRUE(started.ok()) << started.status();
  return started.ok() ? std::move(started).value() : nullptr;
}

// Request i: its own prompt; greedy for even i, seeded sampling for odd i.
coil::v1::GenerateRequest Request(int i) {
  coil::v1::GenerateRequest request;
  for (int32_t id : {2 + 17 * i % 200, 9 + 5 * i, 31 + 3 * i, 250 - i}) {
    request.mutable_token_ids()->add_ids(id);
  }
  request.mutable_sampling()->set_max_tokens(kMaxTokens);
  request.mutable_sampling()->set_ignore_eos(true);
  if (i % 2 == 1) {
    request.mutable_sampling()->set_temperature(0.9f);
    request.mutable_sampling()->set_seed(4242 + i);
  }
  request.set_request_id(absl::StrCat("request-", i));
  return request;
}

// Each request alone, one after another.
std::vector<std::vector<int32_t>> Alone(Client& client) {
  std::vector<std::vector<int32_t>> tokens(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    auto generation = client.Generate(Request(i));
    EXPECT_TRUE(generation.ok()) << generation.status();
    if (generation.ok()) tokens[i] = generation->token_ids;
    EXPECT_EQ(tokens[i].size(), static_cast<size_t>(kMaxTokens));
  }
  return tokens;
}

// All requests at once, each from its own thread.
std::vector<std::vector<int32_t>> Together(Client& client) {
  std::vector<std::vector<int32_t>> tokens(kRequests);
  std::vector<absl::Status> statuses(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      auto generation = client.Generate(Request(i));
      statuses[i] = generation.status();
      if (generation.ok()) tokens[i] = generation->token_ids;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kRequests; ++i) EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
  return tokens;
}

// The value of one sample line ("name value") of a Prometheus text page; -1 if absent.
double MetricValue(const std::string& page, const std::string& series) {
  const std::string prefix = series + " ";
  for (size_t at = 0; at < page.size();) {
    const size_t end = page.find('\n', at);
    const std::string line =
        page.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return -1.0;
}

// Waits until no request holds a row or a page and nothing runs or waits: every row and
// page is free or a prefix-cache snapshot's (which any request may take back).
void ExpectEverythingFree(ServerProcess& server, int kv_pages) {
  coil::v1::ModelInfo info;
  for (int attempt = 0; attempt < 250; ++attempt) {
    auto got = server.client().Info();
    ASSERT_TRUE(got.ok()) << got.status();
    info = *got;
    if (info.state_rows_free() + info.prefix_cache_rows() == info.state_rows_total() &&
        info.kv_pages_free() + info.prefix_cache_pages() == info.kv_pages_total() &&
        info.running_requests() == 0 && info.waiting_requests() == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(info.kv_pages_total(), kv_pages);
  EXPECT_EQ(info.kv_pages_free() + info.prefix_cache_pages(), kv_pages) << info.DebugString();
  EXPECT_EQ(info.state_rows_free() + info.prefix_cache_rows(), info.state_rows_total())
      << info.DebugString();
  auto metrics = server.FetchMetrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(MetricValue(*metrics, "coil_kv_pages_free") +
                MetricValue(*metrics, "coil_prefix_cache_pages"),
            kv_pages);
  EXPECT_EQ(MetricValue(*metrics, "coil_kv_pages_used"),
            MetricValue(*metrics, "coil_prefix_cache_pages"));
  EXPECT_EQ(MetricValue(*metrics, "coil_state_rows_used"), 0.0);
}

TEST(HybridServingTest, PreemptionUnderASmallKvBudgetGivesTheTokensOfALargeOne) {
  std::vector<std::vector<int32_t>> alone;
  {
    std::unique_ptr<ServerProcess> large = Start(1, 400);
    ASSERT_TRUE(large);
    auto info = large->client().Info();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->architecture(), "nemotron_h");
    EXPECT_EQ(info->num_attention_layers(), 2);  // M*-M-*
    EXPECT_EQ(info->block_size(), kBlockSize);
    alone = Alone(large->client());
    // The requests together fit this budget: no preemption, the same tokens.
    EXPECT_EQ(Together(large->client()), alone);
    auto metrics = large->FetchMetrics();
    ASSERT_TRUE(metrics.ok());
    EXPECT_EQ(MetricValue(*metrics, "coil_preemptions_total"), 0.0);
    ExpectEverythingFree(*large, 400);
  }
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("TP", ranks));
    std::unique_ptr<ServerProcess> small = Start(ranks, kSmallPages);
    ASSERT_TRUE(small);
    const std::vector<std::vector<int32_t>> together = Together(small->client());
    for (int i = 0; i < kRequests; ++i) EXPECT_EQ(together[i], alone[i]) << "request " << i;
    auto metrics = small->FetchMetrics();
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_GT(MetricValue(*metrics, "coil_preemptions_total"), 0.0)
        << "the small budget was meant to preempt";
    ExpectEverythingFree(*small, kSmallPages);
    // And once more, now that every page has been used and freed at least once.
    EXPECT_EQ(Together(small->client()), alone);
    ExpectEverythingFree(*small, kSmallPages);
  }
}

// The request counters' sum on a page of /metrics.
double RequestsCounted(const std::string& page) {
  double total = 0;
  for (size_t at = 0; at < page.size();) {
    size_t end = page.find('\n', at);
    if (end == std::string::npos) end = page.size();
    const std::string line = page.substr(at, end - at);
    at = end + 1;
    if (line.rfind("coil_requests_finished_total{", 0) != 0 &&
        line.rfind("coil_requests_failed_total{", 0) != 0) {
      continue;
    }
    total += std::stod(line.substr(line.find("} ") + 2));
  }
  return total;
}

// 50 streams at once under a KV budget that holds three, at TP1 and TP2, with cancels
// (after a few tokens) and deadlines mixed in: every stream that finishes has the tokens
// its request gives alone, every abandoned one streamed a prefix of them, the server
// preempted, counted each request once, and has every row and page free afterwards.
TEST(HybridServingTest, FiftyStreamsWithCancelsAndDeadlinesUnderPreemption) {
  constexpr int kStreams = 50;
  auto request = [](int i) {
    coil::v1::GenerateRequest r = Request(i % kRequests);
    r.mutable_token_ids()->set_ids(1, 9 + 3 * i);  // 50 distinct prompts
    r.set_request_id(absl::StrCat("stream-", i));
    return r;
  };
  std::vector<std::vector<int32_t>> alone(kStreams);
  {
    std::unique_ptr<ServerProcess> large = Start(1, 400);
    ASSERT_TRUE(large);
    for (int i = 0; i < kStreams; ++i) {
      auto generation = large->client().Generate(request(i));
      ASSERT_TRUE(generation.ok()) << generation.status();
      alone[i] = generation->token_ids;
    }
  }
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("TP", ranks));
    std::unique_ptr<ServerProcess> small = Start(ranks, kSmallPages);
    ASSERT_TRUE(small);
    auto before = small->FetchMetrics();
    ASSERT_TRUE(before.ok()) << before.status();
    std::vector<std::vector<int32_t>> streamed(kStreams);
    std::vector<absl::Status> statuses(kStreams);
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; ++i) {
      threads.emplace_back([&, i] {
        CallOptions options;
        // Every fifth stream stops reading after a few responses (a cancel); every fifth
        // but one has a deadline that a stream waiting behind the others outlives.
        const int cancel_after = i % 5 == 3 ? 1 + i % 4 : 0;
        if (i % 5 == 4) options.timeout = std::chrono::milliseconds(150 * TimeScale());
        int responses = 0;
        auto generation = small->client().Generate(
            request(i),
            [&](const coil::v1::GenerateResponse& response) {
              streamed[i].insert(streamed[i].end(), response.token_ids().begin(),
                                 response.token_ids().end());
              return cancel_after == 0 || ++responses < cancel_after;
            },
            options);
        statuses[i] = generation.status();
      });
    }
    for (std::thread& thread : threads) thread.join();
    int finished = 0;
    int abandoned = 0;
    for (int i = 0; i < kStreams; ++i) {
      const std::vector<int32_t>& got = streamed[i];
      if (statuses[i].ok()) {
        ++finished;
        EXPECT_EQ(got, alone[i]) << "stream " << i;
        continue;
      }
      ++abandoned;
      const bool expected_code =
          statuses[i].code() == (i % 5 == 3 ? absl::StatusCode::kCancelled
                                            : absl::StatusCode::kDeadlineExceeded);
      EXPECT_TRUE(expected_code && i % 5 >= 3) << "stream " << i << ": " << statuses[i];
      ASSERT_LE(got.size(), alone[i].size()) << "stream " << i;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), alone[i].begin())) << "stream " << i;
    }
    EXPECT_GE(finished, kStreams * 3 / 5);
    EXPECT_GT(abandoned, 0);
    ExpectEverythingFree(*small, kSmallPages);
    // A call is counted when gRPC is done with it, a moment after its client returns.
    absl::StatusOr<std::string> after;
    for (int attempt = 0; attempt < 100; ++attempt) {
      after = small->FetchMetrics();
      ASSERT_TRUE(after.ok()) << after.status();
      if (RequestsCounted(*after) - RequestsCounted(*before) >= kStreams) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_GT(MetricValue(*after, "coil_preemptions_total"), 0.0);
    EXPECT_EQ(RequestsCounted(*after) - RequestsCounted(*before), kStreams);
  }
}

// 20 tokens shared, then a question of 4: the first request leaves snapshots at 16 (its cut,
// 20 rounded down) and 24 (its last whole chunk); the second resumes at 16, sharing the
// first's four pages of the prefix, and gives what a server without the cache gives (the
// same seed, so the same draws).
TEST(HybridServingTest, APromptResumedFromTheCacheGivesTheColdTokens) {
  const auto request = [](const std::vector<int32_t>& question, int32_t cut) {
    coil::v1::GenerateRequest r;
    for (int32_t i = 0; i < 20; ++i) r.mutable_token_ids()->add_ids(40 + 7 * i % 200);
    for (int32_t id : question) r.mutable_token_ids()->add_ids(id);
    r.mutable_sampling()->set_max_tokens(12);
    r.mutable_sampling()->set_ignore_eos(true);
    r.mutable_sampling()->set_temperature(0.7f);
    r.mutable_sampling()->set_seed(99);
    r.set_cache_prefix_tokens(cut);
    return r;
  };
  const coil::v1::GenerateRequest first = request({1, 2, 3, 4}, 20);
  const coil::v1::GenerateRequest second = request({5, 6, 7, 8}, 0);
  std::vector<int32_t> cold;
  {
    ServerOptions options;
    options.flags = {"--state-rows",        "8",
                     "--kv-pages",          "200",
                     "--block-size",        std::to_string(kBlockSize),
                     "--max-model-len",     "128",
                     "--threads",           "1",
                     "--prefix-cache=false"};
    auto server = ServerProcess::Start(HybridEnvironment::Get()->model_dir(), options);
    ASSERT_TRUE(server.ok()) << server.status();
    auto generation = (*server)->client().Generate(second);
    ASSERT_TRUE(generation.ok()) << generation.status();
    EXPECT_EQ(generation->final.usage().cached_prompt_tokens(), 0);
    cold = generation->token_ids;
  }
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("TP", ranks));
    std::unique_ptr<ServerProcess> server = Start(ranks, 200);
    ASSERT_TRUE(server);
    auto info = server->client().Info();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(info->prefix_cache());
    ASSERT_TRUE(server->client().Generate(first).ok());
    auto warm = server->client().Generate(second);
    ASSERT_TRUE(warm.ok()) << warm.status();
    EXPECT_EQ(warm->final.usage().cached_prompt_tokens(), 16);
    EXPECT_EQ(warm->token_ids, cold);
    ExpectEverythingFree(*server, 200);
    info = server->client().Info();
    ASSERT_TRUE(info.ok()) << info.status();
    // Three snapshots: the first request's at 16 and 24 (six pages of 4 tokens, the four of
    // the one at 16 shared by the one at 24) and the second's at 24 (those four again, and
    // two of its own): eight distinct pages.
    EXPECT_EQ(info->prefix_cache_rows(), 3);
    EXPECT_EQ(info->prefix_cache_pages(), 8);
  }
}

// A request that can never fit the pool is refused at once, naming the bound to ask for.
TEST(HybridServingTest, ARequestLargerThanThePoolIsRefused) {
  std::unique_ptr<ServerProcess> small = Start(1, kSmallPages);
  ASSERT_TRUE(small);
  coil::v1::GenerateRequest request = Request(0);
  request.mutable_sampling()->set_max_tokens(120);  // 124 positions: 31 pages of 30
  auto generation = small->client().Generate(request);
  EXPECT_EQ(generation.status().code(), absl::StatusCode::kInvalidArgument) << generation.status();
  EXPECT_THAT(std::string(generation.status().message()), HasSubstr("kv pages"));
  ExpectEverythingFree(*small, kSmallPages);
}

// Start-up derives both budgets from --memory-budget when neither is given, and prints them;
// a budget too small for one max-model-len request is refused naming the flags.
TEST(HybridServingTest, BothBudgetsComeFromTheMemoryBudget) {
  TempDir dir;
  const std::string model = HybridEnvironment::Get()->model_dir();
  ServerOptions options;
  options.flags = {"--memory-budget", "64MiB", "--max-model-len", "1024", "--threads", "1"};
  auto started = ServerProcess::Start(model, options);
  ASSERT_TRUE(started.ok()) << started.status();
  auto info = (*started)->client().Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->state_rows_total(), 0);
  EXPECT_GT(info->kv_pages_total(), 0);
  EXPECT_THAT((*started)->LogTail(), HasSubstr("KV pages"));
  started->reset();
  const std::string log = dir.path() + "/small.log";
  absl::StatusOr<int> code = RunProgram(
      {COIL_SERVE_PATH, "--model", model, "--memory-budget", "16KiB", "--metrics-port", "-1"}, log);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("--memory-budget"));
  EXPECT_THAT(text, HasSubstr("--max-model-len"));
}

}  // namespace
}  // namespace coil::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* env = new coil::testing::HybridEnvironment();
  coil::testing::HybridEnvironment::Set(env);
  ::testing::AddGlobalTestEnvironment(env);
  return RUN_ALL_TESTS();
}
