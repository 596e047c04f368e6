// coil-loadgen against a live coil-serve: a tiny random model made by coil-make-model, the
// server started under mpirun on an ephemeral port, a few seconds of load. Checks what must
// hold whatever the machine's speed: the JSON has every field, completed + errors = sent,
// percentiles are ordered, output token counts equal what was asked for (fixed length with
// ignore_eos), and a server that refuses work (--max-queue 1) yields counted
// RESOURCE_EXHAUSTED errors while the harness finishes normally; the same through the OpenAI
// HTTP API (--api openai).
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"

namespace {

using coil::testing::RunProgram;
using coil::testing::ServerOptions;
using coil::testing::ServerProcess;
using coil::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Stops `server` as an operator would (SIGTERM to rank 0, then wait); its exit code.
std::optional<int> Stop(ServerProcess& server) {
  server.Signal(SIGTERM);
  return server.Wait(std::chrono::seconds(60));
}

class LoadgenLiveTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    const absl::StatusOr<int> made = RunProgram(
        {COIL_MAKE_MODEL_PATH, "--shape", "tiny", "--out", model_dir()}, dir() + "/make.log");
    ASSERT_TRUE(made.ok() && *made == 0) << ReadAll(dir() + "/make.log");
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static const std::string& dir() { return dir_->path(); }
  static std::string model_dir() { return dir() + "/model"; }

  static std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> flags) {
    ServerOptions options;
    options.flags = std::move(flags);
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(model_dir(), options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  // Runs coil-loadgen against `server` with `flags`; returns its JSON result.
  static nlohmann::json Loadgen(const ServerProcess& server, const std::string& name,
                                std::vector<std::string> flags) {
    const std::string out = dir() + "/" + name + ".json";
    const std::string log = dir() + "/" + name + ".log";
    std::vector<std::string> args = {COIL_LOADGEN_PATH, "--target", server.target(), "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    const absl::StatusOr<int> code = RunProgram(args, log);
    EXPECT_TRUE(code.ok() && *code == 0) << ReadAll(log);
    return nlohmann::json::parse(ReadAll(out), nullptr, /*allow_exceptions=*/false);
  }

  static void ExpectConsistent(const nlohmann::json& j) {
    ASSERT_TRUE(j.is_object()) << "no JSON result";
    for (const char* key : {"config", "server", "counts", "duration_s", "tokens", "throughput",
                            "ttft_ms", "itl_ms", "e2e_ms"}) {
      ASSERT_TRUE(j.contains(key)) << key;
    }
    for (const char* key : {"sent", "completed", "errors", "errors_by_code"}) {
      ASSERT_TRUE(j["counts"].contains(key)) << key;
    }
    for (const char* key : {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"}) {
      ASSERT_TRUE(j["throughput"].contains(key)) << key;
    }
    const nlohmann::json& counts = j["counts"];
    int64_t by_code = 0;
    for (const auto& [code, n] : counts["errors_by_code"].items()) by_code += n.get<int64_t>();
    EXPECT_EQ(by_code, counts["errors"].get<int64_t>());
    EXPECT_EQ(counts["completed"].get<int64_t>() + counts["errors"].get<int64_t>(),
              counts["sent"].get<int64_t>());
    for (const char* block : {"ttft_ms", "itl_ms", "e2e_ms"}) {
      const nlohmann::json& d = j[block];
      for (const char* key : {"count", "mean", "p50", "p90", "p99", "max"}) {
        ASSERT_TRUE(d.contains(key)) << block << "." << key;
      }
      EXPECT_GE(d["p50"].get<double>(), 0) << block;
      EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>()) << block;
      EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>()) << block;
      EXPECT_LE(d["p99"].get<double>(), d["max"].get<double>()) << block;
    }
    // A request's first token cannot come after its end.
    EXPECT_LE(j["ttft_ms"]["max"].get<double>(), j["e2e_ms"]["max"].get<double>());
  }

  // The suite's scratch folder: the model, the port file, the logs and the results.
  static inline std::unique_ptr<TempDir> dir_;
};

TEST_F(LoadgenLiveTest, ClosedAndOpenLoopReportsAddUp) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"--state-rows", "8", "--max-model-len", "1000000"});
  ASSERT_NE(server, nullptr);

  // Closed loop for 3 s, prompts cut from text, 16 output tokens each with ignore_eos.
  const nlohmann::json closed =
      Loadgen(*server, "closed",
              {"--concurrency", "4", "--duration", "3", "--prompt-tokens", "16-32",
               "--output-tokens", "16", "--warmup", "2", "--samples"});
  ExpectConsistent(closed);
  const int64_t completed = closed["counts"]["completed"].get<int64_t>();
  EXPECT_GT(completed, 0);
  EXPECT_EQ(closed["counts"]["errors"].get<int64_t>(), 0) << closed["counts"].dump();
  // Fixed output length: every completed request produced exactly 16 tokens, with 15 gaps.
  EXPECT_EQ(closed["tokens"]["output"].get<int64_t>(), 16 * completed);
  EXPECT_EQ(closed["itl_ms"]["count"].get<int64_t>(), 15 * completed);
  EXPECT_EQ(closed["ttft_ms"]["count"].get<int64_t>(), completed);
  EXPECT_EQ(closed["ttft_ms"]["samples"].size(), static_cast<size_t>(completed));
  // Synthetic prompts are sent as ids, so the server counts exactly the drawn lengths.
  EXPECT_GE(closed["tokens"]["prompt"].get<int64_t>(), 16 * completed);
  EXPECT_LE(closed["tokens"]["prompt"].get<int64_t>(), 32 * completed);
  EXPECT_EQ(closed["server"]["tp_size"], 1);
  // Throughput is the counts over the measured time.
  const double duration = closed["duration_s"].get<double>();
  ASSERT_GT(duration, 0);
  EXPECT_NEAR(closed["throughput"]["output_tokens_per_s"].get<double>(),
              16.0 * static_cast<double>(completed) / duration, 1e-6);

  // Open loop by count: exactly 12 requests arrive, random-id prompts of a normal length.
  const nlohmann::json open =
      Loadgen(*server, "open",
              {"--rate", "20", "--requests", "12", "--prompt-source", "ids", "--prompt-tokens",
               "24,4", "--output-tokens", "8", "--seed", "5"});
  ExpectConsistent(open);
  EXPECT_EQ(open["counts"]["sent"].get<int64_t>(), 12);
  EXPECT_EQ(open["counts"]["completed"].get<int64_t>(), 12) << open["counts"].dump();
  EXPECT_EQ(open["tokens"]["output"].get<int64_t>(), 8 * 12);

  // Prompts from a JSONL file, cycled, each with its own output length: 4 requests over 2
  // lines ask for 5 + 7 + 5 + 7 = 24 tokens.
  const std::string jsonl = dir() + "/prompts.jsonl";
  std::ofstream(jsonl) << "{\"prompt_token_ids\": [3, 4, 5, 6], \"output_tokens\": 5}\n"
                       << "{\"prompt_token_ids\": [7, 8], \"output_tokens\": 7}\n";
  const nlohmann::json file =
      Loadgen(*server, "file", {"--concurrency", "2", "--requests", "4", "--prompts", jsonl});
  ExpectConsistent(file);
  EXPECT_EQ(file["counts"]["completed"].get<int64_t>(), 4) << file["counts"].dump();
  EXPECT_EQ(file["tokens"]["output"].get<int64_t>(), 24);
  EXPECT_EQ(file["tokens"]["prompt"].get<int64_t>(), 4 + 2 + 4 + 2);

  // Long requests still running when a 0.5 s run ends get no drain time (--drain 0): they
  // are cancelled and counted as CANCELLED, and the counts still add up. 900k tokens each
  // (hence the server's --max-model-len): the tiny model decodes 4000 in a fraction of a
  // second on an idle machine, so shorter requests could all finish before the cut.
  const nlohmann::json cut = Loadgen(*server, "cut",
                                     {"--concurrency", "2", "--duration", "0.5", "--drain", "0",
                                      "--prompt-tokens", "16", "--output-tokens", "900000"});
  ExpectConsistent(cut);
  ASSERT_TRUE(cut["counts"]["errors_by_code"].contains("CANCELLED")) << cut["counts"].dump();
  EXPECT_GT(cut["counts"]["errors_by_code"]["CANCELLED"].get<int64_t>(), 0);

  EXPECT_EQ(Stop(*server), 0) << server->LogTail();
}

TEST_F(LoadgenLiveTest, TheOpenAiApiCarriesTheSameLoad) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"--state-rows", "8", "--max-model-len", "1000000", "--http-port", "0"});
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->http_port(), 0) << "the port file has no HTTP port";
  const std::string http = "127.0.0.1:" + std::to_string(server->http_port());

  // The same fixed-length requests as over gRPC: every token counted once (return_token_ids),
  // the prompts' lengths as drawn (usage), the gaps between tokens all there.
  const nlohmann::json closed =
      Loadgen(*server, "openai_closed",
              {"--api", "openai", "--http-target", http, "--concurrency", "3", "--requests", "9",
               "--prompt-tokens", "16-32", "--output-tokens", "12", "--samples"});
  ExpectConsistent(closed);
  EXPECT_EQ(closed["config"]["api"], "openai");
  EXPECT_EQ(closed["counts"]["completed"].get<int64_t>(), 9) << closed["counts"].dump();
  EXPECT_EQ(closed["tokens"]["output"].get<int64_t>(), 12 * 9);
  EXPECT_EQ(closed["itl_ms"]["count"].get<int64_t>(), 11 * 9);
  EXPECT_GE(closed["tokens"]["prompt"].get<int64_t>(), 16 * 9);
  EXPECT_LE(closed["tokens"]["prompt"].get<int64_t>(), 32 * 9);

  // Requests cut off when the run ends are cancelled (the client closes its connection) and
  // counted as CANCELLED; the server frees their rows and keeps serving.
  const nlohmann::json cut =
      Loadgen(*server, "openai_cut",
              {"--api", "openai", "--http-target", http, "--concurrency", "2", "--duration",
               "0.5", "--drain", "0", "--prompt-tokens", "16", "--output-tokens", "900000"});
  ExpectConsistent(cut);
  ASSERT_TRUE(cut["counts"]["errors_by_code"].contains("CANCELLED")) << cut["counts"].dump();
  const nlohmann::json after =
      Loadgen(*server, "openai_after",
              {"--api", "openai", "--http-target", http, "--concurrency", "1", "--requests", "2",
               "--prompt-tokens", "8", "--output-tokens", "4"});
  EXPECT_EQ(after["counts"]["completed"].get<int64_t>(), 2) << after["counts"].dump();

  // A wrong address is a clear error, not a hang.
  const std::string log = dir() + "/openai_bad.log";
  const absl::StatusOr<int> code =
      RunProgram({COIL_LOADGEN_PATH, "--target", server->target(), "--api", "openai",
                  "--concurrency", "1", "--requests", "1"},
                 log);
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_NE(ReadAll(log).find("--http-target"), std::string::npos) << ReadAll(log);
  EXPECT_EQ(Stop(*server), 0) << server->LogTail();
}

// The shared-prefix workload against a server with its prefix cache on (the default): two
// system prompts of 40-60 tokens, each marked with cache_prefix_tokens, under questions of
// 4-12 tokens. After the first request with a system prompt (the tiny model's chunk is 8),
// every later one resumes from its snapshot: at least 32 prompt tokens each. With the cache
// off nothing is resumed.
TEST_F(LoadgenLiveTest, SharedPrefixesHitThePrefixCache) {
  for (const bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "cache on" : "cache off");
    std::unique_ptr<ServerProcess> server =
        StartServer({"--state-rows", "8", "--max-num-seqs", "4", "--max-model-len", "256",
                     cache ? "--prefix-cache=true" : "--prefix-cache=false"});
    ASSERT_NE(server, nullptr);
    const nlohmann::json j =
        Loadgen(*server, cache ? "shared_on" : "shared_off",
                {"--concurrency", "1", "--requests", "12", "--prompt-source", "ids",
                 "--prompt-tokens", "4-12", "--shared-prefixes", "2", "--shared-prefix-tokens",
                 "40-60", "--output-tokens", "4", "--seed", "3"});
    ExpectConsistent(j);
    EXPECT_EQ(j["counts"]["completed"].get<int64_t>(), 12) << j["counts"].dump();
    EXPECT_EQ(j["config"]["shared_prefixes"], 2);
    EXPECT_EQ(j["server"]["prefix_cache"], cache);
    const int64_t hits = j["prefix_cache"]["hit_requests"].get<int64_t>();
    const int64_t cached = j["tokens"]["cached_prompt"].get<int64_t>();
    if (cache) {
      // One request at a time: only the first of each system prompt can miss.
      EXPECT_GE(hits, 10);
      EXPECT_GE(cached, 32 * hits);
      // Every prompt is at least 40 + 4 tokens; at most the system prompt (60) is cached.
      EXPECT_LE(cached, 60 * hits);
    } else {
      EXPECT_EQ(hits, 0);
      EXPECT_EQ(cached, 0);
    }
    EXPECT_EQ(Stop(*server), 0) << server->LogTail();
  }
}

TEST_F(LoadgenLiveTest, RefusedRequestsAreCountedByCode) {
  // One state row, one running request and a queue of one: with 8 clients most requests are
  // refused with RESOURCE_EXHAUSTED, which the report counts by code.
  std::unique_ptr<ServerProcess> server = StartServer(
      {"--state-rows", "1", "--max-num-seqs", "1", "--max-queue", "1", "--max-model-len", "256"});
  ASSERT_NE(server, nullptr);
  const nlohmann::json j = Loadgen(
      *server, "refused",
      {"--concurrency", "8", "--duration", "2", "--prompt-tokens", "16", "--output-tokens", "16"});
  ExpectConsistent(j);
  EXPECT_GT(j["counts"]["completed"].get<int64_t>(), 0);
  ASSERT_TRUE(j["counts"]["errors_by_code"].contains("RESOURCE_EXHAUSTED")) << j["counts"].dump();
  EXPECT_GT(j["counts"]["errors_by_code"]["RESOURCE_EXHAUSTED"].get<int64_t>(), 0);
  EXPECT_EQ(Stop(*server), 0) << server->LogTail();
}

}  // namespace
