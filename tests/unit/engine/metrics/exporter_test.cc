// A live exporter on an ephemeral loopback port, fetched with a real HTTP client.
#include "engine/metrics/exporter.h"

#include <httplib.h>

#include "engine/metrics/coil_metrics.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/metrics/exposition_parser.h"

namespace coil::metrics {
namespace {

using ::coil::metrics::testing::FindFamily;
using ::coil::metrics::testing::ParseExposition;
using ::coil::metrics::testing::SampleValue;

TEST(MetricsExporterTest, ServesMetricsAndAnswers404Elsewhere) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok());
  auto exporter = MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", 0);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int port = (*exporter)->port();
  ASSERT_GT(port, 0);

  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  (*metrics)->preemptions().Increment(4);
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->get_header_value("Content-Type"), kExpositionContentType);
  auto families = ParseExposition(response->body);
  ASSERT_TRUE(families.ok()) << families.status();
  EXPECT_EQ(families->size(), 15u);
  EXPECT_EQ(
      SampleValue(*FindFamily(*families, "coil_preemptions_total"), "coil_preemptions_total", {}),
      4);

  // A second scrape sees a later update.
  (*metrics)->preemptions().Increment();
  response = client.Get("/metrics");
  ASSERT_TRUE(response);
  families = ParseExposition(response->body);
  ASSERT_TRUE(families.ok());
  EXPECT_EQ(
      SampleValue(*FindFamily(*families, "coil_preemptions_total"), "coil_preemptions_total", {}),
      5);

  for (const char* path : {"/", "/metric", "/metrics/x", "/healthz"}) {
    response = client.Get(path);
    ASSERT_TRUE(response) << path;
    EXPECT_EQ(response->status, 404) << path;
  }

  // The port is taken while the exporter lives.
  auto second = MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", port);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);

  exporter->reset();  // stops and joins
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(2);
  EXPECT_FALSE(after.Get("/metrics")) << "still serving after the exporter was destroyed";
}

TEST(MetricsExporterTest, RejectsPortOutOfRange) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", 70000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coil::metrics
