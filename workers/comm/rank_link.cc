#include "workers/comm/rank_link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace coil::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kAck = 'A';
constexpr char kConfirm = 'C';

bool IsLoopback(uint32_t address) { return (ntohl(address) >> 24) == 127; }

std::string AddressText(uint32_t address, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  in_addr in{};
  in.s_addr = address;
  inet_ntop(AF_INET, &in, text, sizeof(text));
  return absl::StrCat(text, ":", port);
}

std::string ErrnoText(int error) { return std::strerror(error); }

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Waits for `events` on `fd` until `deadline`; true when they came.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, RemainingMs(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

// One attempt at `address`: connected, hello sent and acknowledged, or why not.
absl::StatusOr<Fd> TryConnect(uint32_t address, uint16_t port, const char (&hello)[12],
                              Clock::time_point deadline) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = address;
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    if (errno != EINPROGRESS) return absl::UnavailableError(ErrnoText(errno));
    if (!WaitFor(fd.get(), POLLOUT, deadline)) return absl::DeadlineExceededError("no answer");
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return absl::UnavailableError(ErrnoText(error));
  }
  // 12 bytes fit any socket buffer: one send.
  if (send(fd.get(), hello, sizeof(hello), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(hello))) {
    return absl::UnavailableError(absl::StrCat("sending the hello: ", ErrnoText(errno)));
  }
  if (!WaitFor(fd.get(), POLLIN, deadline)) {
    return absl::DeadlineExceededError("connected, but no acknowledgement");
  }
  char ack = 0;
  if (recv(fd.get(), &ack, 1, 0) != 1 || ack != kAck) {
    return absl::UnavailableError("connected, but not to rank 0's monitor");
  }
  if (send(fd.get(), &kConfirm, 1, MSG_NOSIGNAL) != 1) {
    return absl::UnavailableError(absl::StrCat("confirming: ", ErrnoText(errno)));
  }
  return fd;
}

}  // namespace

std::pair<int, int> LinkPortRange() {
  const char* min = std::getenv("OMPI_MCA_btl_tcp_port_min_v4");
  if (min == nullptr || std::atoi(min) <= 0 || std::atoi(min) > 65535) return {0, 0};
  const int first = std::atoi(min);
  const char* range = std::getenv("OMPI_MCA_btl_tcp_port_range_v4");
  // Open MPI's own default range: every port from the minimum up.
  const int count = range != nullptr && std::atoi(range) > 0 ? std::atoi(range) : 65535 - first + 1;
  return {first, std::min(65535, first + count - 1)};
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Fd::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string LinkHostName() {
  char host[sizeof(LinkAddress::host)] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

absl::StatusOr<Fd> ListenForLinks(LinkAddress& address) {
  address = LinkAddress();
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  const auto [first, last] = LinkPortRange();
  std::string where = first == 0 ? "any free port" : absl::StrCat("ports ", first, "-", last);
  bool bound_one = false;
  for (int port = first; port <= last && !bound_one; ++port) {
    any.sin_port = htons(static_cast<uint16_t>(port));
    bound_one = bind(fd.get(), reinterpret_cast<const sockaddr*>(&any), sizeof(any)) == 0;
    if (!bound_one && errno != EADDRINUSE) break;
  }
  if (!bound_one || listen(fd.get(), 64) != 0) {
    return absl::UnavailableError(absl::StrCat("listening on ", where, ": ", ErrnoText(errno)));
  }
  sockaddr_in bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length);
  address.port = ntohs(bound.sin_port);
  std::random_device random;
  address.token = (static_cast<uint64_t>(random()) << 32) ^ random();
  const std::string host = LinkHostName();
  std::memcpy(address.host, host.data(), std::min(host.size(), sizeof(address.host) - 1));

  std::vector<uint32_t> outside, loopback;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    for (const ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
      if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET ||
          (entry->ifa_flags & IFF_UP) == 0) {
        continue;
      }
      const uint32_t ip = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr.s_addr;
      (IsLoopback(ip) ? loopback : outside).push_back(ip);
    }
    freeifaddrs(interfaces);
  }
  if (loopback.empty()) loopback.push_back(htonl(INADDR_LOOPBACK));
  outside.insert(outside.end(), loopback.begin(), loopback.end());
  for (uint32_t ip : outside) {
    if (address.count == LinkAddress::kMaxAddresses) break;
    address.addresses[address.count++] = ip;
  }
  return fd;
}

absl::StatusOr<int> ReadHello(PendingLink& pending, uint64_t token) {
  constexpr size_t kHello = sizeof(pending.hello);
  for (;;) {
    if (pending.received == kHello && !pending.acknowledged) {
      uint64_t got = 0;
      int32_t rank = -1;
      std::memcpy(&got, pending.hello, sizeof(got));
      std::memcpy(&rank, pending.hello + sizeof(got), sizeof(rank));
      if (got != token || rank <= 0) return absl::PermissionDeniedError("not a rank of this job");
      if (send(pending.fd.get(), &kAck, 1, MSG_NOSIGNAL) != 1) {
        return absl::UnavailableError(absl::StrCat("acknowledging: ", ErrnoText(errno)));
      }
      pending.acknowledged = true;
    }
    char confirm = 0;
    char* into = pending.received < kHello ? pending.hello + pending.received : &confirm;
    const size_t want = pending.received < kHello ? kHello - pending.received : 1;
    const ssize_t n = recv(pending.fd.get(), into, want, 0);
    if (n > 0) {
      pending.received += static_cast<size_t>(n);
      if (pending.received > kHello) {
        if (confirm != kConfirm) return absl::PermissionDeniedError("not a rank of this job");
        int32_t rank = -1;
        std::memcpy(&rank, pending.hello + sizeof(uint64_t), sizeof(rank));
        return rank;
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
    if (n < 0 && errno == EINTR) continue;
    return absl::UnavailableError("closed before its hello was confirmed");
  }
}

absl::StatusOr<Fd> ConnectLink(const LinkAddress& address, int rank,
                               std::chrono::milliseconds timeout) {
  if (address.port == 0) return absl::UnavailableError("rank 0 does not listen");
  char hello[12] = {};
  const int32_t rank32 = rank;
  std::memcpy(hello, &address.token, sizeof(address.token));
  std::memcpy(hello + sizeof(address.token), &rank32, sizeof(rank32));
  char host[sizeof(address.host) + 1] = {};
  std::memcpy(host, address.host, sizeof(address.host));
  const bool same_host = LinkHostName() == host;
  // On rank 0's host the loopback first; elsewhere never (it would be this host's).
  std::vector<uint32_t> order;
  for (int i = 0; i < std::min<int>(address.count, LinkAddress::kMaxAddresses); ++i) {
    const uint32_t ip = address.addresses[i];
    if (IsLoopback(ip)) {
      if (same_host) order.insert(order.begin(), ip);
    } else {
      order.push_back(ip);
    }
  }
  std::string tried;
  for (uint32_t ip : order) {
    absl::StatusOr<Fd> fd = TryConnect(ip, address.port, hello, Clock::now() + timeout);
    if (fd.ok()) return fd;
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", AddressText(ip, address.port), ": ",
                    fd.status().message());
  }
  return absl::UnavailableError(absl::StrCat("no address of rank 0 (host ", host,
                                             ") answered: ", tried.empty() ? "none" : tried));
}

bool ReadLink(const Fd& link, bool& left) {
  char buffer[64];
  for (;;) {
    const ssize_t n = recv(link.get(), buffer, sizeof(buffer), 0);
    if (n > 0) {
      if (std::find(buffer, buffer + n, kLinkLeave) != buffer + n) left = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // end-of-file, or reset
  }
}

void WriteLeave(const Fd& link) {
  if (link.valid()) (void)send(link.get(), &kLinkLeave, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace coil::comm
