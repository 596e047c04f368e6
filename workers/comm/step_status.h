// The end-of-step status exchange (docs/ARCHITECTURE.md §3): every rank contributes the status of
// its step, and every rank learns which ranks failed and why, so rank 0 can fail the step's
// requests naming the rank. A step where all ranks succeed costs one all-reduce of one float; the
// causes travel (an all-gather of short fixed-size records) only on failure.
#ifndef COIL_WORKERS_COMM_STEP_STATUS_H_
#define COIL_WORKERS_COMM_STEP_STATUS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/comm/communicator.h"

namespace coil::comm {

struct RankFailure {
  int rank = 0;
  absl::Status status;  // its code, and its message cut to kMaxCauseBytes
};

// A cause longer than this is cut and ends with "...".
inline constexpr size_t kMaxCauseBytes = 240;

// Collective: every rank calls it once per step with its own status. Returns, on every
// rank, the failed ranks in rank order (empty when all succeeded). An error return means
// the exchange itself failed. `comm` must work on host memory (MPI or single-rank).
absl::StatusOr<std::vector<RankFailure>> AllReduceStepStatus(Communicator& comm,
                                                             const absl::Status& local);

// OK when `failures` is empty; otherwise the first failure's code and a message naming
// every failed rank: "rank 1 failed: bad plan; rank 3 failed: out of memory".
absl::Status CombineRankFailures(const std::vector<RankFailure>& failures);

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_STEP_STATUS_H_
