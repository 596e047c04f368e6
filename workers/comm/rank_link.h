// Rank links: one TCP connection between rank 0 and each other rank, opened when the rank
// monitor starts and carrying nothing but the end of the process at either end. The kernel
// closes a process's sockets the moment the process ends, however it ends (SIGKILL, a
// crash, an exit that skipped the normal leave), on one host or across hosts, so the other
// end reads end-of-file at once: a dead rank is noticed without waiting for its heartbeats
// to be missed. A rank that leaves normally writes kLinkLeave first, so that its end is not
// taken for a death. A stopped process, or a host that is cut off, keeps its connection
// open: the heartbeats (--rank-timeout) cover those.
//
// Rank 0 listens on every IPv4 interface, on a free port (within Open MPI's TCP port range
// when one is set, btl_tcp_port_min_v4 and btl_tcp_port_range_v4, so that a firewall that
// lets MPI through lets the link through too), and broadcasts the port, its
// addresses, its host's name and a random token over MPI. Each other rank connects to the
// first address that answers (loopback first when it runs on rank 0's host), sends the
// token and its rank, waits for rank 0's one-byte acknowledgement, so that a stray
// listener at one of those addresses is never taken for rank 0, and confirms it with one
// byte, so that rank 0 never takes for a death the end of a connection the rank gave up.
#ifndef COIL_WORKERS_COMM_RANK_LINK_H_
#define COIL_WORKERS_COMM_RANK_LINK_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coil::comm {

// A file descriptor, closed when the object goes.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Close();

 private:
  int fd_ = -1;
};

// What rank 0 broadcasts: a fixed-size record, sent as MPI_BYTEs.
struct LinkAddress {
  static constexpr int kMaxAddresses = 16;
  uint64_t token = 0;
  uint16_t port = 0;  // 0: rank 0 could not listen; no links
  uint16_t count = 0;
  uint32_t addresses[kMaxAddresses] = {};  // IPv4, network byte order, loopback last
  char host[64] = {};                      // rank 0's host name, NUL-terminated
};

// The byte a rank writes on its link when it leaves the job normally.
constexpr char kLinkLeave = 'L';

// The ports the listener may use: Open MPI's TCP range from the environment mpirun gives
// its ranks (OMPI_MCA_btl_tcp_port_min_v4, OMPI_MCA_btl_tcp_port_range_v4), else {0, 0}
// (any free port).
std::pair<int, int> LinkPortRange();

// Rank 0: a non-blocking listening socket on every IPv4 interface and a free port, and the
// record describing it (with a fresh token).
absl::StatusOr<Fd> ListenForLinks(LinkAddress& address);

// A connection rank 0 has accepted whose hello and confirmation have not fully arrived.
struct PendingLink {
  Fd fd;
  char hello[12] = {};  // the token, then the rank
  size_t received = 0;  // of the hello and the confirmation byte after it
  bool acknowledged = false;
  std::chrono::steady_clock::time_point accepted;
};

// Rank 0: reads what has arrived of `pending`'s hello, acknowledges it once it is complete
// and carries `token`, then reads the confirmation. The rank it names once confirmed; -1
// while incomplete; an error for a connection that is not a rank's or that its rank gave
// up (it is to be closed).
absl::StatusOr<int> ReadHello(PendingLink& pending, uint64_t token);

// A rank other than 0: its link to rank 0, tried at each of `address`'s addresses in turn,
// each for at most `timeout` (connection and acknowledgement). Non-blocking on return.
absl::StatusOr<Fd> ConnectLink(const LinkAddress& address, int rank,
                               std::chrono::milliseconds timeout);

// Reads whatever has arrived on a link (non-blocking). Sets `left` when the peer wrote
// kLinkLeave; returns false once the link has closed (end-of-file or an error).
bool ReadLink(const Fd& link, bool& left);

// Writes kLinkLeave on a link, without blocking; errors are ignored (the peer may be gone).
void WriteLeave(const Fd& link);

// This host's name, as ListenForLinks records it.
std::string LinkHostName();

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_RANK_LINK_H_
