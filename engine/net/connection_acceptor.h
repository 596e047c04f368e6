// ConnectionAcceptor: the accept loop of one port on a thread of its own, handing every
// connection it takes to a callback (coil-serve's gRPC server, through
// grpc::AddInsecureChannelFromFd) and keeping the live ones under a cap. gRPC 1.51's own
// accept loop stops for good after one accept4 failure (EMFILE), so the port would never
// accept again; this one cannot stop: beyond the cap a connection is accepted and closed at
// once (a reset, never a hang in the backlog), and out of descriptors it refuses the
// pending connection (Listener::Accept) and tries again 100 ms later. A connection counts
// until its new owner closes its descriptor: the acceptor keeps each one's socket cookie
// (unique for the socket's life, unlike the descriptor number) and, when the count reaches
// the cap, forgets those whose descriptor no longer holds that socket. It also refuses a
// connection when fewer than `headroom` descriptors would be left free: the new owner and
// everything else in the process need some (gRPC 1.51 was seen to free a channel twice when
// it ran out of descriptors), so the port runs out before the process does. Refusals are
// logged at most once every 10 s.
#ifndef COIL_ENGINE_NET_CONNECTION_ACCEPTOR_H_
#define COIL_ENGINE_NET_CONNECTION_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/net/listener.h"

namespace coil::net {

class ConnectionAcceptor {
 public:
  // Starts accepting on `listener`'s sockets; `hand_off` gets each accepted descriptor
  // (and owns it from then on), on the acceptor's thread. `name` is for the log ("gRPC").
  static absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> Start(
      std::unique_ptr<Listener> listener, int max_connections, int headroom, std::string name,
      std::function<void(int fd)> hand_off);

  // The headroom coil-serve keeps for everything but gRPC's connections.
  static constexpr int kDefaultHeadroom = 64;
  ~ConnectionAcceptor();  // Stop()
  ConnectionAcceptor(const ConnectionAcceptor&) = delete;
  ConnectionAcceptor& operator=(const ConnectionAcceptor&) = delete;

  // Stops accepting and closes the listening sockets; connections handed off stay open.
  void Stop();

  int port() const { return listener_->port(); }
  int64_t accepted() const { return accepted_.load(); }
  // Refused over the cap, or for lack of descriptors.
  int64_t refused() const { return refused_.load(); }

  // Public for std::make_unique; use Start.
  ConnectionAcceptor(std::unique_ptr<Listener> listener, int max_connections, int headroom,
                     std::string name, std::function<void(int fd)> hand_off, int wake_fd);

 private:
  void Run();
  // Drops the connections whose descriptor no longer holds the socket handed off.
  void Prune();
  // Why `fd`, just accepted, must be refused; empty when it may be handed off.
  std::string RefusalReason(int fd);

  std::unique_ptr<Listener> listener_;
  const int max_connections_;
  const int headroom_;
  const std::string name_;
  std::function<void(int fd)> hand_off_;
  int wake_fd_;  // an eventfd that Stop writes
  std::vector<std::pair<int, uint64_t>> live_;  // (descriptor, socket cookie); the thread's
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace coil::net

#endif  // COIL_ENGINE_NET_CONNECTION_ACCEPTOR_H_
