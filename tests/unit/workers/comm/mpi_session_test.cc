// MpiSession under mpirun: the program's main already started MPI, so a second session
// adopts it (and must not finalize it), and reports what MPI provides.
#include "workers/comm/mpi_session.h"

#include "gtest/gtest.h"
#include "tests/unit/workers/comm/mpi_test_util.h"

namespace coil::comm {
namespace {

TEST(MpiSessionTest, ASecondSessionAdoptsMpiAndLeavesItRunning) {
  {
    absl::StatusOr<std::unique_ptr<MpiSession>> session = MpiSession::Init(nullptr, nullptr);
    ASSERT_TRUE(session.ok()) << session.status();
    EXPECT_EQ((*session)->world_rank(), WorldRank());
    EXPECT_EQ((*session)->world_size(), WorldSize());
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    EXPECT_EQ((*session)->thread_level(), provided);
    // Open MPI 4.1.4 as Debian builds it provides MPI_THREAD_MULTIPLE (docs/communication.md).
    EXPECT_TRUE((*session)->thread_multiple());
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);
}

TEST(MpiSessionTest, LocalRankIsTheRankOnThisNode) {
  // All ranks of these tests run on one machine, so the node-local rank is the world rank.
  absl::StatusOr<int> local_rank = LocalRankFromEnvironment();
  ASSERT_TRUE(local_rank.ok()) << local_rank.status();
  EXPECT_EQ(*local_rank, WorldRank());
}

TEST(MpiSessionTest, MpiErrorsBecomeStatusesNamingTheCall) {
  EXPECT_TRUE(MpiStatus(MPI_SUCCESS, "MPI_Bcast").ok());
  const absl::Status status = MpiStatus(MPI_ERR_TRUNCATE, "MPI_Ibcast");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message().substr(0, 19), "MPI_Ibcast failed: ");
  EXPECT_NE(status.message().find("truncated"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace coil::comm
