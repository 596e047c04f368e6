// coil::Client: a small C++ client for coil.v1.Generation and the standard health service,
// shared by coil-cli, the tests and the load generator. Generate streams the server's
// responses to a callback as they arrive and returns the whole generation. Every call
// returns absl::Status with the server's code and message. gRPC types stay in client.cc.
#ifndef COIL_ENGINE_CLIENT_CLIENT_H_
#define COIL_ENGINE_CLIENT_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coil/v1/generation.pb.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace coil {

// Cancels a Generate call from another thread. One token per call.
class CancelToken {
 public:
  void Cancel();

 private:
  friend class Client;
  void Bind(grpc::ClientContext* context);
  void Unbind();

  std::mutex mu_;
  grpc::ClientContext* context_ = nullptr;
  bool cancelled_ = false;
};

struct CallOptions {
  std::optional<std::chrono::milliseconds> timeout;  // the call's deadline
  CancelToken* cancel = nullptr;                     // lets another thread cancel it
};

// A whole generation: what every response carried, concatenated, and the final response.
struct Generation {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<coil::v1::TokenLogprob> logprobs;
  coil::v1::GenerateResponse final;  // finish_reason, usage, timings
  int32_t num_responses = 0;
};

class Client {
 public:
  // Returns false from the callback to cancel the call.
  using ResponseCallback = std::function<bool(const coil::v1::GenerateResponse&)>;

  // Connects to `target` ("host:port") and waits up to `timeout` for the channel.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         std::chrono::milliseconds timeout);
  ~Client();

  absl::StatusOr<Generation> Generate(const coil::v1::GenerateRequest& request,
                                      const ResponseCallback& on_response = nullptr,
                                      const CallOptions& options = {});
  absl::StatusOr<coil::v1::ModelInfo> Info();
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text,
                                                bool add_special_tokens = false);
  absl::StatusOr<std::string> Detokenize(const std::vector<int32_t>& ids,
                                         bool skip_special_tokens = false);
  // grpc.health.v1.Health/Check for `service` ("" is the server as a whole): true when
  // SERVING, false when NOT_SERVING; an error when the server cannot be reached.
  absl::StatusOr<bool> Health(const std::string& service = "");

 private:
  struct Stubs;
  explicit Client(std::unique_ptr<Stubs> stubs);
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace coil

#endif  // COIL_ENGINE_CLIENT_CLIENT_H_
