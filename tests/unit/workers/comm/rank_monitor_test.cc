// The rank monitor under mpirun (2 and 4 ranks), where no rank dies: what must not count
// as a failure (a step far longer than the rank timeout, ranks waiting in a collective for
// it, ranks leaving at the end) and what must, with the rank it names (a rank reporting its
// own failure, rank 0 ending the job, a rank computing one step past the step timeout).
// Killed and stopped ranks are tested through coil-serve (tests/integration).
#include "workers/comm/rank_monitor.h"

#include <mpi.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workers/comm/mpi_test_util.h"

namespace coil::comm {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Sanitizer builds run several times slower, and so may a loaded machine's MPI progress.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kScale = 10;
#else
constexpr int kScale = 1;
#endif
// Short enough to keep the test short, long enough that a busy 2-core machine running
// four ranks (each spinning in a blocking collective) still delivers every heartbeat.
constexpr std::chrono::milliseconds kRankTimeout{1000 * kScale};

// What one rank's callback received.
class Reports {
 public:
  RankMonitor::FailureCallback Callback() {
    return [this](const absl::Status& status) {
      std::lock_guard<std::mutex> lock(mu_);
      statuses_.push_back(status);
    };
  }
  std::vector<absl::Status> Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
  }
  // Waits up to `timeout` for a first report.
  bool WaitForOne(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!Get().empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return !Get().empty();
  }

 private:
  std::mutex mu_;
  std::vector<absl::Status> statuses_;
};

std::unique_ptr<RankMonitor> StartMonitor(std::chrono::milliseconds rank_timeout,
                                          std::chrono::milliseconds step_timeout,
                                          const StepActivity* activity, Reports& reports) {
  RankMonitorOptions options;
  options.rank_timeout = rank_timeout;
  options.step_timeout = step_timeout;
  auto monitor = RankMonitor::Start(options, activity, reports.Callback());
  EXPECT_TRUE(monitor.ok()) << monitor.status();
  return monitor.ok() ? std::move(monitor).value() : nullptr;
}

// One rank computes a step three times longer than the rank timeout while every other rank
// waits for it in a blocking collective: nobody's silence is judged, since the heartbeats
// come from the monitors' own threads.
TEST(RankMonitorTest, ASlowStepIsNotASilentRank) {
  Reports reports;
  StepActivity activity;
  auto monitor = StartMonitor(kRankTimeout, std::chrono::seconds(60 * kScale), &activity, reports);
  ASSERT_NE(monitor, nullptr);
  const int slow = WorldSize() - 1;
  activity.BeginStep(1);
  if (WorldRank() == slow) std::this_thread::sleep_for(3 * kRankTimeout);
  activity.EnterCollective();
  MPI_Barrier(MPI_COMM_WORLD);
  activity.LeaveCollective();
  activity.EndStep();
  // Idle for a while, too.
  std::this_thread::sleep_for(kRankTimeout + std::chrono::milliseconds(200));
  MPI_Barrier(MPI_COMM_WORLD);
  monitor->Leave();
  MPI_Barrier(MPI_COMM_WORLD);
  // After everyone left, the silence is not a failure either.
  std::this_thread::sleep_for(kRankTimeout / 2);
  EXPECT_THAT(reports.Get(), IsEmpty());
}

// A rank's own failure reaches rank 0 at once, naming it; rank 0's EndJob reaches the rest.
TEST(RankMonitorTest, ReportedFailureNamesTheRankAndEndJobReachesEveryRank) {
  Reports reports;
  auto monitor = StartMonitor(std::chrono::seconds(30), std::chrono::seconds(30), nullptr, reports);
  ASSERT_NE(monitor, nullptr);
  const int failing = WorldSize() - 1;
  if (WorldRank() == failing) {
    monitor->ReportFailure(absl::InternalError("the plan did not decode"), std::chrono::seconds(1));
  }
  if (WorldRank() == 0) {
    ASSERT_TRUE(reports.WaitForOne(std::chrono::seconds(5)));
    const absl::Status got = reports.Get().front();
    EXPECT_EQ(got.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(got.message(), absl::StrCat("rank ", failing, " failed: the plan did not decode"));
    monitor->EndJob(absl::UnavailableError("restarting"), std::chrono::seconds(1));
  } else {
    ASSERT_TRUE(reports.WaitForOne(std::chrono::seconds(5)));
    EXPECT_EQ(reports.Get().front().message(), "rank 0 ended the job: restarting");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(reports.Get().size(), 1u);  // once
}

// A rank that computes one step past the step timeout, outside any collective, says so,
// and rank 0 names it; the ranks waiting for it in a collective are not blamed.
TEST(RankMonitorTest, StepTimeoutNamesTheRankStuckComputing) {
  Reports reports;
  StepActivity activity;
  auto monitor = StartMonitor(std::chrono::seconds(30), std::chrono::milliseconds(400), &activity,
                              reports);
  ASSERT_NE(monitor, nullptr);
  const int hung = WorldSize() - 1;
  activity.BeginStep(7);
  if (WorldRank() == hung) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  activity.EnterCollective();
  MPI_Barrier(MPI_COMM_WORLD);
  activity.LeaveCollective();
  activity.EndStep();
  if (WorldRank() == 0) {
    ASSERT_TRUE(reports.WaitForOne(std::chrono::seconds(5)));
    const std::string message(reports.Get().front().message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("rank ", hung, " failed: step 7 has run for")));
    EXPECT_THAT(message, HasSubstr(absl::StrCat("on rank ", hung, " outside any collective")));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (WorldRank() != 0) {
    EXPECT_THAT(reports.Get(), IsEmpty());
  }
  EXPECT_LE(reports.Get().size(), 1u);
}

}  // namespace
}  // namespace coil::comm
