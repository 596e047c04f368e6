// The end-of-step status exchange under mpirun: every rank learns which ranks failed,
// with their codes and causes, as each rank set them here.
#include "workers/comm/step_status.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/unit/workers/comm/mpi_test_util.h"
#include "workers/comm/mpi_communicator.h"

namespace coil::comm {
namespace {

TEST(StepStatusTest, AllRanksOkMeansNoFailures) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::StatusOr<std::vector<RankFailure>> failures = AllReduceStepStatus(**comm, absl::OkStatus());
  ASSERT_TRUE(failures.ok()) << failures.status();
  EXPECT_TRUE(failures->empty());
  EXPECT_TRUE(CombineRankFailures(*failures).ok());
}

TEST(StepStatusTest, EveryRankLearnsWhichRanksFailedAndWhy) {
  const int rank = WorldRank();
  const int ranks = WorldSize();
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  // The last rank fails with a short cause; with 4 ranks, rank 1 also fails with a cause
  // too long for a record, which arrives cut to kMaxCauseBytes ending in "...".
  const int last = ranks - 1;
  const std::string long_cause(500, 'x');
  absl::Status local = absl::OkStatus();
  if (rank == last) local = absl::InvalidArgumentError("plan names slot 9 of 8");
  if (ranks == 4 && rank == 1) local = absl::ResourceExhaustedError(long_cause);

  absl::StatusOr<std::vector<RankFailure>> failures = AllReduceStepStatus(**comm, local);
  ASSERT_TRUE(failures.ok()) << failures.status();
  const std::string cut = std::string(kMaxCauseBytes - 3, 'x') + "...";
  if (ranks == 4) {
    ASSERT_EQ(failures->size(), 2u);
    EXPECT_EQ((*failures)[0].rank, 1);
    EXPECT_EQ((*failures)[0].status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ((*failures)[0].status.message(), cut);
    EXPECT_EQ((*failures)[1].rank, 3);
  } else {
    ASSERT_EQ(failures->size(), 1u);
  }
  const RankFailure& failure = failures->back();
  EXPECT_EQ(failure.rank, last);
  EXPECT_EQ(failure.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(failure.status.message(), "plan names slot 9 of 8");

  const absl::Status combined = CombineRankFailures(*failures);
  if (ranks == 4) {
    EXPECT_EQ(combined.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(combined.message(),
              "rank 1 failed: " + cut + "; rank 3 failed: plan names slot 9 of 8");
  } else {
    EXPECT_EQ(combined.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(combined.message(),
              "rank " + std::to_string(last) + " failed: plan names slot 9 of 8");
  }
}

TEST(StepStatusTest, AFailureWithNoMessageStillCounts) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create({});
  ASSERT_TRUE(comm.ok()) << comm.status();
  const absl::Status local =
      WorldRank() == 0 ? absl::Status(absl::StatusCode::kInternal, "") : absl::OkStatus();
  absl::StatusOr<std::vector<RankFailure>> failures = AllReduceStepStatus(**comm, local);
  ASSERT_TRUE(failures.ok()) << failures.status();
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].rank, 0);
  EXPECT_EQ((*failures)[0].status.code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace coil::comm
