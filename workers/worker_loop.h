// How a step plan reaches every rank (docs/ARCHITECTURE.md §3). Rank 0 runs a StepDriver: it
// encodes each plan, broadcasts it, and executes it itself; every other rank runs RunWorkerLoop,
// which waits for plans without spinning a core (BroadcastChannel), executes them, and returns on
// the shutdown plan. Every rank executes the bytes that were broadcast, decoded the same way, so a
// plan that fails to decode fails on every rank alike and nobody waits forever.
#ifndef COIL_WORKERS_WORKER_LOOP_H_
#define COIL_WORKERS_WORKER_LOOP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "scheduler/plan.h"
#include "workers/comm/broadcast_channel.h"
#include "workers/comm/step_activity.h"
#include "workers/model_runner.h"

namespace coil {

// Executes a decoded plan; a plan that did not decode takes part in the step-status
// exchange as a failure of this rank.
StepResult ExecuteDecodedPlan(ModelRunner& runner, comm::Communicator& comm,
                              const absl::StatusOr<StepPlan>& plan);

class StepDriver {
 public:
  // `channel` is null for a single rank; `activity` (null: none) is told when each step
  // runs, for the rank monitor. All must outlive the driver.
  StepDriver(ModelRunner& runner, comm::Communicator& comm, comm::BroadcastChannel* channel,
             comm::StepActivity* activity = nullptr)
      : runner_(runner), comm_(comm), channel_(channel), activity_(activity) {}

  // Broadcasts and executes `plan`. A broadcast failure is returned as a failed step.
  StepResult Run(const StepPlan& plan);
  // For the offline runner: broadcasts `plan`, then gathers every row's logits.
  absl::StatusOr<std::vector<float>> RunAllLogits(const StepPlan& plan);
  // Sends the shutdown plan: the workers return from RunWorkerLoop.
  absl::Status Shutdown();

 private:
  ModelRunner& runner_;
  comm::Communicator& comm_;
  comm::BroadcastChannel* channel_;
  comm::StepActivity* activity_;
  uint64_t last_step_id_ = 0;
};

// Ranks > 0: execute every plan rank 0 broadcasts until the shutdown plan; `activity`
// (null: none) is told when each step runs.
absl::Status RunWorkerLoop(ModelRunner& runner, comm::Communicator& comm,
                           comm::BroadcastChannel& channel,
                           comm::StepActivity* activity = nullptr);

}  // namespace coil

#endif  // COIL_WORKERS_WORKER_LOOP_H_
