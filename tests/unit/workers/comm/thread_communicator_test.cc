// The thread group's collectives against values worked out by hand: sums in rank order
// (chosen so that the reverse order gives other bits), in-place and separate all-gathers,
// broadcasts from every root, and many rounds back to back (a missing barrier between
// rounds shows as a rank reading a buffer another rank is already rewriting).
#include "workers/comm/thread_communicator.h"

#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace coil::comm {
namespace {

// Runs body(rank, communicator) on one thread per rank of a new group of `size`.
void OnRanks(int size, const std::function<void(int, Communicator&)>& body) {
  auto group = MakeThreadGroup(size);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { body(r, *(*group)[static_cast<size_t>(r)]); });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ThreadCommunicatorTest, SumsInRankOrderWithTheSameBitsOnEveryRank) {
  // Rank order: (1 + 1e8) + -1e8 = 1e8 + -1e8 = 0 in float (1 is below 1e8's spacing of
  // 8); the reverse order, (-1e8 + 1e8) + 1, would be 1.
  const float values[3] = {1.0f, 1e8f, -1e8f};
  std::vector<std::vector<float>> got(3);
  OnRanks(3, [&](int rank, Communicator& comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.size(), 3);
    EXPECT_EQ(comm.memory_space(), MemorySpace::kHost);
    std::vector<float> data = {values[rank], 2.0f * static_cast<float>(rank + 1)};
    EXPECT_TRUE(comm.AllReduceSum(data.data(), data.size()).ok());
    got[static_cast<size_t>(rank)] = data;
  });
  for (const std::vector<float>& data : got) {
    ASSERT_EQ(data.size(), 2u);
    EXPECT_EQ(data[0], 0.0f);
    EXPECT_EQ(data[1], 12.0f);  // 2 + 4 + 6
  }
}

TEST(ThreadCommunicatorTest, GathersInPlaceAndIntoSeparateBuffers) {
  std::vector<std::vector<float>> in_place(4), separate(4);
  OnRanks(4, [&](int rank, Communicator& comm) {
    std::vector<float> all(8, -1.0f);
    all[2 * rank] = 10.0f * rank;
    all[2 * rank + 1] = 10.0f * rank + 1;
    EXPECT_TRUE(comm.AllGather(all.data() + 2 * rank, 2, all.data()).ok());
    in_place[static_cast<size_t>(rank)] = all;
    const float mine[2] = {-static_cast<float>(rank), 0.5f};
    std::vector<float> out(8, 99.0f);
    EXPECT_TRUE(comm.AllGather(mine, 2, out.data()).ok());
    separate[static_cast<size_t>(rank)] = out;
  });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(in_place[rank], (std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31}));
    EXPECT_EQ(separate[rank], (std::vector<float>{0, 0.5f, -1, 0.5f, -2, 0.5f, -3, 0.5f}));
  }
}

TEST(ThreadCommunicatorTest, BroadcastsFromEveryRoot) {
  OnRanks(3, [&](int rank, Communicator& comm) {
    for (int root = 0; root < 3; ++root) {
      char text[8] = {};
      if (rank == root) std::memcpy(text, "root0", 6), text[4] = static_cast<char>('0' + root);
      EXPECT_TRUE(comm.Broadcast(text, sizeof(text), root).ok());
      EXPECT_EQ(text[4], '0' + root) << "rank " << rank;
      EXPECT_TRUE(comm.Barrier().ok());
    }
    EXPECT_FALSE(comm.Broadcast(nullptr, 0, 3).ok());  // root out of range: refused before waiting
  });
}

TEST(ThreadCommunicatorTest, ManyRoundsBackToBackNeverMixThem) {
  constexpr int kRounds = 500;
  std::vector<int> wrong(2, 0);
  OnRanks(2, [&](int rank, Communicator& comm) {
    for (int round = 0; round < kRounds; ++round) {
      std::vector<float> data(64, static_cast<float>(round * 2 + rank));
      EXPECT_TRUE(comm.AllReduceSum(data.data(), data.size()).ok());
      for (float v : data) wrong[static_cast<size_t>(rank)] += v != static_cast<float>(round * 4 + 1);
    }
  });
  EXPECT_EQ(wrong[0], 0);
  EXPECT_EQ(wrong[1], 0);
}

TEST(ThreadCommunicatorTest, RefusesAnEmptyGroup) {
  const auto group = MakeThreadGroup(0);
  EXPECT_TRUE(absl::IsInvalidArgument(group.status()));
}

}  // namespace
}  // namespace coil::comm
