// MpiCommunicator under mpirun (1, 2 and 4 ranks): sums against values worked out here,
// bit-identical results on every rank, all-gather, broadcast of large and empty payloads,
// barrier. Every collective runs on all ranks before any assertion can return early.
#include "workers/comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/workers/comm/mpi_test_util.h"

namespace coil::comm {
namespace {

// Rank r's input at element i: a float of varied sign and magnitude (2^-20 .. 2^20), so
// that the summation order changes the rounded result; every 7th element is the classic
// cancellation 1e8, 1, -1e8, 1, ... where ((x0 + x1) + x2) + x3 = 1 but
// (x0 + x2) + (x1 + x3) = 2.
float Input(int rank, size_t i) {
  if (i % 7 == 0) {
    static constexpr float kCancel[4] = {1.0e8f, 1.0f, -1.0e8f, 1.0f};
    return kCancel[rank % 4];
  }
  uint64_t z = static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
  z ^= z >> 29;
  const float mantissa = 1.0f + static_cast<float>(z & 0xFFFFF) / 1048576.0f;
  const int exponent = static_cast<int>((z >> 20) % 41) - 20;
  const float sign = (z >> 40) & 1 ? -1.0f : 1.0f;
  return sign * std::ldexp(mantissa, exponent);
}

// The documented result, worked out here for every rank: left to right in rank order.
float RankOrderSum(size_t i, int ranks) {
  float sum = Input(0, i);
  for (int r = 1; r < ranks; ++r) sum += Input(r, i);
  return sum;
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> Make(AllReduceAlgorithm algorithm) {
  MpiCommunicator::Options options;
  options.all_reduce = algorithm;
  return MpiCommunicator::Create(options);
}

class AllReduceTest : public testing::TestWithParam<AllReduceAlgorithm> {};

TEST_P(AllReduceTest, IsTheRankOrderSumBitForBitOnEveryRank) {
  const int rank = WorldRank();
  const int ranks = WorldSize();
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = Make(GetParam());
  if (GetParam() == AllReduceAlgorithm::kNative && ranks > 2) {
    // Its order is not fixed beyond 2 ranks, so it is refused there.
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), rank);
  EXPECT_EQ((*comm)->size(), ranks);

  // Counts around the kAuto switch (16384), segments empty (count 1 < ranks) or uneven.
  for (size_t count :
       {size_t{1}, size_t{3}, size_t{1000}, size_t{16384}, size_t{16385}, size_t{65537}}) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = Input(rank, i);
    const absl::Status status = (*comm)->AllReduceSum(data.data(), count);
    EXPECT_TRUE(status.ok()) << status;
    size_t mismatches = 0;
    for (size_t i = 0; i < count; ++i) {
      const float expected = RankOrderSum(i, ranks);
      if (std::memcmp(&data[i], &expected, sizeof(float)) != 0 && ++mismatches <= 3) {
        ADD_FAILURE() << "count " << count << " element " << i << ": " << data[i]
                      << ", rank-order sum " << expected;
      }
    }
    EXPECT_EQ(mismatches, 0u) << "count " << count;
    EXPECT_TRUE(SameBytesOnEveryRank(data.data(), static_cast<int>(count * sizeof(float))))
        << "count " << count;
  }
}

TEST_P(AllReduceTest, AddsIntegerValuedInputsExactly) {
  const int rank = WorldRank();
  const int ranks = WorldSize();
  if (GetParam() == AllReduceAlgorithm::kNative && ranks > 2)
    GTEST_SKIP() << "refused above 2 ranks";
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = Make(GetParam());
  ASSERT_TRUE(comm.ok()) << comm.status();
  // Rank r holds (r + 1) × (i % 1000 + 1); the sum is (i % 1000 + 1) × n(n + 1)/2, exact
  // in fp32 whatever the order.
  constexpr size_t kCount = 10007;
  std::vector<float> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>((rank + 1) * (i % 1000 + 1));
  ASSERT_TRUE((*comm)->AllReduceSum(data.data(), kCount).ok());
  const size_t triangle = static_cast<size_t>(ranks) * (ranks + 1) / 2;
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(data[i], static_cast<float>((i % 1000 + 1) * triangle)) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllReduceTest,
                         testing::Values(AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kNative,
                                         AllReduceAlgorithm::kGatherSum,
                                         AllReduceAlgorithm::kScatterSum),
                         [](const testing::TestParamInfo<AllReduceAlgorithm>& info) {
                           switch (info.param) {
                             case AllReduceAlgorithm::kAuto:
                               return "Auto";
                             case AllReduceAlgorithm::kNative:
                               return "Native";
                             case AllReduceAlgorithm::kGatherSum:
                               return "GatherSum";
                             case AllReduceAlgorithm::kScatterSum:
                               return "ScatterSum";
                           }
                           return "Unknown";
                         });

TEST(AllReduceInputTest, TheCancellationElementDependsOnTheOrder) {
  // Guards the test above: with 4 ranks a pairwise (tree) order gives another value.
  const float tree = (Input(0, 0) + Input(2, 0)) + (Input(1, 0) + Input(3, 0));
  EXPECT_EQ(RankOrderSum(0, 4), 1.0f);
  EXPECT_EQ(tree, 2.0f);
}

TEST(MpiCommunicatorTest, AllGatherPlacesEachRankInOrder) {
  const int rank = WorldRank();
  const int ranks = WorldSize();
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();

  constexpr size_t kCount = 5;
  std::vector<float> send(kCount);
  for (size_t i = 0; i < kCount; ++i) send[i] = static_cast<float>(rank * 10 + i);
  std::vector<float> recv(ranks * kCount, -1.0f);
  EXPECT_TRUE((*comm)->AllGather(send.data(), kCount, recv.data()).ok());
  // In place: each rank's part already sits at recv + rank × count.
  std::vector<float> in_place(ranks * kCount, -1.0f);
  std::copy(send.begin(), send.end(), in_place.begin() + rank * kCount);
  EXPECT_TRUE((*comm)->AllGather(in_place.data() + rank * kCount, kCount, in_place.data()).ok());
  // Bytes: rank r sends "r" three times; nothing at all is fine too.
  const char mine[3] = {static_cast<char>('a' + rank), static_cast<char>('a' + rank),
                        static_cast<char>('a' + rank)};
  std::vector<char> bytes(ranks * 3, '?');
  EXPECT_TRUE((*comm)->AllGatherBytes(mine, 3, bytes.data()).ok());
  EXPECT_TRUE((*comm)->AllGatherBytes(nullptr, 0, nullptr).ok());

  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(recv[r * kCount + i], static_cast<float>(r * 10 + i));
      EXPECT_EQ(in_place[r * kCount + i], static_cast<float>(r * 10 + i));
    }
    for (int j = 0; j < 3; ++j) EXPECT_EQ(bytes[r * 3 + j], 'a' + r);
  }
}

TEST(MpiCommunicatorTest, BroadcastsLargeAndEmptyPayloadsFromEveryRoot) {
  const int rank = WorldRank();
  const int ranks = WorldSize();
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  constexpr size_t kBytes = (size_t{32} << 20) + 3;  // 32 MiB and a ragged tail
  std::vector<unsigned char> data(kBytes);
  for (int root = 0; root < ranks; ++root) {
    const auto pattern = [root](size_t i) {
      return static_cast<unsigned char>((i * 31 + root * 7 + (i >> 20)) & 0xFF);
    };
    for (size_t i = 0; i < kBytes; ++i) data[i] = rank == root ? pattern(i) : 0;
    EXPECT_TRUE((*comm)->Broadcast(data.data(), kBytes, root).ok());
    size_t wrong = 0;
    for (size_t i = 0; i < kBytes; ++i) wrong += data[i] != pattern(i);
    EXPECT_EQ(wrong, 0u) << "root " << root;
    EXPECT_TRUE((*comm)->Broadcast(nullptr, 0, root).ok());
  }
  // A bad root is refused on every rank before anything is sent, so nobody waits.
  const absl::Status bad = (*comm)->Broadcast(data.data(), 1, ranks);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
}

TEST(MpiCommunicatorTest, BarrierWaitsForTheLastRank) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  // Rank 0 arrives 200 ms late. steady_clock is CLOCK_MONOTONIC, one clock for every
  // process of the machine, so each rank can check it left after rank 0 arrived.
  int64_t arrived_ns = 0;
  if (WorldRank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    arrived_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  }
  EXPECT_TRUE((*comm)->Barrier().ok());
  const int64_t left_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  MPI_Bcast(&arrived_ns, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  EXPECT_GE(left_ns, arrived_ns);
}

TEST(MpiCommunicatorTest, MpiErrorsReturnInsteadOfAbortingTheJob) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  // A negative count is rejected by every rank before anything is sent; with the default
  // MPI_ERRORS_ARE_FATAL this would end the job.
  char byte = 0;
  const absl::Status status =
      MpiStatus(MPI_Bcast(&byte, -1, MPI_BYTE, 0, (*comm)->comm()), "MPI_Bcast");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("MPI_Bcast failed"), absl::string_view::npos) << status;
}

TEST(MpiCommunicatorTest, FactoryGivesTheWorld) {
  CommunicatorOptions options;
  options.kind = CommunicatorKind::kMpi;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->name(), "mpi");
  EXPECT_EQ((*comm)->rank(), WorldRank());
  EXPECT_EQ((*comm)->size(), WorldSize());
  EXPECT_EQ((*comm)->memory_space(), MemorySpace::kHost);
}

}  // namespace
}  // namespace coil::comm
