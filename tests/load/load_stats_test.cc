// Tests of coil-loadgen's arithmetic: percentiles, token timing, report counts and
// throughput, prompt-length specs, prompt windows and the JSONL prompt reader. Expected
// values are worked out by hand in the comments, or are invariants (counts add up,
// percentiles are ordered, uniform draws stay in range).
#include "tools/loadgen/load_stats.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/loadgen/prompt_source.h"

namespace coil::load {
namespace {

TEST(PercentileTest, InterpolatesBetweenClosestRanks) {
  // 1..101: rank = p/100 * 100, so percentile p is the value p + 1.
  std::vector<double> v;
  for (int i = 1; i <= 101; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 51);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 91);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 100);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 101);
  // Two samples: the median is halfway, p90 is 10 + 0.9 * 10.
  EXPECT_DOUBLE_EQ(Percentile({10, 20}, 50), 15);
  EXPECT_DOUBLE_EQ(Percentile({10, 20}, 90), 19);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
}

TEST(SummarizeTest, SortsAndOrdersPercentiles) {
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> d(2.0);
  std::vector<double> samples(1000);
  for (double& s : samples) s = d(rng);
  const Distribution dist = Summarize(samples);
  EXPECT_EQ(dist.count, 1000);
  EXPECT_TRUE(std::is_sorted(dist.sorted.begin(), dist.sorted.end()));
  EXPECT_LE(dist.p50, dist.p90);
  EXPECT_LE(dist.p90, dist.p99);
  EXPECT_LE(dist.p99, dist.max);
  EXPECT_DOUBLE_EQ(dist.max, *std::max_element(samples.begin(), samples.end()));
  const Distribution empty = Summarize({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.max, 0);
}

TEST(RecordTokensTest, FoldedTokensShareTheirMessagesGap) {
  // Messages at 1.0 s (2 tokens), 1.5 s (1 token) and 2.5 s (4 tokens): the second token came
  // with the first (gap 0), the third 0.5 s later, the last four share 1.0 s.
  RequestRecord r;
  RecordTokens(r, 1.0, 2);
  RecordTokens(r, 1.5, 1);
  RecordTokens(r, 1.7, 0);  // a message with no token changes nothing
  RecordTokens(r, 2.5, 4);
  EXPECT_DOUBLE_EQ(r.first_token_s, 1.0);
  EXPECT_EQ(r.output_tokens, 7);
  const std::vector<double> expected = {0, 0.5, 0.25, 0.25, 0.25, 0.25};
  ASSERT_EQ(r.inter_token_s.size(), expected.size());
  double sum = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_DOUBLE_EQ(r.inter_token_s[i], expected[i]) << i;
    sum += r.inter_token_s[i];
  }
  // Invariant: the gaps add up to last token minus first token.
  EXPECT_DOUBLE_EQ(sum, 2.5 - 1.0);
}

RequestRecord Ok(double sent, double first, double done, int prompt, int output) {
  RequestRecord r;
  r.sent_s = sent;
  r.first_token_s = first;
  r.done_s = done;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.inter_token_s.assign(static_cast<size_t>(output - 1), (done - first) / (output - 1));
  return r;
}

RequestRecord Failed(double sent, double done, absl::StatusCode code) {
  RequestRecord r;
  r.sent_s = sent;
  r.done_s = done;
  r.code = code;
  return r;
}

TEST(BuildReportTest, CountsThroughputAndLatencies) {
  const std::vector<RequestRecord> records = {
      Ok(0.0, 0.1, 1.0, 10, 5),  // TTFT 0.1, E2E 1.0
      Ok(0.5, 0.8, 2.0, 20, 3),  // TTFT 0.3, E2E 1.5
      Ok(1.0, 1.2, 1.5, 30, 2),  // TTFT 0.2, E2E 0.5
      Failed(0.2, 0.21, absl::StatusCode::kResourceExhausted),
      Failed(0.3, 0.31, absl::StatusCode::kResourceExhausted),
      Failed(0.4, 0.5, absl::StatusCode::kUnavailable),
  };
  const LoadReport r = BuildReport(records);
  EXPECT_EQ(r.sent, 6);
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.errors(), 3);
  EXPECT_EQ(r.completed + r.errors(), r.sent);
  EXPECT_EQ(r.errors_by_code.at("RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(r.errors_by_code.at("UNAVAILABLE"), 1);
  // The phase starts at 0.0; the last completion is at 2.0.
  EXPECT_DOUBLE_EQ(r.duration_s, 2.0);
  EXPECT_EQ(r.prompt_tokens, 60);
  EXPECT_EQ(r.output_tokens, 10);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 1.5);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s, 5.0);
  EXPECT_DOUBLE_EQ(r.total_tokens_per_s, 35.0);
  EXPECT_EQ(r.ttft_s.count, 3);
  EXPECT_NEAR(r.ttft_s.p50, 0.2, 1e-12);
  EXPECT_NEAR(r.ttft_s.max, 0.3, 1e-12);
  EXPECT_NEAR(r.e2e_s.p50, 1.0, 1e-12);
  EXPECT_NEAR(r.e2e_s.max, 1.5, 1e-12);
  // 4 + 2 + 1 gaps; failed requests contribute none.
  EXPECT_EQ(r.itl_s.count, 7);
  // A phase that lasted 3 s (an open loop's sending window) divides by 3 s instead.
  const LoadReport window = BuildReport(records, 3.0);
  EXPECT_DOUBLE_EQ(window.duration_s, 3.0);
  EXPECT_DOUBLE_EQ(window.requests_per_s, 1.0);
}

TEST(BuildReportTest, CountsPrefixCacheHitsOverCompletedRequests) {
  std::vector<RequestRecord> records = {Ok(0.0, 0.1, 1.0, 40, 2), Ok(0.0, 0.1, 1.0, 40, 2),
                                        Ok(0.0, 0.1, 1.0, 20, 2),
                                        Failed(0.2, 0.3, absl::StatusCode::kUnavailable)};
  records[1].cached_prompt_tokens = 32;
  records[2].cached_prompt_tokens = 16;
  records[3].cached_prompt_tokens = 8;  // failed: not counted
  const LoadReport r = BuildReport(records);
  EXPECT_EQ(r.cache_hits, 2);
  EXPECT_EQ(r.cached_prompt_tokens, 48);
  EXPECT_EQ(r.prompt_tokens, 100);
  // 2 of 3 completed requests hit; 48 of 100 prompt tokens came from the cache.
  const nlohmann::json j = ReportToJson(r, {}, {}, false);
  EXPECT_EQ(j["tokens"]["cached_prompt"], 48);
  EXPECT_EQ(j["prefix_cache"]["hit_requests"], 2);
  EXPECT_NEAR(j["prefix_cache"]["hit_rate"].get<double>(), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(j["prefix_cache"]["token_hit_rate"].get<double>(), 0.48, 1e-12);
  EXPECT_NE(FormatTable(r).find("2 of 3 requests hit, 48 of 100 prompt tokens (48.0%)"),
            std::string::npos)
      << FormatTable(r);
}

TEST(ReportToJsonTest, HasEveryFieldInMilliseconds) {
  const LoadReport r = BuildReport(
      {Ok(0.0, 0.1, 1.0, 10, 5), Failed(0.2, 0.3, absl::StatusCode::kResourceExhausted)});
  const nlohmann::json j = ReportToJson(r, {{"mode", "closed"}}, {{"tp_size", 2}}, true);
  EXPECT_EQ(j["config"]["mode"], "closed");
  EXPECT_EQ(j["server"]["tp_size"], 2);
  EXPECT_EQ(j["counts"]["sent"], 2);
  EXPECT_EQ(j["counts"]["completed"], 1);
  EXPECT_EQ(j["counts"]["errors"], 1);
  EXPECT_EQ(j["counts"]["errors_by_code"]["RESOURCE_EXHAUSTED"], 1);
  for (const char* key : {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"}) {
    EXPECT_TRUE(j["throughput"].contains(key)) << key;
  }
  for (const char* block : {"ttft_ms", "itl_ms", "e2e_ms"}) {
    for (const char* key : {"count", "mean", "p50", "p90", "p99", "max", "samples"}) {
      EXPECT_TRUE(j[block].contains(key)) << block << "." << key;
    }
  }
  EXPECT_NEAR(j["ttft_ms"]["max"].get<double>(), 100.0, 1e-9);  // 0.1 s
  EXPECT_NEAR(j["e2e_ms"]["p50"].get<double>(), 1000.0, 1e-9);
  EXPECT_FALSE(ReportToJson(r, {}, {}, false)["ttft_ms"].contains("samples"));
  // The table names every latency row and the error code.
  const std::string table = FormatTable(r);
  for (const char* word : {"TTFT", "ITL", "E2E", "RESOURCE_EXHAUSTED", "req/s"}) {
    EXPECT_NE(table.find(word), std::string::npos) << word;
  }
}

TEST(LengthSpecTest, FixedUniformAndNormal) {
  std::mt19937_64 rng(7);
  auto fixed = LengthSpec::Parse("128");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->Sample(rng), 128);
  EXPECT_EQ(fixed->Max(), 128);

  auto uniform = LengthSpec::Parse("64-70");
  ASSERT_TRUE(uniform.ok()) << uniform.status();
  std::vector<int> seen(71, 0);
  for (int i = 0; i < 7000; ++i) {
    const int32_t n = uniform->Sample(rng);
    ASSERT_GE(n, 64);
    ASSERT_LE(n, 70);
    ++seen[n];
  }
  // Both ends included: each of the 7 values is drawn (about 1000 times each).
  for (int n = 64; n <= 70; ++n) EXPECT_GT(seen[n], 800) << n;

  auto normal = LengthSpec::Parse("128,32");
  ASSERT_TRUE(normal.ok()) << normal.status();
  EXPECT_EQ(normal->Max(), 256);  // mean + 4 std
  double sum = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t n = normal->Sample(rng);
    ASSERT_GE(n, 1);
    ASSERT_LE(n, 256);
    sum += n;
  }
  // The standard error of the mean is 32 / sqrt(20000) = 0.23; 1.5 is over 6 of them.
  EXPECT_NEAR(sum / kDraws, 128, 1.5);
}

TEST(LengthSpecTest, RejectsBadSpecs) {
  for (const char* spec : {"", "abc", "0", "-5", "10-5", "5,-1", "1,2,3", "1-2-3", "0-4"}) {
    EXPECT_FALSE(LengthSpec::Parse(spec).ok()) << spec;
  }
}

TEST(PromptSourceTest, WindowsWrapAroundTheCorpus) {
  // Corpus 1, 2, 3: every window is a cyclic run, so each id is followed by id % 3 + 1.
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<int32_t> w = CutWindow({1, 2, 3}, 7, rng);
    ASSERT_EQ(w.size(), 7u);
    for (size_t i = 1; i < w.size(); ++i) EXPECT_EQ(w[i], w[i - 1] % 3 + 1);
  }
  const std::vector<int32_t> ids = RandomIds(1000, 1, 5, rng);
  ASSERT_EQ(ids.size(), 1000u);
  EXPECT_EQ(*std::min_element(ids.begin(), ids.end()), 1);
  EXPECT_EQ(*std::max_element(ids.begin(), ids.end()), 4);
  EXPECT_GT(std::string(DefaultPromptText()).size(), 1000u);
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(PromptSourceTest, ReadsJsonl) {
  const std::string path = WriteTemp("prompts.jsonl",
                                     "{\"prompt\": \"Hello there\"}\n\n"
                                     "{\"prompt_token_ids\": [5, 6, 7], \"output_tokens\": 9}\n");
  auto prompts = ReadPromptsJsonl(path);
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  ASSERT_EQ(prompts->size(), 2u);
  EXPECT_EQ((*prompts)[0].text.value_or(""), "Hello there");
  EXPECT_FALSE((*prompts)[0].output_tokens.has_value());
  EXPECT_FALSE((*prompts)[1].text.has_value());
  EXPECT_EQ((*prompts)[1].ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ((*prompts)[1].output_tokens.value_or(0), 9);

  const auto bad = ReadPromptsJsonl(WriteTemp("bad.jsonl", "{\"prompt\": \"ok\"}\n{\"x\": 1}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(":2:"), std::string::npos) << bad.status();
  EXPECT_FALSE(
      ReadPromptsJsonl(WriteTemp("zero.jsonl", "{\"prompt\": \"a\", \"output_tokens\": 0}\n"))
          .ok());
  EXPECT_FALSE(ReadPromptsJsonl(WriteTemp("empty.jsonl", "\n")).ok());
  EXPECT_EQ(ReadPromptsJsonl(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace coil::load
