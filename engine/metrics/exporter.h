// Serves a Registry over HTTP for Prometheus: GET /metrics answers the text exposition
// format 0.0.4, every other path 404, another method 405. One thread, non-blocking sockets
// and poll: a connection that sends nothing costs a descriptor, never a thread, so idle or
// slow clients cannot starve a scrape. Each connection gets one request: its head must
// arrive within kReadTimeout and the answer leave within kWriteTimeout, then it is closed.
// At most kMaxClients are open; a new one beyond that evicts the oldest that has not sent
// its request yet (so a flood of idle connections cannot lock a scraper out). A scrape only
// reads atomics and never blocks the engine loop. The exporter stops and joins its thread
// when destroyed.
#ifndef COIL_ENGINE_METRICS_EXPORTER_H_
#define COIL_ENGINE_METRICS_EXPORTER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "engine/metrics/registry.h"
#include "engine/net/listener.h"

namespace coil::metrics {

inline constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class MetricsExporter {
 public:
  static constexpr int kMaxClients = 64;
  static constexpr std::chrono::seconds kReadTimeout{5};
  static constexpr std::chrono::seconds kWriteTimeout{10};
  static constexpr size_t kMaxRequestBytes = 8192;

  // Binds `host`:`port` (port 0: any free port, see port()) and starts serving. Fails with
  // UNAVAILABLE when the address cannot be bound. `registry` must outlive the exporter.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const Registry& registry,
                                                                const std::string& host, int port);

  // Only Start() can make the key.
  class Key {
    friend class MetricsExporter;
    Key() = default;
  };
  MetricsExporter(Key, const Registry& registry, std::unique_ptr<net::Listener> listener,
                  int wake_fd);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The port actually bound.
  int port() const { return listener_->port(); }

 private:
  void Run();

  const Registry& registry_;
  std::unique_ptr<net::Listener> listener_;
  int wake_fd_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace coil::metrics

#endif  // COIL_ENGINE_METRICS_EXPORTER_H_
