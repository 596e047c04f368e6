// RankRuntime: how one tensor-parallel rank starts and what it then holds, the same for every
// program that runs the model (coil-serve, coil-run, model_bench): the MPI session when
// mpirun started the process, the host communicator and the plan channel, the backend, the
// communicator of the model's collectives (NCCL between GPU ranks), the checkpoint, the
// model and its runner.
//
// Start-up is collective and goes in phases (Connect, OpenDevice, LoadModel); each ends with
// an exchange of every rank's status (Agree), so a failure on any rank is every rank's: no
// rank enters a collective (NCCL's set-up, a plan broadcast) that another skipped. A program
// adds its own checks between phases and passes their status through Agree too.
#ifndef COIL_WORKERS_RANK_RUNTIME_H_
#define COIL_WORKERS_RANK_RUNTIME_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"
#include "scheduler/plan.h"
#include "workers/comm/communicator.h"
#include "workers/comm/step_activity.h"
#include "workers/model/model.h"
#include "workers/model/model_files.h"
#include "workers/model_runner.h"

namespace coil {

// What LoadModel checks a rank's weights and pools against, before it reads a weight
// (workers/memory_fit.h).
struct MemoryLimits {
  // --max-host-memory: the most host memory coil may use (0: what the host and the cgroup
  // report). Taken with the smaller of those; not used on a GPU.
  int64_t max_host_bytes = 0;
  // The flag that sizes the state rows and KV pages, named in the advice ("--memory-budget").
  std::string pool_flags;
};

class RankRuntime {
 public:
  ~RankRuntime();

  // Phase 1, collective: under mpirun (OMPI_COMM_WORLD_SIZE is set) MPI and a communicator
  // over its ranks, else one rank; with several ranks, the channel rank 0 broadcasts plans
  // on. Sets the log prefix to "rank r" when there are several. A build without MPI refuses
  // to be one of several ranks.
  static absl::StatusOr<std::unique_ptr<RankRuntime>> Connect(int* argc, char*** argv);

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  // Host memory: the step-status exchange, the sampler's merges, NCCL's bootstrap.
  comm::Communicator& comm() { return *comm_; }

  // After Connect, collective, several ranks only (one has nobody to watch): starts the
  // rank monitor (workers/comm/rank_monitor.h), which from then on watches the other ranks
  // and this rank's steps and hands the first failure it learns of to `on_failure`, once,
  // on its own thread. A build without MPI has none to start.
  absl::Status StartMonitor(std::chrono::milliseconds rank_timeout,
                            std::chrono::milliseconds step_timeout,
                            std::function<void(const absl::Status&)> on_failure);
  bool monitored() const;
  // Rank 0, after a failure: tells the other ranks to end now (waits up to `timeout` for
  // the message to leave). Ranks > 0: tells rank 0 that this rank failed. Any thread but the
  // monitor's callback; nothing without a monitor.
  void EndJob(const absl::Status& why, std::chrono::milliseconds timeout);
  void ReportFailure(const absl::Status& status, std::chrono::milliseconds timeout);
  // Any thread, after a failure: makes the model's collectives stop waiting where the
  // communicator can (NCCL's abort).
  void AbortCollectives();

  // Collective: OK on every rank when `local` is OK on every rank, else, on every rank, the
  // first failure's code with a message naming each failed rank.
  absl::Status Agree(const absl::Status& local);

  // Phase 2, collective: the backend (with --device cuda, rank r takes its node's GPU r;
  // options.threads 0 divides the allowed CPUs among the ranks), then `check` on it (e.g.
  // the state pool against the GPU's memory), then, for several GPU ranks, the NCCL
  // communicator on the backend's stream. Agreed after each step.
  absl::Status OpenDevice(BackendKind kind, BackendOptions options,
                          const std::function<absl::Status(Backend&)>& check = nullptr);
  Backend& backend() { return *backend_; }
  // What the model's collectives go through: NCCL between GPU ranks, else comm().
  comm::Communicator& model_comm() { return model_comm_ != nullptr ? *model_comm_ : *comm_; }

  // Phase 3, collective: opens the checkpoint in `model_dir` (its headers only), checks
  // that this rank's weights, `state_rows` state rows and run.kv_pages KV pages fit the
  // memory it can get (RESOURCE_EXHAUSTED with the sizes and what to do when they do not:
  // CheckMemoryFits), loads this rank's shard and makes a runner. Agreed, so every rank
  // stops with the message.
  absl::Status LoadModel(const std::string& model_dir, const model::LoadOptions& options,
                         int64_t state_rows, const RunnerOptions& run = {},
                         const MemoryLimits& limits = {});
  model::Model& model() { return *model_; }
  ModelRunner& runner() { return *runner_; }

  // ---- after start-up ----
  // Rank 0: broadcasts `plan` to the other ranks and executes it; a failed broadcast or step
  // comes back as ok = false naming the rank.
  StepResult Run(const StepPlan& plan);
  // Rank 0: broadcasts `plan` and returns the logits of every one of its rows, full padded
  // vocabulary width (for dumping logits and scoring text).
  absl::StatusOr<std::vector<float>> RunAllLogits(const StepPlan& plan);
  // Rank 0: sends the shutdown plan, which ends the other ranks' ServePlans.
  absl::Status Shutdown();
  // Ranks > 0: execute every plan rank 0 broadcasts until the shutdown plan.
  absl::Status ServePlans();

 private:
  RankRuntime();

  // The MPI session, the plan channel and rank 0's step driver: only in builds with MPI,
  // defined where they are.
  struct Mpi;
  std::unique_ptr<Mpi> mpi_;
  // What this rank's step thread is doing, for the monitor; every communicator reports to it.
  comm::StepActivity activity_;
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<comm::Communicator> model_comm_;  // NCCL between GPU ranks, else null
  model::ModelFiles files_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace coil

#endif  // COIL_WORKERS_RANK_RUNTIME_H_
