#include "engine/net/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace coil::net {
namespace {

// "[::1]" -> "::1"; an empty host is every address.
std::string BareHost(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
}

void SetPort(sockaddr* address, int port) {
  if (address->sa_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(address)->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(address)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::Bind(const std::string& host, int port,
                                                         int backlog) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", port, " is out of range; use 0 (any free port) to 65535"));
  }
  const std::string bare = BareHost(host);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(bare.empty() ? nullptr : bare.c_str(), "0", &hints, &found);
  if (resolved != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve host '", host,
                                               "': ", gai_strerror(resolved)));
  }
  std::unique_ptr<Listener> listener(new Listener());
  listener->port_ = port;
  std::string last_error = "no address";
  for (addrinfo* info = found; info != nullptr; info = info->ai_next) {
    const int fd = socket(info->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // An IPv6 socket takes only IPv6, so that "::" and "0.0.0.0" can both be bound.
    if (info->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &yes, sizeof(yes));
    SetPort(info->ai_addr, listener->port_);
    if (bind(fd, info->ai_addr, info->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    // Port 0: the first bound address picks it, and the others take the same one.
    if (listener->port_ == 0) listener->port_ = BoundPort(fd);
    listener->fds_.push_back(fd);
  }
  freeaddrinfo(found);
  if (listener->fds_.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", last_error));
  }
  listener->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return listener;
}

Listener::~Listener() {
  for (int fd : fds_) close(fd);
  if (reserve_fd_ >= 0) close(reserve_fd_);
}

int Listener::Accept(int fd, AcceptError* error, int* error_number) {
  const int connection = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (connection >= 0) {
    int yes = 1;
    setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    *error = AcceptError::kNone;
    return connection;
  }
  const int saved = errno;
  if (error_number != nullptr) *error_number = saved;
  switch (saved) {
    case EAGAIN:
#if EAGAIN != EWOULDBLOCK
    case EWOULDBLOCK:
#endif
      *error = AcceptError::kEmpty;
      return -1;
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:  // refused by a firewall rule: that connection only
      *error = AcceptError::kRetry;
      return -1;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      // Refuse the connection at the head of the queue, so that it is reset instead of
      // waiting in the backlog, then take the reserve back.
      if (reserve_fd_ >= 0) {
        close(reserve_fd_);
        const int refused = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (refused >= 0) close(refused);
        reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      *error = AcceptError::kOutOfDescriptors;
      return -1;
    default:
      *error = AcceptError::kFailed;
      return -1;
  }
}

long RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long>(limit.rlim_cur);
}

}  // namespace coil::net
