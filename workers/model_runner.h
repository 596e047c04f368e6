// ModelRunner: executes one StepPlan on this rank (docs/ARCHITECTURE.md §1, §3): builds the step
// metadata once, runs the model's forward pass over its shard, exchanges every rank's step
// status, and samples the next token of each sampled sequence. Every rank runs every plan
// and returns the same StepResult; rank 0's goes back to the scheduler.
#ifndef COIL_WORKERS_MODEL_RUNNER_H_
#define COIL_WORKERS_MODEL_RUNNER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/state_pool.h"
#include "scheduler/plan.h"
#include "workers/comm/communicator.h"
#include "workers/model/mamba2_model.h"
#include "workers/sampler.h"

namespace coil {

class ModelRunner {
 public:
  // Allocates the state pool for `state_rows` sequences (plus the scratch row). `model`,
  // `backend` and `comm` must outlive the runner.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(model::Mamba2Model& model,
                                                             Backend& backend,
                                                             comm::Communicator& comm,
                                                             int64_t state_rows);

  // Collective. A failure on any rank comes back as ok = false with the failed rank and
  // its cause; the plan's requests are then failed, and nothing else is affected.
  StepResult Execute(const StepPlan& plan);

  // Collective. Runs `plan` and returns the logits of every one of its rows, full padded
  // vocabulary width ([rows, padded_vocab], gathered from the ranks' shards): for dumping
  // logits and scoring text. Samples nothing.
  absl::StatusOr<std::vector<float>> ExecuteAllLogits(const StepPlan& plan);

  const StatePool& state_pool() const { return pool_; }
  model::Mamba2Model& model() { return model_; }

 private:
  ModelRunner(model::Mamba2Model& model, comm::Communicator& comm, StatePool pool)
      : model_(model),
        comm_(comm),
        pool_(std::move(pool)),
        sampler_(comm, model.layout().vocab, static_cast<int32_t>(model.config().vocab_size)) {}

  model::Mamba2Model& model_;
  comm::Communicator& comm_;
  StatePool pool_;
  Sampler sampler_;
  // The sampler's calls for a step's rows, one per kind present, tokens in row order.
  absl::StatusOr<std::vector<SampledToken>> SampleRows(
      const std::vector<const ScheduledSequence*>& rows,
      const std::vector<model::Mamba2Model::RowSampling>& kinds);

  // Per step, reused: each sampled row's Gumbel parameters, and what the model answered
  // for the rows (Mamba2Model::ForwardRows).
  std::vector<float> gumbel_temperatures_;
  std::vector<uint64_t> gumbel_seeds_;
  std::vector<int32_t> gumbel_steps_;
  model::Mamba2Model::RowAnswers answers_;
};

}  // namespace coil

#endif  // COIL_WORKERS_MODEL_RUNNER_H_
