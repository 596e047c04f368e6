// A live exporter on an ephemeral loopback port, fetched with a real HTTP client
// (cpp-httplib's), also while idle and half-finished connections try to starve it.
#include "engine/metrics/exporter.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

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
  EXPECT_EQ(families->size(), 21u);  // coil_metrics_test lists them
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

// A plain TCP connection to the exporter, optionally sending some bytes and then nothing.
int Connect(int port, const std::string& bytes = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  if (!bytes.empty() && write(fd, bytes.data(), bytes.size()) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Twice as many silent connections as the exporter keeps, and as many that sent half a
// request, and a scrape still gets its answer at once: no connection holds a thread, and a
// new one evicts the oldest idle one when the exporter is full.
TEST(MetricsExporterTest, IdleAndHalfSentConnectionsCannotStarveAScrape) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok());
  auto exporter = MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", 0);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int port = (*exporter)->port();
  std::vector<int> idle;
  for (int i = 0; i < 2 * MetricsExporter::kMaxClients; ++i) {
    idle.push_back(Connect(port, i % 2 == 0 ? "" : "GET /metr"));
    ASSERT_GE(idle.back(), 0);
  }
  const auto start = std::chrono::steady_clock::now();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto response = client.Get("/metrics");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  // The symptom was 3.7 s with 8 idle sockets and a timeout with 64; one second is
  // far above what a poll loop needs and far below what one blocked thread would cost.
  EXPECT_LT(seconds, 1.0);
  for (int fd : idle) close(fd);
}

// A connection that sends nothing is closed after the read timeout.
TEST(MetricsExporterTest, ASilentConnectionIsClosedAfterTheReadTimeout) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok());
  auto exporter = MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", 0);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int fd = Connect((*exporter)->port());
  ASSERT_GE(fd, 0);
  timeval timeout{};
  timeout.tv_sec = MetricsExporter::kReadTimeout.count() + 5;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const auto start = std::chrono::steady_clock::now();
  char byte = 0;
  EXPECT_EQ(read(fd, &byte, 1), 0) << "expected the exporter to close the connection";
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, MetricsExporter::kReadTimeout - std::chrono::milliseconds(100));
  EXPECT_LT(waited, MetricsExporter::kReadTimeout + std::chrono::seconds(3));
  close(fd);
}

TEST(MetricsExporterTest, OnlyGetAndHead) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok());
  auto exporter = MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", 0);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  httplib::Client client("127.0.0.1", (*exporter)->port());
  auto posted = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 405);
  auto head = client.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  auto with_query = client.Get("/metrics?name[]=coil_preemptions_total");
  ASSERT_TRUE(with_query);
  EXPECT_EQ(with_query->status, 200);
}

TEST(MetricsExporterTest, RejectsPortOutOfRange) {
  auto metrics = CoilMetrics::Create();
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricsExporter::Start((*metrics)->registry(), "127.0.0.1", 70000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coil::metrics
