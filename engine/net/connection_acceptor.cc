#include "engine/net/connection_acceptor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace coil::net {
namespace {

// The socket behind a descriptor, for as long as the socket lives: 0 when the descriptor
// holds no socket (or the kernel has no cookies, before Linux 4.12).
uint64_t SocketCookie(int fd) {
#ifdef SO_COOKIE
  uint64_t cookie = 0;
  socklen_t length = sizeof(cookie);
  if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &length) == 0) return cookie;
#endif
  return 0;
}

LogRateLimiter& RefusalLog() {
  static LogRateLimiter limiter(std::chrono::seconds(10));
  return limiter;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> ConnectionAcceptor::Start(
    std::unique_ptr<Listener> listener, int max_connections, int headroom, std::string name,
    std::function<void(int fd)> hand_off) {
  if (max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the connection cap is ", max_connections, "; give at least 1"));
  }
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  auto acceptor = std::make_unique<ConnectionAcceptor>(std::move(listener), max_connections,
                                                       std::max(0, headroom), std::move(name),
                                                       std::move(hand_off), wake);
  ConnectionAcceptor* raw = acceptor.get();
  acceptor->thread_ = std::thread([raw] { raw->Run(); });
  return acceptor;
}

ConnectionAcceptor::ConnectionAcceptor(std::unique_ptr<Listener> listener, int max_connections,
                                       int headroom, std::string name,
                                       std::function<void(int fd)> hand_off, int wake_fd)
    : listener_(std::move(listener)),
      max_connections_(max_connections),
      headroom_(headroom),
      name_(std::move(name)),
      hand_off_(std::move(hand_off)),
      wake_fd_(wake_fd) {}

ConnectionAcceptor::~ConnectionAcceptor() {
  Stop();
  close(wake_fd_);
}

void ConnectionAcceptor::Stop() {
  if (stopping_.exchange(true)) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // The eventfd's counter cannot overflow here; the thread also checks stopping_.
  }
  if (thread_.joinable()) thread_.join();
  listener_.reset();  // closes the listening sockets: new connections are refused
}

void ConnectionAcceptor::Prune() {
  live_.erase(std::remove_if(live_.begin(), live_.end(),
                             [](const std::pair<int, uint64_t>& entry) {
                               if (fcntl(entry.first, F_GETFD) == -1) return true;  // closed
                               return SocketCookie(entry.first) != entry.second;    // reused
                             }),
              live_.end());
}

std::string ConnectionAcceptor::RefusalReason(int fd) {
  if (static_cast<int>(live_.size()) >= max_connections_) Prune();
  if (static_cast<int>(live_.size()) >= max_connections_) {
    return absl::StrCat(max_connections_, " are open (--max-connections)");
  }
  if (headroom_ > 0) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      const long soft = static_cast<long>(limit.rlim_cur);
      // Descriptors go to the lowest free number, so `fd` below the line means at least
      // that many were free a moment ago: count them only when it is not.
      if (fd >= soft - headroom_) {
        long open = 0;
        if (DIR* dir = opendir("/proc/self/fd")) {
          while (readdir(dir) != nullptr) ++open;
          closedir(dir);
          open -= 3;  // ".", ".." and the directory's own descriptor
        }
        if (open >= soft - headroom_) {
          return absl::StrCat(open, " of the ", soft, " descriptors allowed are open, and ",
                              headroom_, " are kept free");
        }
      }
    }
  }
  return "";
}

void ConnectionAcceptor::Run() {
  std::vector<pollfd> polled;
  for (int fd : listener_->fds()) polled.push_back(pollfd{fd, POLLIN, 0});
  polled.push_back(pollfd{wake_fd_, POLLIN, 0});
  while (!stopping_.load()) {
    for (pollfd& entry : polled) entry.revents = 0;
    const int ready = poll(polled.data(), polled.size(), -1);
    if (stopping_.load()) return;
    bool back_off = ready < 0 && errno != EINTR;  // should not happen: never spin on it
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      for (;;) {
        Listener::AcceptError error = Listener::AcceptError::kNone;
        int error_number = 0;
        const int fd = listener_->Accept(polled[i].fd, &error, &error_number);
        if (fd >= 0) {
          const std::string reason = RefusalReason(fd);
          if (!reason.empty()) {
            // Counted before the close, so that a client that sees its connection closed
            // also sees it counted.
            refused_.fetch_add(1);
            close(fd);
            int64_t suppressed = 0;
            if (RefusalLog().Allow(&suppressed)) {
              COIL_LOG(WARNING) << name_ << ": refused a connection: " << reason
                                << (suppressed > 0 ? absl::StrCat("; ", suppressed,
                                                                  " more refusals not logged")
                                                   : std::string());
            }
            continue;
          }
          live_.emplace_back(fd, SocketCookie(fd));
          accepted_.fetch_add(1);
          hand_off_(fd);
          continue;
        }
        if (error == Listener::AcceptError::kRetry) continue;
        if (error == Listener::AcceptError::kEmpty) break;
        // Out of descriptors (the pending connection was refused) or another failure: try
        // again shortly, never give up on the port.
        refused_.fetch_add(1);
        int64_t suppressed = 0;
        if (RefusalLog().Allow(&suppressed)) {
          COIL_LOG(WARNING) << name_ << ": accept failed: " << std::strerror(error_number)
                            << (error == Listener::AcceptError::kOutOfDescriptors
                                    ? "; refusing connections until descriptors are freed"
                                    : "; trying again")
                            << (suppressed > 0
                                    ? absl::StrCat(" (", suppressed, " more not logged)")
                                    : std::string());
        }
        back_off = true;
        break;
      }
    }
    if (back_off) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace coil::net
