// OpenAiServer: the OpenAI-compatible HTTP API on rank 0 (POST /v1/completions and
// /v1/chat/completions, streamed as server-sent events or not; GET /v1/models; GET
// /health), served by cpp-httplib beside the gRPC service and from the same EngineLoop, so
// admission, budgets, metrics and drain are shared. Each connection is served by one of a
// fixed pool of threads; a generation's handler waits for the engine and writes as output
// arrives, polling the socket, so a client that disconnects (or stops reading past the
// write timeout) has its requests cancelled and their rows freed at the next step.
// Invariant: every engine request a handler submits is cancelled or finished, and its
// stream detached, before the handler's exchange is destroyed.
#ifndef COIL_ENGINE_HTTP_OPENAI_SERVER_H_
#define COIL_ENGINE_HTTP_OPENAI_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "engine/engine_loop.h"
#include "engine/http/openai_protocol.h"
#include "engine/metrics/coil_metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace coil::http {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 0;  // 0: any free port
  // Connections served at once (each streaming request holds one thread); beyond them
  // up to `max_queued_connections` wait, and more are answered 503 and closed.
  int threads = 64;
  int max_queued_connections = 64;
  size_t max_body_bytes = 8 << 20;  // larger bodies: 413
  int max_header_count = 64;        // more: 431
  size_t max_header_bytes = 32 << 10;
  int keep_alive_seconds = 5;  // an idle keep-alive connection is closed after this
  int read_timeout_seconds = 10;
  int write_timeout_seconds = 10;  // a client that reads nothing this long is dropped
};

class OpenAiServer {
 public:
  // Binds and starts serving. `engine`, `context`'s pointers and `metrics` (may be null)
  // must outlive the server.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(const HttpServerOptions& options,
                                                             EngineLoop& engine,
                                                             ProtocolContext context,
                                                             metrics::CoilMetrics* metrics);
  ~OpenAiServer();  // Stop()
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  int port() const { return port_; }
  // Waits (up to 5 s) for the generation handlers to write their last output, then closes
  // the listening socket and waits for the connection threads (call after the engine has
  // drained: every handler then ends within one poll).
  void Stop();

  // Only Start() can make the key.
  class Key {
    friend class OpenAiServer;
    Key() = default;
  };
  OpenAiServer(Key, const HttpServerOptions& options, EngineLoop& engine, ProtocolContext context,
               metrics::CoilMetrics* metrics);

 private:
  void Route();

  const HttpServerOptions options_;
  EngineLoop& engine_;
  const ProtocolContext context_;
  metrics::CoilMetrics* metrics_;
  const int64_t created_;  // unix seconds, for /v1/models
  std::unique_ptr<httplib::Server> server_;
  // Generation requests whose response is still being written.
  std::shared_ptr<std::atomic<int>> active_exchanges_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
  int port_ = 0;
};

}  // namespace coil::http

#endif  // COIL_ENGINE_HTTP_OPENAI_SERVER_H_
