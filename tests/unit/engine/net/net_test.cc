// coil's listening sockets and accept loop, with real sockets on loopback: binding, the
// connection cap (counted until the new owner closes a connection), and a process out of
// descriptors, after which the port accepts again as soon as descriptors are free (gRPC's
// own loop never would). Expected values are counts of the connections the test makes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/net/connection_acceptor.h"
#include "engine/net/listener.h"
#include "gtest/gtest.h"

namespace coil::net {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed (or reset) `fd` within `timeout`.
bool ClosedByServer(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char byte = 0;
  const ssize_t n = read(fd, &byte, 1);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Holds what the acceptor hands off, as gRPC would.
class Owner {
 public:
  void Take(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return fds_.size();
  }
  void CloseOne() {
    std::lock_guard<std::mutex> lock(mu_);
    close(fds_.back());
    fds_.pop_back();
  }
  void CloseAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) close(fd);
    fds_.clear();
  }
  bool WaitFor(size_t n, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (count() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return count() >= n;
  }

 private:
  std::mutex mu_;
  std::vector<int> fds_;
};

TEST(ListenerTest, BindsAFreePortOnEveryAddressAndRefusesATakenOne) {
  auto listener = Listener::Bind("localhost", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_GT((*listener)->port(), 0);
  EXPECT_GE((*listener)->fds().size(), 1u);
  auto again = Listener::Bind("127.0.0.1", (*listener)->port());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
  auto bracketed = Listener::Bind("[::1]", 0);
  // Where IPv6 is off there is nothing to bind; otherwise the brackets are understood.
  if (bracketed.ok()) {
    EXPECT_GT((*bracketed)->port(), 0);
  }
  EXPECT_EQ(Listener::Bind("127.0.0.1", 70000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Listener::Bind("no-such-host.invalid", 0).status().code(),
            absl::StatusCode::kUnavailable);
}

// Five connections against a cap of three: three are handed off, two are closed at once;
// when the owner closes one, the next connection is taken.
TEST(ConnectionAcceptorTest, CapsLiveConnectionsUntilTheirOwnerClosesThem) {
  auto listener = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const int port = (*listener)->port();
  Owner owner;
  auto acceptor = ConnectionAcceptor::Start(std::move(listener).value(), 3, /*headroom=*/0, "test",
                                            [&owner](int fd) { owner.Take(fd); });
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  std::vector<int> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(Connect(port));
  ASSERT_TRUE(owner.WaitFor(3, std::chrono::seconds(5)));
  EXPECT_TRUE(ClosedByServer(clients[3], std::chrono::seconds(5)));
  EXPECT_TRUE(ClosedByServer(clients[4], std::chrono::seconds(5)));
  EXPECT_EQ(owner.count(), 3u);
  EXPECT_EQ((*acceptor)->refused(), 2);
  owner.CloseOne();
  clients.push_back(Connect(port));
  EXPECT_TRUE(owner.WaitFor(3, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ((*acceptor)->accepted(), 4);
  for (int fd : clients) close(fd);
  owner.CloseAll();
}

// Out of descriptors: the pending connections are refused (reset, not left waiting), and as
// soon as descriptors are free again a new connection is accepted.
TEST(ConnectionAcceptorTest, AcceptsAgainOnceDescriptorsAreFree) {
  auto listener = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const int port = (*listener)->port();
  // Connections made before the limit drops wait in the backlog, accepted or not.
  std::vector<int> clients;
  for (int i = 0; i < 12; ++i) clients.push_back(Connect(port));
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Room for five more descriptors: the limit bounds descriptor numbers, so it goes just
  // above the fifth free number (the acceptor's eventfd takes one).
  int free_seen = 0;
  int limit = 0;
  for (int fd = 0; fd < 65536 && free_seen < 6; ++fd) {
    if (fcntl(fd, F_GETFD) == -1) {
      ++free_seen;
      limit = fd;
    }
  }
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(limit);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  Owner owner;
  // No headroom of its own, so that accept itself runs out of descriptors.
  auto acceptor = ConnectionAcceptor::Start(std::move(listener).value(), 1000, /*headroom=*/0, "test",
                                            [&owner](int fd) { owner.Take(fd); });
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  // Some are taken, then accept runs out of descriptors and the rest are refused.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((*acceptor)->refused() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT((*acceptor)->refused(), 0);
  EXPECT_LT(owner.count(), clients.size());
  const size_t taken = owner.count();
  owner.CloseAll();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (int fd : clients) close(fd);
  clients.clear();
  const int late = Connect(port);
  ASSERT_GE(late, 0);
  EXPECT_TRUE(owner.WaitFor(1, std::chrono::seconds(5)))
      << "no connection accepted after descriptors were freed (" << taken << " taken before)";
  close(late);
  owner.CloseAll();
}

// With descriptors running low, connections are refused while `headroom` are still free,
// before accept itself could fail: the process keeps room for everything else.
TEST(ConnectionAcceptorTest, KeepsHeadroomOfFreeDescriptors) {
  auto listener = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const int port = (*listener)->port();
  std::vector<int> clients;
  for (int i = 0; i < 30; ++i) clients.push_back(Connect(port));
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Room for 24 more descriptors below the limit.
  int free_seen = 0;
  int limit = 0;
  for (int fd = 0; fd < 65536 && free_seen < 25; ++fd) {
    if (fcntl(fd, F_GETFD) == -1) {
      ++free_seen;
      limit = fd;
    }
  }
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(limit);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  Owner owner;
  constexpr int kHeadroom = 12;
  auto acceptor = ConnectionAcceptor::Start(std::move(listener).value(), 1000, kHeadroom, "test",
                                            [&owner](int fd) { owner.Take(fd); });
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((*acceptor)->accepted() + (*acceptor)->refused() < 30 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((*acceptor)->accepted() + (*acceptor)->refused(), 30);
  EXPECT_GT((*acceptor)->refused(), 0);
  // The headroom is still free: as many descriptors open as it promises, less the ones the
  // acceptor holds itself (its eventfd, and the reserve it may have used).
  std::vector<int> opened;
  for (int i = 0; i < kHeadroom - 2; ++i) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << "descriptor " << i << " of the headroom";
    if (fd >= 0) opened.push_back(fd);
  }
  for (int fd : opened) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (int fd : clients) close(fd);
  owner.CloseAll();
}

}  // namespace
}  // namespace coil::net
