// The single-rank communicator and the argument checks every communicator shares, with no
// MPI in the build (create_communicator_test.cc checks the factory, which MPI builds have).
#include "workers/comm/communicator.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "workers/comm/single_rank_communicator.h"

namespace coil::comm {
namespace {

TEST(SingleRankCommunicatorTest, CollectivesAreTheIdentity) {
  SingleRankCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.memory_space(), MemorySpace::kHost);

  // The sum over one rank is the value itself, bit for bit (including -0 and NaN bits).
  std::vector<float> data = {1.5f, -0.0f, 3.0e-39f, 7.0f};
  std::vector<float> before = data;
  ASSERT_TRUE(comm.AllReduceSum(data.data(), data.size()).ok());
  EXPECT_EQ(std::memcmp(data.data(), before.data(), data.size() * sizeof(float)), 0);

  std::vector<float> gathered(4, 0.0f);
  ASSERT_TRUE(comm.AllGather(data.data(), data.size(), gathered.data()).ok());
  EXPECT_EQ(std::memcmp(gathered.data(), before.data(), data.size() * sizeof(float)), 0);
  // In place: send is recv + rank × count = recv.
  ASSERT_TRUE(comm.AllGather(gathered.data(), gathered.size(), gathered.data()).ok());
  EXPECT_EQ(gathered[0], 1.5f);

  char bytes[3] = {'a', 'b', 'c'};
  ASSERT_TRUE(comm.Broadcast(bytes, sizeof(bytes), 0).ok());
  EXPECT_EQ(bytes[2], 'c');
  EXPECT_TRUE(comm.Barrier().ok());
}

TEST(CommunicatorTest, RejectsBadArgumentsBeforeCommunicating) {
  SingleRankCommunicator comm;
  const absl::Status null_buffer = comm.AllReduceSum(nullptr, 3);
  EXPECT_EQ(null_buffer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(null_buffer.message().find("count is 3"), absl::string_view::npos);
  // A null buffer with nothing to move is fine.
  EXPECT_TRUE(comm.AllReduceSum(nullptr, 0).ok());
  EXPECT_TRUE(comm.Broadcast(nullptr, 0, 0).ok());

  char byte = 0;
  const absl::Status bad_root = comm.Broadcast(&byte, 1, 1);
  EXPECT_EQ(bad_root.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_root.message(),
            "broadcast root 1 is out of range for 1 ranks; use a rank in [0, 1)");
  EXPECT_EQ(comm.Broadcast(&byte, 1, -1).code(), absl::StatusCode::kInvalidArgument);

  // Send starting inside recv but not at recv + rank × count overlaps.
  std::vector<float> buffer(8, 0.0f);
  EXPECT_EQ(comm.AllGather(buffer.data() + 1, 4, buffer.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.AllGather(buffer.data(), 4, buffer.data() + 2).code(),
            absl::StatusCode::kInvalidArgument);
  // Adjacent, not overlapping.
  EXPECT_TRUE(comm.AllGather(buffer.data(), 4, buffer.data() + 4).ok());
}

TEST(CommunicatorKindTest, ParsesEveryNameItPrints) {
  for (CommunicatorKind kind :
       {CommunicatorKind::kSingleRank, CommunicatorKind::kMpi, CommunicatorKind::kNccl}) {
    const absl::StatusOr<CommunicatorKind> parsed =
        ParseCommunicatorKind(CommunicatorKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  const absl::StatusOr<CommunicatorKind> bad = ParseCommunicatorKind("gloo");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "unknown communicator \"gloo\"; use single, mpi or nccl");
}

}  // namespace
}  // namespace coil::comm
