// Renders metrics and reads them back with the independent parser in
// exposition_parser.cc; expected values are worked out by hand in each test.
#include "engine/metrics/registry.h"

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "engine/metrics/exposition.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/metrics/exposition_parser.h"

namespace coil::metrics {
namespace {

using ::coil::metrics::testing::CheckHistogram;
using ::coil::metrics::testing::FindFamily;
using ::coil::metrics::testing::ParsedFamily;
using ::coil::metrics::testing::ParseExposition;
using ::coil::metrics::testing::SampleValue;

TEST(RegistryTest, CounterAndGaugeWithLabelsRenderAndParse) {
  Registry registry;
  CounterFamily* requests =
      registry.AddCounter("t_requests_total", "Requests.", {"reason"}).value();
  GaugeFamily* queue = registry.AddGauge("t_queue", "Queue length.").value();
  requests->WithLabels({"stop"}).value()->Increment();
  requests->WithLabels({"stop"}).value()->Increment(2);
  requests->WithLabels({"length"}).value()->Increment(0.5);
  requests->WithLabels({"length"}).value()->Increment(-3);  // ignored: counters never go down
  Gauge* gauge = queue->WithLabels({}).value();
  gauge->Set(7);
  gauge->Add(-2.25);

  const std::string text = registry.Render();
  auto families = ParseExposition(text);
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << text;
  ASSERT_EQ(families->size(), 2u);
  const ParsedFamily& counter = (*families)[0];
  EXPECT_EQ(counter.name, "t_requests_total");
  EXPECT_EQ(counter.type, "counter");
  EXPECT_EQ(counter.help, "Requests.");
  EXPECT_EQ(SampleValue(counter, "t_requests_total", {{"reason", "stop"}}), 3.0);  // 1 + 2
  EXPECT_EQ(SampleValue(counter, "t_requests_total", {{"reason", "length"}}), 0.5);
  const ParsedFamily& g = (*families)[1];
  EXPECT_EQ(g.type, "gauge");
  EXPECT_EQ(SampleValue(g, "t_queue", {}), 4.75);  // 7 - 2.25
  // Children render sorted by label value; an unlabelled sample has no braces.
  EXPECT_NE(
      text.find("t_requests_total{reason=\"length\"} 0.5\nt_requests_total{reason=\"stop\"} 3\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\nt_queue 4.75\n"), std::string::npos) << text;
}

TEST(RegistryTest, HistogramBucketsAreCumulativeWithInclusiveBounds) {
  Registry registry;
  HistogramFamily* family =
      registry.AddHistogram("t_latency_seconds", "Latency.", {1, 2.5, 5}, {"route"}).value();
  Histogram* h = family->WithLabels({"a"}).value();
  for (double v : {0.5, 1.0, 2.0, 3.0, 7.0, 100.0}) h->Observe(v);
  family->WithLabels({"b"}).value();  // an empty series: all zero

  const std::string text = registry.Render();
  auto families = ParseExposition(text);
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << text;
  const ParsedFamily& f = (*families)[0];
  EXPECT_EQ(f.type, "histogram");
  EXPECT_TRUE(CheckHistogram(f).ok()) << CheckHistogram(f) << "\n" << text;
  // By hand: le=1 holds 0.5 and 1 (inclusive); le=2.5 adds 2; le=5 adds 3; +Inf adds 7, 100.
  const std::string b = "t_latency_seconds_bucket";
  EXPECT_EQ(SampleValue(f, b, {{"route", "a"}, {"le", "1"}}), 2);
  EXPECT_EQ(SampleValue(f, b, {{"route", "a"}, {"le", "2.5"}}), 3);
  EXPECT_EQ(SampleValue(f, b, {{"route", "a"}, {"le", "5"}}), 4);
  EXPECT_EQ(SampleValue(f, b, {{"route", "a"}, {"le", "+Inf"}}), 6);
  EXPECT_EQ(SampleValue(f, "t_latency_seconds_sum", {{"route", "a"}}), 113.5);
  EXPECT_EQ(SampleValue(f, "t_latency_seconds_count", {{"route", "a"}}), 6);
  EXPECT_EQ(SampleValue(f, b, {{"route", "b"}, {"le", "+Inf"}}), 0);
  EXPECT_EQ(SampleValue(f, "t_latency_seconds_count", {{"route", "b"}}), 0);
}

TEST(RegistryTest, LabelValuesAndHelpAreEscaped) {
  Registry registry;
  const std::string help = "Path C:\\tmp\nsecond line with \"quotes\"";
  const std::string nasty = "a\"b\\c\nd";
  CounterFamily* family = registry.AddCounter("t_escape_total", help, {"v"}).value();
  family->WithLabels({nasty}).value()->Increment();

  const std::string text = registry.Render();
  // The raw text, escaped by hand: HELP escapes only \ and line feed.
  EXPECT_NE(text.find("# HELP t_escape_total Path C:\\\\tmp\\nsecond line with \"quotes\"\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("t_escape_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  auto families = ParseExposition(text);
  ASSERT_TRUE(families.ok()) << families.status();
  EXPECT_EQ((*families)[0].help, help);
  EXPECT_EQ(SampleValue((*families)[0], "t_escape_total", {{"v", nasty}}), 1);
}

TEST(RegistryTest, ValuesRoundTripThroughText) {
  // Each value must read back as the same double (by strtod, in the parser).
  const std::vector<double> values = {0.1,           1e-9,
                                      0.0005,        1.0 / 3,
                                      123456789.123, 9.99e14,
                                      123456.789,    1e300,
                                      -2.5,          4503599627370497.0,
                                      1e17,          std::numeric_limits<double>::denorm_min()};
  for (double v : values) {
    std::string text;
    AppendValue(v, &text);
    auto families = ParseExposition("# TYPE x gauge\nx " + text + "\n");
    ASSERT_TRUE(families.ok()) << text << ": " << families.status();
    EXPECT_EQ((*families)[0].samples[0].value, v) << text;
  }
  std::string text;
  AppendValue(1e6, &text);
  EXPECT_EQ(text, "1000000");
  text.clear();
  AppendValue(0.0005, &text);
  EXPECT_EQ(text, "0.0005");
  text.clear();
  AppendValue(std::numeric_limits<double>::infinity(), &text);
  EXPECT_EQ(text, "+Inf");
  text.clear();
  AppendValue(-std::numeric_limits<double>::infinity(), &text);
  EXPECT_EQ(text, "-Inf");
  text.clear();
  AppendValue(std::nan(""), &text);
  EXPECT_EQ(text, "NaN");
}

TEST(RegistryTest, RejectsBadDefinitions) {
  Registry registry;
  EXPECT_EQ(registry.AddCounter("9bad", "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddCounter("bad-name", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddCounter("ok_total", "x", {"__reserved"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddCounter("ok_total", "x", {"a", "a"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "x", {1, 2}, {"le"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "x", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "x", {1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "x", {1, INFINITY}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.AddHistogram("h_seconds", "x", {1, 2}).ok());
  EXPECT_EQ(registry.AddGauge("h_seconds", "x").status().code(), absl::StatusCode::kAlreadyExists);
  // A histogram's samples are named h_seconds_count etc.: a gauge cannot take that name.
  EXPECT_EQ(registry.AddGauge("h_seconds_count", "x").status().code(),
            absl::StatusCode::kAlreadyExists);
  CounterFamily* labelled = registry.AddCounter("l_total", "x", {"a", "b"}).value();
  EXPECT_EQ(labelled->WithLabels({"only one"}).status().code(), absl::StatusCode::kInvalidArgument);
  // Whatever was refused left the exposition valid.
  EXPECT_TRUE(ParseExposition(registry.Render()).ok());
}

TEST(RegistryTest, ConcurrentUpdatesAreCountedExactlyWhileRendering) {
  Registry registry;
  Counter* counter = registry.AddCounter("c_total", "x").value()->WithLabels({}).value();
  HistogramFamily* family = registry.AddHistogram("h_seconds", "x", {0.5, 1.5, 2.5}).value();
  Histogram* histogram = family->WithLabels({}).value();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        counter->Increment();
        histogram->Observe(t % 3);  // 0, 1, 2, 0: one of three finite buckets
      }
    });
  }
  // Renders taken mid-flight must still obey the histogram rules.
  for (int i = 0; i < 50; ++i) {
    auto families = ParseExposition(registry.Render());
    ASSERT_TRUE(families.ok()) << families.status();
    const ParsedFamily* h = FindFamily(*families, "h_seconds");
    ASSERT_NE(h, nullptr);
    ASSERT_TRUE(CheckHistogram(*h).ok()) << CheckHistogram(*h);
  }
  for (std::thread& thread : threads) thread.join();
  auto families = ParseExposition(registry.Render());
  ASSERT_TRUE(families.ok());
  EXPECT_EQ(SampleValue(*FindFamily(*families, "c_total"), "c_total", {}), kThreads * kPerThread);
  const ParsedFamily& h = *FindFamily(*families, "h_seconds");
  // Threads 0 and 3 observe 0, thread 1 observes 1, thread 2 observes 2 (sums are exact).
  EXPECT_EQ(SampleValue(h, "h_seconds_bucket", {{"le", "0.5"}}), 2 * kPerThread);
  EXPECT_EQ(SampleValue(h, "h_seconds_bucket", {{"le", "1.5"}}), 3 * kPerThread);
  EXPECT_EQ(SampleValue(h, "h_seconds_bucket", {{"le", "2.5"}}), 4 * kPerThread);
  EXPECT_EQ(SampleValue(h, "h_seconds_sum", {}), 3.0 * kPerThread);
  EXPECT_EQ(SampleValue(h, "h_seconds_count", {}), kThreads * kPerThread);
}

TEST(ExpositionParserTest, RejectsMalformedText) {
  // The parser must be able to fail, or the tests above prove nothing.
  for (const std::string bad : {
           "x 1\n",                             // no TYPE
           "# TYPE x gauge\nx{a=\"1} 1\n",      // unterminated label value
           "# TYPE x gauge\nx{a=\"\\t\"} 1\n",  // bad escape
           "# TYPE x gauge\nx one\n",           // value not a float
           "# TYPE x gauge\nx 1",               // no final line feed
           "# TYPE x gauge\nx 1\nx 2\n",        // duplicate sample
           "# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\n# TYPE x gauge\n",  // x split in two
           "# TYPE x widget\n",                                           // unknown type
       }) {
    EXPECT_FALSE(ParseExposition(bad).ok()) << bad;
  }
  auto not_cumulative = ParseExposition(
      "# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n");
  ASSERT_TRUE(not_cumulative.ok());
  EXPECT_FALSE(CheckHistogram((*not_cumulative)[0]).ok());
  auto inf_not_count = ParseExposition(
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n");
  ASSERT_TRUE(inf_not_count.ok());
  EXPECT_FALSE(CheckHistogram((*inf_not_count)[0]).ok());
}

}  // namespace
}  // namespace coil::metrics
