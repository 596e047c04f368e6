// The rank links without MPI: a rank connects to rank 0's listener over loopback and is
// acknowledged, a connection with the wrong token is refused, a peer that leaves writes
// the leave byte before its end, and a peer whose socket closes without it reads as closed.
#include "workers/comm/rank_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coil::comm {
namespace {

using std::chrono::milliseconds;

// Rank 0's side: accepts one connection and reads its hello until it is complete or fails.
absl::StatusOr<int> AcceptOne(const Fd& listener, uint64_t token, Fd* accepted) {
  pollfd entry{listener.get(), POLLIN, 0};
  if (poll(&entry, 1, 10000) != 1) return absl::DeadlineExceededError("nobody connected");
  PendingLink pending;
  pending.fd = Fd(accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<int> rank = ReadHello(pending, token);
    if (!rank.ok() || *rank >= 0) {
      *accepted = std::move(pending.fd);
      return rank;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return absl::DeadlineExceededError("the hello never completed");
}

// Reads `link` until it reports closed (at most ~10 s); false if it never does.
bool WaitClosed(const Fd& link, bool& left) {
  for (int i = 0; i < 1000; ++i) {
    if (!ReadLink(link, left)) return true;
    pollfd entry{link.get(), POLLIN, 0};
    poll(&entry, 1, 10);
  }
  return false;
}

TEST(RankLinkTest, ListensOnAFreePortWithLoopbackLast) {
  LinkAddress address;
  absl::StatusOr<Fd> listener = ListenForLinks(address);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_NE(address.port, 0);
  ASSERT_GT(address.count, 0);
  EXPECT_EQ(ntohl(address.addresses[address.count - 1]) >> 24, 127u);
  EXPECT_EQ(std::string(address.host), LinkHostName());
}

TEST(RankLinkTest, ARankConnectsAndItsLeaveByteComesBeforeTheEnd) {
  LinkAddress address;
  absl::StatusOr<Fd> listener = ListenForLinks(address);
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::StatusOr<Fd> link = absl::UnknownError("not run");
  std::thread rank1([&] { link = ConnectLink(address, 1, milliseconds(5000)); });
  Fd accepted;
  absl::StatusOr<int> rank = AcceptOne(*listener, address.token, &accepted);
  rank1.join();
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 1);
  ASSERT_TRUE(link.ok()) << link.status();

  bool left = false;
  EXPECT_TRUE(ReadLink(accepted, left));  // open, nothing yet
  EXPECT_FALSE(left);
  WriteLeave(*link);
  link->Close();
  ASSERT_TRUE(WaitClosed(accepted, left));
  EXPECT_TRUE(left);
}

TEST(RankLinkTest, AKilledProcesssLinkClosesAtOnce) {
  LinkAddress address;
  absl::StatusOr<Fd> listener = ListenForLinks(address);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<Fd> link = ConnectLink(address, 2, milliseconds(5000));
    if (!link.ok()) _exit(1);
    pause();  // until killed
    _exit(0);
  }
  Fd accepted;
  absl::StatusOr<int> rank = AcceptOne(*listener, address.token, &accepted);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 2);
  const auto killed = std::chrono::steady_clock::now();
  kill(child, SIGKILL);
  bool left = false;
  ASSERT_TRUE(WaitClosed(accepted, left));
  const auto noticed = std::chrono::steady_clock::now() - killed;
  EXPECT_FALSE(left);
  EXPECT_LT(noticed, milliseconds(2000));
  waitpid(child, nullptr, 0);
}

TEST(RankLinkTest, AWrongTokenIsRefused) {
  LinkAddress address;
  absl::StatusOr<Fd> listener = ListenForLinks(address);
  ASSERT_TRUE(listener.ok()) << listener.status();
  LinkAddress other = address;
  other.token ^= 1;
  absl::StatusOr<Fd> link = absl::UnknownError("not run");
  std::thread stranger([&] { link = ConnectLink(other, 1, milliseconds(1000)); });
  Fd accepted;
  absl::StatusOr<int> rank = AcceptOne(*listener, address.token, &accepted);
  accepted.Close();  // rank 0 closes what is not a rank's
  stranger.join();
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kPermissionDenied) << rank.status();
  EXPECT_FALSE(link.ok());
}

// Within Open MPI's TCP port range when mpirun sets one (a firewall lets MPI through there).
TEST(RankLinkTest, ListensWithinOpenMpisPortRange) {
  // Two ports of a range: the first taken by another listener, so the link takes the second.
  LinkAddress taken;
  setenv("OMPI_MCA_btl_tcp_port_min_v4", "0", 1);
  absl::StatusOr<Fd> first = ListenForLinks(taken);  // any free port
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string min = std::to_string(taken.port);
  setenv("OMPI_MCA_btl_tcp_port_min_v4", min.c_str(), 1);
  setenv("OMPI_MCA_btl_tcp_port_range_v4", "2", 1);
  EXPECT_EQ(LinkPortRange(), std::make_pair(int{taken.port}, taken.port + 1));
  LinkAddress address;
  absl::StatusOr<Fd> second = ListenForLinks(address);
  if (second.ok()) {
    EXPECT_EQ(address.port, taken.port + 1);
  } else {
    // The port after it was in use by something else on this machine.
    EXPECT_THAT(std::string(second.status().message()), ::testing::HasSubstr("ports "));
  }
  unsetenv("OMPI_MCA_btl_tcp_port_min_v4");
  unsetenv("OMPI_MCA_btl_tcp_port_range_v4");
  EXPECT_EQ(LinkPortRange(), std::make_pair(0, 0));
}

// A rank that gives up on a connection (its acknowledgement came too late) closes it
// without confirming: rank 0 drops it instead of adopting a link that is already closed,
// which it would take for the rank's death.
TEST(RankLinkTest, AConnectionGivenUpBeforeItsConfirmationIsNotALink) {
  LinkAddress address;
  absl::StatusOr<Fd> listener = ListenForLinks(address);
  ASSERT_TRUE(listener.ok()) << listener.status();
  Fd raw(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(address.port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(raw.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
  char hello[12] = {};
  const int32_t rank = 3;
  std::memcpy(hello, &address.token, sizeof(address.token));
  std::memcpy(hello + sizeof(address.token), &rank, sizeof(rank));
  ASSERT_EQ(send(raw.get(), hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
  raw.Close();  // gives up: no confirmation
  Fd accepted;
  absl::StatusOr<int> got = AcceptOne(*listener, address.token, &accepted);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
}

TEST(RankLinkTest, NoListenerIsAClearError) {
  LinkAddress address;  // port 0
  absl::StatusOr<Fd> link = ConnectLink(address, 1, milliseconds(100));
  EXPECT_EQ(link.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace coil::comm
