#include "engine/metrics/exporter.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace coil::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// One connection: reading its request head, then writing the answer.
struct Client {
  int fd = -1;
  Clock::time_point deadline;  // to finish reading, then to finish writing
  std::string in;
  std::string out;
  size_t written = 0;
  bool writing = false;
};

std::string Answer(int status, absl::string_view reason, absl::string_view content_type,
                   absl::string_view body, bool head_only) {
  std::string answer = absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ",
                                    content_type, "\r\nContent-Length: ", body.size(),
                                    "\r\nConnection: close\r\n\r\n");
  if (!head_only) answer.append(body.data(), body.size());
  return answer;
}

// The answer to a complete request head.
std::string Respond(const Registry& registry, absl::string_view head) {
  const size_t line_end = head.find("\r\n");
  const absl::string_view line = head.substr(0, line_end);
  const size_t first_space = line.find(' ');
  const size_t second_space =
      first_space == absl::string_view::npos ? first_space : line.find(' ', first_space + 1);
  if (second_space == absl::string_view::npos) {
    return Answer(400, "Bad Request", "text/plain", "malformed request line\n", false);
  }
  const absl::string_view method = line.substr(0, first_space);
  absl::string_view target = line.substr(first_space + 1, second_space - first_space - 1);
  target = target.substr(0, target.find('?'));  // Prometheus may add parameters
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return Answer(405, "Method Not Allowed", "text/plain", "only GET /metrics\n", false);
  }
  if (target != "/metrics") {
    return Answer(404, "Not Found", "text/plain", "not found; the metrics are at /metrics\n",
                  head_only);
  }
  return Answer(200, "OK", kExpositionContentType, registry.Render(), head_only);
}

}  // namespace

MetricsExporter::MetricsExporter(Key, const Registry& registry,
                                 std::unique_ptr<net::Listener> listener, int wake_fd)
    : registry_(registry), listener_(std::move(listener)), wake_fd_(wake_fd) {}

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const Registry& registry,
                                                                        const std::string& host,
                                                                        int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is out of range; use 0 (any free port) to 65535"));
  }
  absl::StatusOr<std::unique_ptr<net::Listener>> listener = net::Listener::Bind(host, port, 128);
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot bind the metrics endpoint to ", host, ":",
                                               port, " (", listener.status().message(),
                                               "); choose a free port with --metrics-port"));
  }
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  auto exporter =
      std::make_unique<MetricsExporter>(Key(), registry, std::move(listener).value(), wake);
  MetricsExporter* raw = exporter.get();
  exporter->thread_ = std::thread([raw] { raw->Run(); });
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  stopping_.store(true);
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // Cannot fail for an eventfd far from overflow; the thread checks stopping_ too.
  }
  if (thread_.joinable()) thread_.join();
  close(wake_fd_);
}

void MetricsExporter::Run() {
  std::list<Client> clients;  // oldest first
  std::vector<pollfd> polled;
  std::vector<Client*> polled_clients;
  bool back_off = false;
  while (!stopping_.load()) {
    const Clock::time_point now = Clock::now();
    // Connections past their deadline are closed: a silent one cannot hold its slot.
    for (auto it = clients.begin(); it != clients.end();) {
      if (now >= it->deadline) {
        close(it->fd);
        it = clients.erase(it);
      } else {
        ++it;
      }
    }
    polled.clear();
    polled_clients.clear();
    for (int fd : listener_->fds()) polled.push_back(pollfd{fd, POLLIN, 0});
    polled.push_back(pollfd{wake_fd_, POLLIN, 0});
    const size_t first_client = polled.size();
    Clock::time_point next_deadline = Clock::time_point::max();
    for (Client& client : clients) {
      polled.push_back(pollfd{client.fd, static_cast<short>(client.writing ? POLLOUT : POLLIN), 0});
      polled_clients.push_back(&client);
      next_deadline = std::min(next_deadline, client.deadline);
    }
    int timeout_ms = -1;
    if (back_off) {
      timeout_ms = 100;
    } else if (next_deadline != Clock::time_point::max()) {
      timeout_ms = static_cast<int>(std::max<int64_t>(
          1, std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - now).count() + 1));
    }
    back_off = false;
    const int ready = poll(polled.data(), polled.size(), timeout_ms);
    if (stopping_.load()) break;
    if (ready <= 0) continue;

    for (size_t i = first_client; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      Client& client = *polled_clients[i - first_client];
      if (!client.writing) {
        char buffer[4096];
        const ssize_t n = recv(client.fd, buffer, sizeof(buffer), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          client.deadline = Clock::time_point::min();  // gone: closed on the next pass
          continue;
        }
        if (n < 0) continue;
        client.in.append(buffer, static_cast<size_t>(n));
        const size_t end = client.in.find("\r\n\r\n");
        if (end == std::string::npos && client.in.size() > kMaxRequestBytes) {
          client.out = Answer(431, "Request Header Fields Too Large", "text/plain",
                              "request head over 8 KiB\n", false);
        } else if (end != std::string::npos) {
          client.out = Respond(registry_, absl::string_view(client.in).substr(0, end));
        } else {
          continue;
        }
        client.writing = true;
        client.deadline = Clock::now() + kWriteTimeout;
      }
      // Writing (now or from an earlier pass).
      while (client.written < client.out.size()) {
        const ssize_t n = send(client.fd, client.out.data() + client.written,
                               client.out.size() - client.written, MSG_NOSIGNAL);
        if (n > 0) {
          client.written += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        client.written = client.out.size();  // the peer is gone
        client.out.clear();
      }
      if (client.written >= client.out.size()) {
        shutdown(client.fd, SHUT_WR);
        client.deadline = Clock::time_point::min();  // done: closed on the next pass
      }
    }

    for (size_t i = 0; i + 1 < first_client; ++i) {
      if (polled[i].revents == 0) continue;
      for (;;) {
        net::Listener::AcceptError error = net::Listener::AcceptError::kNone;
        const int fd = listener_->Accept(polled[i].fd, &error);
        if (fd < 0) {
          if (error == net::Listener::AcceptError::kRetry) continue;
          if (error != net::Listener::AcceptError::kEmpty) back_off = true;
          break;
        }
        if (static_cast<int>(clients.size()) >= kMaxClients) {
          // Full: the oldest connection still waiting for its request makes room (a scraper
          // answers within milliseconds; an idle one has no claim on its slot).
          auto idle = std::find_if(clients.begin(), clients.end(),
                                   [](const Client& client) { return !client.writing; });
          if (idle == clients.end()) {
            close(fd);
            continue;
          }
          close(idle->fd);
          clients.erase(idle);
        }
        Client client;
        client.fd = fd;
        client.deadline = Clock::now() + kReadTimeout;
        clients.push_back(std::move(client));
      }
    }
  }
  for (Client& client : clients) close(client.fd);
}

}  // namespace coil::metrics
