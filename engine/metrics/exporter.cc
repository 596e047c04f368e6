#include "engine/metrics/exporter.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace coil::metrics {

MetricsExporter::MetricsExporter(Key, const Registry& registry)
    : registry_(registry), server_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const Registry& registry,
                                                                        const std::string& host,
                                                                        int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is out of range; use 0 (any free port) to 65535"));
  }
  auto exporter = std::make_unique<MetricsExporter>(Key(), registry);
  httplib::Server& server = *exporter->server_;
  const Registry* source = &exporter->registry_;
  server.Get("/metrics", [source](const httplib::Request&, httplib::Response& response) {
    response.set_content(source->Render(), kExpositionContentType);
  });
  // Anything else falls through to cpp-httplib's 404.
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second process bind the same
  // port and silently take half the scrapes; SO_REUSEADDR alone still allows a quick
  // restart while the old socket is in TIME_WAIT.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  if (port == 0) {
    exporter->port_ = server.bind_to_any_port(host);
  } else {
    exporter->port_ = server.bind_to_port(host, port) ? port : -1;
  }
  if (exporter->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind the metrics endpoint to ", host, ":",
                                               port, "; choose a free port with --metrics-port"));
  }
  // The socket already listens, so connections queue until the accept loop runs.
  std::atomic<bool>* returned = &exporter->listen_returned_;
  exporter->thread_ = std::thread([&server, returned] {
    server.listen_after_bind();
    returned->store(true);
  });
  // Server::stop() only acts on a running server: wait until it runs, so the destructor
  // never joins a thread that stop() missed.
  while (!server.is_running() && !returned->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server.is_running()) {
    return absl::UnavailableError(
        absl::StrCat("the metrics endpoint on ", host, ":", exporter->port_, " stopped at once"));
  }
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace coil::metrics
