// The exported metric set is checked against the list the operators' dashboards rely on,
// written out here by hand, and every family against the naming rules.
#include "engine/metrics/coil_metrics.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/metrics/exposition_parser.h"

namespace coil::metrics {
namespace {

using ::coil::metrics::testing::CheckHistogram;
using ::coil::metrics::testing::FindFamily;
using ::coil::metrics::testing::ParsedFamily;
using ::coil::metrics::testing::ParseExposition;
using ::coil::metrics::testing::SampleValue;

TEST(CoilMetricsTest, ExportsExactlyTheDocumentedFamilies) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto families = ParseExposition((*metrics)->registry().Render());
  ASSERT_TRUE(families.ok()) << families.status();
  const std::map<std::string, std::string> expected = {
      {"coil_requests_finished_total", "counter"},
      {"coil_requests_failed_total", "counter"},
      {"coil_requests_waiting", "gauge"},
      {"coil_requests_running", "gauge"},
      {"coil_state_rows_used", "gauge"},
      {"coil_state_rows_free", "gauge"},
      {"coil_kv_pages_used", "gauge"},
      {"coil_kv_pages_free", "gauge"},
      {"coil_preemptions_total", "counter"},
      {"coil_prompt_tokens_total", "counter"},
      {"coil_generated_tokens_total", "counter"},
      {"coil_prefix_cache_hits_total", "counter"},
      {"coil_prefix_cache_misses_total", "counter"},
      {"coil_prefix_cache_hit_tokens_total", "counter"},
      {"coil_prefix_cache_evictions_total", "counter"},
      {"coil_prefix_cache_rows", "gauge"},
      {"coil_prefix_cache_pages", "gauge"},
      {"coil_time_to_first_token_seconds", "histogram"},
      {"coil_inter_token_latency_seconds", "histogram"},
      {"coil_request_latency_seconds", "histogram"},
      {"coil_step_duration_seconds", "histogram"},
  };
  std::map<std::string, std::string> got;
  for (const ParsedFamily& family : *families) {
    got[family.name] = family.type;
    EXPECT_TRUE(absl::StartsWith(family.name, "coil_")) << family.name;
    EXPECT_FALSE(family.help.empty()) << family.name;
    if (family.type == "counter") {
      EXPECT_TRUE(absl::EndsWith(family.name, "_total")) << family.name;
    }
    if (family.type == "histogram") {
      EXPECT_TRUE(absl::EndsWith(family.name, "_seconds")) << family.name;
      EXPECT_TRUE(CheckHistogram(family).ok()) << CheckHistogram(family);
    }
  }
  EXPECT_EQ(got, expected);
}

TEST(CoilMetricsTest, LabelledSeriesExistAtZeroAndCountUpdates) {
  auto created = CoilMetrics::Create();
  ASSERT_TRUE(created.ok());
  CoilMetrics& m = **created;
  m.RequestsFinished(FinishReason::kEos).Increment();
  m.RequestsFinished(FinishReason::kEos).Increment();
  m.RequestsFailed(absl::StatusCode::kResourceExhausted).Increment();
  m.RequestsFailed(absl::StatusCode::kOk).Increment();  // not an error: counted as UNKNOWN
  m.requests_waiting().Set(3);
  m.kv_pages_free().Set(120);
  m.generated_tokens().Increment(17);
  m.time_to_first_token().Observe(0.2);

  auto families = ParseExposition(m.registry().Render());
  ASSERT_TRUE(families.ok()) << families.status();
  const ParsedFamily& finished = *FindFamily(*families, "coil_requests_finished_total");
  EXPECT_EQ(finished.samples.size(), 3u);  // length, stop, eos
  EXPECT_EQ(SampleValue(finished, finished.name, {{"reason", "eos"}}), 2);
  EXPECT_EQ(SampleValue(finished, finished.name, {{"reason", "stop"}}), 0);
  EXPECT_EQ(SampleValue(finished, finished.name, {{"reason", "length"}}), 0);
  const ParsedFamily& failed = *FindFamily(*families, "coil_requests_failed_total");
  EXPECT_EQ(failed.samples.size(), 16u);  // every code but OK
  EXPECT_EQ(SampleValue(failed, failed.name, {{"code", "RESOURCE_EXHAUSTED"}}), 1);
  EXPECT_EQ(SampleValue(failed, failed.name, {{"code", "UNKNOWN"}}), 1);
  EXPECT_EQ(SampleValue(failed, failed.name, {{"code", "INVALID_ARGUMENT"}}), 0);
  EXPECT_EQ(
      SampleValue(*FindFamily(*families, "coil_requests_waiting"), "coil_requests_waiting", {}), 3);
  EXPECT_EQ(SampleValue(*FindFamily(*families, "coil_kv_pages_free"), "coil_kv_pages_free", {}),
            120);
  EXPECT_EQ(SampleValue(*FindFamily(*families, "coil_generated_tokens_total"),
                        "coil_generated_tokens_total", {}),
            17);
  const ParsedFamily& ttft = *FindFamily(*families, "coil_time_to_first_token_seconds");
  // 0.2 s lies above the 0.1 bound and at or below 0.25.
  EXPECT_EQ(SampleValue(ttft, ttft.name + "_bucket", {{"le", "0.1"}}), 0);
  EXPECT_EQ(SampleValue(ttft, ttft.name + "_bucket", {{"le", "0.25"}}), 1);
  EXPECT_EQ(SampleValue(ttft, ttft.name + "_sum", {}), 0.2);
}

}  // namespace
}  // namespace coil::metrics
