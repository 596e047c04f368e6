// The plan channel under mpirun: messages arrive whole and in order, empty and large ones
// included, and a rank waiting for a message sleeps instead of spinning a core.
#include "workers/comm/broadcast_channel.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/unit/workers/comm/mpi_test_util.h"

namespace coil::comm {
namespace {

std::string Message(int index, size_t bytes) {
  std::string message(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) message[i] = static_cast<char>('a' + (i + index) % 26);
  return message;
}

TEST(BroadcastChannelTest, DeliversMessagesWholeAndInOrder) {
  absl::StatusOr<std::unique_ptr<BroadcastChannel>> channel =
      BroadcastChannel::Create(/*root=*/0, BackoffOptions());
  ASSERT_TRUE(channel.ok()) << channel.status();
  const size_t sizes[] = {0, 1, 1000, 0, size_t{8} << 20, 7};
  for (int index = 0; index < 6; ++index) {
    const std::string expected = Message(index, sizes[index]);
    if (WorldRank() == 0) {
      EXPECT_TRUE((*channel)->Send(expected).ok());
    } else {
      absl::StatusOr<std::string> received = (*channel)->Receive();
      ASSERT_TRUE(received.ok()) << received.status();
      EXPECT_EQ(received->size(), expected.size()) << "message " << index;
      EXPECT_TRUE(*received == expected) << "message " << index;
    }
  }
}

TEST(BroadcastChannelTest, OnlyTheRootSendsAndOnlyOthersReceive) {
  const int ranks = WorldSize();
  absl::StatusOr<std::unique_ptr<BroadcastChannel>> channel =
      BroadcastChannel::Create(ranks - 1, BackoffOptions());
  ASSERT_TRUE(channel.ok()) << channel.status();
  // Refused locally, before any MPI call, so no rank is left waiting.
  if (WorldRank() == ranks - 1) {
    EXPECT_EQ((*channel)->Receive().status().code(), absl::StatusCode::kFailedPrecondition);
  } else {
    EXPECT_EQ((*channel)->Send("x").code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(BroadcastChannel::Create(ranks, BackoffOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

double CpuSeconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

TEST(BroadcastChannelTest, AnIdleRankSleepsWhileWaiting) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs a receiving rank";
  absl::StatusOr<std::unique_ptr<BroadcastChannel>> channel =
      BroadcastChannel::Create(/*root=*/0, BackoffOptions());
  ASSERT_TRUE(channel.ok()) << channel.status();
  constexpr auto kIdle = std::chrono::milliseconds(1500);
  if (WorldRank() == 0) {
    std::this_thread::sleep_for(kIdle);
    EXPECT_TRUE((*channel)->Send("plan").ok());
    return;
  }
  const double process_before = CpuSeconds(RUSAGE_SELF);
  const double thread_before = CpuSeconds(RUSAGE_THREAD);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> received = (*channel)->Receive();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double process_cpu = CpuSeconds(RUSAGE_SELF) - process_before;
  const double thread_cpu = CpuSeconds(RUSAGE_THREAD) - thread_before;
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(*received, "plan");
  std::fprintf(stderr,
               "[rank %d] idle wait %.3f s: process cpu %.4f s (%.2f%%), waiting thread %.4f s, "
               "%lld polls, %lld sleeps\n",
               WorldRank(), wall, process_cpu, 100.0 * process_cpu / wall, thread_cpu,
               static_cast<long long>((*channel)->last_wait().polls),
               static_cast<long long>((*channel)->last_wait().sleeps));
  // A busy-polling rank would use ~100% of a core here (MPI_Bcast does); the backoff's
  // 2 ms sleeps leave well under 1%. 10% leaves room for a loaded CI machine.
  EXPECT_GE(wall, 1.0);
  EXPECT_LT(process_cpu / wall, 0.10);
  // Sleeping up to 2 ms at a time, 1.5 s takes under ~1000 polls; spinning takes millions.
  EXPECT_GT((*channel)->last_wait().sleeps, 100);
  EXPECT_LT((*channel)->last_wait().polls, 5000);
}

}  // namespace
}  // namespace coil::comm
