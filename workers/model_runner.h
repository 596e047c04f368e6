// ModelRunner: executes one StepPlan on this rank (docs/ARCHITECTURE.md §1, §3): builds the
// step metadata once, restores the plan's prefix-cache snapshots into their sequences' rows,
// runs the model's forward pass over its shard (eagerly, or a decode-only step through its
// decode graph), takes the plan's snapshots, exchanges every rank's step status, and samples
// the next token of each sampled sequence (on the device where a row needs only an argmax or
// a Gumbel-max, on the host otherwise). Every rank runs every plan and returns the same
// StepResult; rank 0's goes back to the scheduler. The runner owns this rank's per-sequence
// state: the recurrent-state pool and, for a model with attention, the KV cache, whose pages
// the scheduler hands out (a plan's block tables say which pages each sequence reads and
// writes; the runner never decides it).
#ifndef COIL_WORKERS_MODEL_RUNNER_H_
#define COIL_WORKERS_MODEL_RUNNER_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "kernels/state_pool.h"
#include "scheduler/plan.h"
#include "workers/comm/communicator.h"
#include "workers/decode_graphs.h"
#include "workers/device_sampler.h"
#include "workers/model/model.h"
#include "workers/model/step_metadata.h"
#include "workers/sampler.h"

namespace coil {

struct RunnerOptions {
  // The KV cache of a model with attention layers: pages of block_size tokens (the pages the
  // scheduler's KV budget counts, and the plans' block tables name). Ignored without
  // attention layers.
  int64_t kv_pages = 0;
  int32_t block_size = 16;
  // The most positions one sequence holds (prompt plus output: --max-model-len), for a
  // model with attention layers: the capacity of its decode graphs, which sizes their block
  // tables, attention grid and split scratch (a decode step with a longer context runs op
  // by op). 0: what the KV cache holds, kv_pages * block_size; capped at that.
  int32_t max_context = 0;
  // Replay decode-only steps as graphs where the backend records them (CUDA) and the
  // model's communicator can be captured; false runs every step op by op (for debugging:
  // --cuda-graphs=false).
  bool cuda_graphs = true;
  // The SSM state pool's type (--state-dtype): f32, or bf16 for half the state's memory
  // and traffic (stored rounded between steps, computed fp32 within one).
  DType state_dtype = DType::kF32;
};

class ModelRunner {
 public:
  // Allocates the state pool for `state_rows` sequences (plus the scratch row) and, for a
  // model with attention, the KV cache of options.kv_pages pages (plus the scratch page).
  // `model`, `backend` and `comm` (the host communicator: step status and sampling) must
  // outlive the runner.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(model::Model& model,
                                                             Backend& backend,
                                                             comm::Communicator& comm,
                                                             int64_t state_rows,
                                                             const RunnerOptions& options = {});

  // Collective. A failure on any rank comes back as ok = false with the failed rank and
  // its cause; the plan's requests are then failed, and nothing else is affected.
  StepResult Execute(const StepPlan& plan);

  // Collective. Runs `plan` and returns the logits of every one of its rows, full padded
  // vocabulary width ([rows, padded_vocab], gathered from the ranks' shards): for dumping
  // logits and scoring text. Samples nothing.
  absl::StatusOr<std::vector<float>> ExecuteAllLogits(const StepPlan& plan);

  // The step of `meta` as Execute runs it (through a decode graph when it takes one), with
  // this rank's logits columns of the sampled rows (or every row when `all_rows`) copied to
  // `logits`: for tests of the paths a step can take. Not followed by a status exchange.
  absl::Status Forward(const StepMetadata& meta, bool all_rows, std::vector<float>& logits);

  const StatePool& state_pool() const { return pool_; }
  // Null for a model without attention layers.
  const KvCache* kv_cache() const { return kv_cache_ ? &*kv_cache_ : nullptr; }
  model::Model& model() { return model_; }
  DecodeGraphs& decode_graphs() { return graphs_; }

 private:
  ModelRunner(model::Model& model, Backend& backend, comm::Communicator& comm, StatePool pool,
              std::optional<KvCache> kv_cache, const RunnerOptions& options)
      : model_(model),
        backend_(backend),
        comm_(comm),
        pool_(std::move(pool)),
        kv_cache_(std::move(kv_cache)),
        graphs_(model, options.cuda_graphs, GraphContext(options)),
        device_sampler_(backend, model.layout().vocab, model.config().vocab_size),
        sampler_(comm, model.layout().vocab, static_cast<int32_t>(model.config().vocab_size)) {}

  // The decode graphs' capacity in positions per sequence (RunnerOptions::max_context).
  static int32_t GraphContext(const RunnerOptions& options);
  // The step's metadata from `plan`, checked against this rank's pool and KV cache.
  absl::StatusOr<StepMetadata> Metadata(const StepPlan& plan) const;
  model::RankCaches caches() { return {&pool_, kv_cache_ ? &*kv_cache_ : nullptr}; }
  // The step's forward pass; returns how many rows of the model's logits hold the sampled
  // rows (every row when all_rows), in meta's order.
  absl::StatusOr<int64_t> RunStep(const StepMetadata& meta, bool all_rows);
  // Runs a plan's restores or snapshots in order, after checking every row (the same
  // check on every rank: a bad plan fails everywhere alike).
  absl::Status CopyStateRows(const std::vector<StateCopy>& copies, const char* what);
  // The sampler's calls for a step's rows, one per kind present, tokens in row order.
  absl::StatusOr<std::vector<SampledToken>> SampleRows(
      const std::vector<const ScheduledSequence*>& rows,
      const std::vector<DeviceSampler::RowSampling>& kinds);

  model::Model& model_;
  Backend& backend_;
  comm::Communicator& comm_;
  StatePool pool_;
  std::optional<KvCache> kv_cache_;
  DecodeGraphs graphs_;
  DeviceSampler device_sampler_;
  Sampler sampler_;

  // Per step, reused: each sampled row's Gumbel parameters, and what the device answered
  // for the rows.
  std::vector<float> gumbel_temperatures_;
  std::vector<uint64_t> gumbel_seeds_;
  std::vector<int32_t> gumbel_steps_;
  DeviceSampler::RowAnswers answers_;
};

}  // namespace coil

#endif  // COIL_WORKERS_MODEL_RUNNER_H_
