// Serves a Registry over HTTP for Prometheus: GET /metrics answers the text exposition
// format 0.0.4, every other path 404. One background thread accepts connections (cpp-httplib
// runs each request on its small pool); a scrape only reads atomics and never blocks the
// engine loop. The exporter stops and joins its thread when destroyed.
#ifndef COIL_ENGINE_METRICS_EXPORTER_H_
#define COIL_ENGINE_METRICS_EXPORTER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "engine/metrics/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace coil::metrics {

inline constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class MetricsExporter {
 public:
  // Binds `host`:`port` (port 0: any free port, see port()) and starts serving. Fails with
  // UNAVAILABLE when the address cannot be bound. `registry` must outlive the exporter.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const Registry& registry,
                                                                const std::string& host, int port);

  // Only Start() can make the key.
  class Key {
    friend class MetricsExporter;
    Key() = default;
  };
  MetricsExporter(Key, const Registry& registry);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The port actually bound.
  int port() const { return port_; }

 private:
  const Registry& registry_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
  int port_ = 0;
};

}  // namespace coil::metrics

#endif  // COIL_ENGINE_METRICS_EXPORTER_H_
