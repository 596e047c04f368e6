// StepContext: one rank's forward step while it is being enqueued. Every op of the step goes
// through Run(), which skips it once an op has failed on this rank and keeps the first
// failure, named by the part of the model it happened in; every collective goes through
// AllReduce(), which joins the ranks' collective whatever happened locally. So every rank
// makes the same collective calls in the same order with no error checks in between, and a
// local error (a bad plan, a kernel error) is reported after the step, in the runner's
// step-status exchange, without leaving another rank waiting in an all-reduce. A failed
// collective means the job is broken: from then on nothing runs, and it is the step's error.
// A warm-up run (before a graph capture) makes no collective calls at all.
#ifndef COIL_WORKERS_MODEL_STEP_CONTEXT_H_
#define COIL_WORKERS_MODEL_STEP_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "workers/comm/communicator.h"

namespace coil::model {

// Sums over the ranks of a model's communicator, staging through host memory where the
// communicator cannot read the backend's memory (MPI with a GPU backend), and the time
// spent in them.
class RankCollectives {
 public:
  RankCollectives(Backend& backend, comm::Communicator& comm) : backend_(backend), comm_(comm) {}

  comm::Communicator& comm() const { return comm_; }
  int size() const { return comm_.size(); }
  // Whether the communicator takes the backend's memory directly.
  bool ReadsBackendMemory() const;
  // Sums `count` floats of backend memory over the ranks. Returns a failed collective; a
  // failed staging copy still joins the collective (with whatever the buffer holds), so the
  // ranks stay in step, and its error is stored in *local when that is still OK.
  absl::Status AllReduce(float* data, size_t count, absl::Status* local);
  // Seconds spent in AllReduce since construction (a benchmark's communication share).
  double seconds() const { return seconds_; }

 private:
  Backend& backend_;
  comm::Communicator& comm_;
  std::vector<float> host_stage_;
  double seconds_ = 0.0;
};

// What an error message names for a failed op: a layer by index, or one of these.
inline constexpr int64_t kInputLayer = -1;   // the token ids and the embedding
inline constexpr int64_t kOutputLayer = -2;  // the final norm and the lm_head
inline constexpr int64_t kNoLayer = -3;      // before the forward pass: nothing is named

class StepContext {
 public:
  // `collectives` false: a warm-up run that skips every collective call.
  StepContext(Backend& backend, RankCollectives& ranks, bool collectives)
      : backend_(backend), ranks_(ranks), collectives_(collectives) {}

  Backend& backend() const { return backend_; }
  // The part of the model the following ops belong to, for error messages.
  void set_layer(int64_t layer) { layer_ = layer; }

  // Runs `op` (a callable returning absl::Status) unless the step has failed already.
  template <typename Op>
  void Run(Op&& op) {
    if (!ok()) return;
    const absl::Status status = op();
    if (!status.ok()) Fail(status);
  }
  // Records a local failure (the first one counts), naming the current layer.
  void Fail(const absl::Status& status);

  // Sums `count` floats of backend memory over the ranks (in place), after a local failure
  // too; skipped only in a warm-up run or once a collective has failed.
  void AllReduce(float* data, size_t count);

  bool ok() const { return local_.ok() && collective_.ok(); }
  // The failed collective if any, else the first local failure, else OK.
  absl::Status status() const { return collective_.ok() ? local_ : collective_; }

 private:
  Backend& backend_;
  RankCollectives& ranks_;
  bool collectives_;
  int64_t layer_ = kNoLayer;
  absl::Status local_;
  absl::Status collective_;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_STEP_CONTEXT_H_
