// main() for GoogleTest programs run under mpirun. Every rank runs every test (the tests
// are collective); rank 0 prints the usual report, the other ranks print only their
// failures, tagged with the rank. At the end the ranks add up their failures, so a test
// that fails on rank 3 alone still makes every rank, hence mpirun, exit non-zero.
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "gtest/gtest.h"
#include "workers/comm/mpi_session.h"

namespace {

// Prints a non-zero rank's failed assertions and tests, which its silenced default
// printer would not show.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "unknown", result.line_number(),
                 result.message());
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  auto session = coil::comm::MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "cannot start MPI: %s\n", session.status().ToString().c_str());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  const int rank = (*session)->world_rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    // Release hands the default printer back to us; the unique_ptr deletes it.
    std::unique_ptr<testing::TestEventListener> silenced(
        listeners.Release(listeners.default_result_printer()));
    listeners.Append(new RankFailurePrinter(rank));  // GoogleTest owns its listeners
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_ranks = 0;
  MPI_Allreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && failed_ranks > 0) {
    std::fprintf(stderr, "%d of %d ranks had failing tests\n", failed_ranks,
                 (*session)->world_size());
  }
  session->reset();  // MPI_Finalize before returning
  return failed_ranks > 0 ? 1 : 0;
}
