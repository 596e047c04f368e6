// CreateCommunicator in a process that never starts MPI: the single rank needs nothing,
// the MPI and NCCL communicators fail clearly without an MpiSession (or without CUDA).
#include <memory>

#include "gtest/gtest.h"
#include "workers/comm/communicator.h"

namespace coil::comm {
namespace {

TEST(CreateCommunicatorTest, SingleRankNeedsNothing) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->name(), "single");
  EXPECT_EQ((*comm)->size(), 1);
}

TEST(CreateCommunicatorTest, MpiWithoutASessionIsAFailedPrecondition) {
  CommunicatorOptions options;
  options.kind = CommunicatorKind::kMpi;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("MpiSession"), absl::string_view::npos);
}

#if !COIL_WITH_CUDA
TEST(CreateCommunicatorTest, NcclWithoutCudaIsUnimplemented) {
  CommunicatorOptions options;
  options.kind = CommunicatorKind::kNccl;
  EXPECT_EQ(CreateCommunicator(options).status().code(), absl::StatusCode::kUnimplemented);
}
#endif

}  // namespace
}  // namespace coil::comm
