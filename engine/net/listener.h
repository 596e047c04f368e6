// Listener: the listening TCP sockets of one of coil-serve's ports, and accepting on them
// in a way that cannot wedge the port. It binds every address the host resolves to (as
// gRPC does: "localhost" is both ::1 and 127.0.0.1), non-blocking and close-on-exec, with
// SO_REUSEADDR only (SO_REUSEPORT would let a second process bind the same port and take
// half its connections). Accept never leaves a connection stuck in the backlog when the
// process is out of descriptors: a reserve descriptor, held from the start, is freed to
// accept and close the pending connection (the client gets a reset, not a hang), and the
// caller is told to wait before accepting again. Used by coil's own accept loops, since
// gRPC 1.51's stops for good after one failed accept4.
#ifndef COIL_ENGINE_NET_LISTENER_H_
#define COIL_ENGINE_NET_LISTENER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace coil::net {

class Listener {
 public:
  // Binds `host` ("0.0.0.0", "::", "[::1]", "localhost", a name) and `port` (0: a free one,
  // the same on every address) and listens. UNAVAILABLE when nothing could be bound.
  static absl::StatusOr<std::unique_ptr<Listener>> Bind(const std::string& host, int port,
                                                        int backlog = 1024);
  ~Listener();  // closes the sockets
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  // The listening sockets, to poll for POLLIN.
  const std::vector<int>& fds() const { return fds_; }

  enum class AcceptError {
    kNone,               // a connection was accepted
    kEmpty,              // nothing pending
    kRetry,              // the connection went away meanwhile; call again
    kOutOfDescriptors,   // EMFILE/ENFILE/ENOBUFS/ENOMEM: the pending connection was refused
                         // where possible; wait a little before accepting again
    kFailed,             // anything else (errno in *error_number)
  };
  // Accepts one connection from `fd` (one of fds()), non-blocking and close-on-exec, with
  // TCP_NODELAY. Returns it, or -1 and why.
  int Accept(int fd, AcceptError* error, int* error_number = nullptr);

 private:
  Listener() = default;

  std::vector<int> fds_;
  int port_ = 0;
  int reserve_fd_ = -1;  // /dev/null, freed to refuse a connection when out of descriptors
};

// Raises the soft limit on open descriptors to the hard limit; returns the soft limit now.
long RaiseDescriptorLimit();

}  // namespace coil::net

#endif  // COIL_ENGINE_NET_LISTENER_H_
