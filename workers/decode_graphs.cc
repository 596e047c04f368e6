#include "workers/decode_graphs.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <utility>

#include "common/status_macros.h"
#if COIL_WITH_CUDA
#include "workers/comm/nccl_communicator.h"
#endif

namespace coil {
namespace {

size_t BucketIndex(int64_t bucket) {
  return static_cast<size_t>(std::countr_zero(static_cast<uint64_t>(bucket)));
}

}  // namespace

bool DecodeGraphs::enabled() const {
  // Only collectives enqueued on the backend's stream (NCCL) can be captured; MPI cannot.
  const comm::Communicator& comm = model_.collectives().comm();
  return enabled_ && model_.backend().SupportsGraphs() && !model_.config().has_attention() &&
         (comm.size() == 1 || comm.memory_space() == comm::MemorySpace::kDevice);
}

int64_t DecodeGraphs::nodes(int64_t num_seqs) const {
  const size_t index = BucketIndex(DecodeBucket(num_seqs));
  if (index >= graphs_.size() || graphs_[index].graph == nullptr) return 0;
  return graphs_[index].graph->nodes();
}

absl::Status DecodeGraphs::Capture(int64_t bucket, StatePool& pool) {
  const model::RankCaches caches{&pool, nullptr};
  Backend& backend = model_.backend();
  const StepMetadata scratch = ScratchDecodeBatch(bucket, static_cast<int32_t>(pool.scratch_row()));
  COIL_ASSIGN_OR_RETURN(const model::StepBatches batches, model_.UploadStep(scratch));
  // The warm-up makes every lazy allocation (op scratch, algorithm choices) happen outside
  // the capture; without collectives it is local, so ranks may capture at different steps.
  // The graphs take every bucket row in order (a scratch batch samples rows 0..bucket-1),
  // so their lm_head reads the final norm's rows without a gather.
  {
    model::StepContext warm_up(backend, model_.collectives(), /*collectives=*/false);
    model_.Compute(warm_up, bucket, bucket, true, batches, caches);
    COIL_RETURN_IF_ERROR(warm_up.status());
  }
#if COIL_WITH_CUDA
  // NCCL with more than two ranks gathers into a scratch buffer that it grows on demand:
  // sized here for the largest all-reduce the scratch allows, so it never moves while the
  // graphs live (a larger step grows the scratch, which drops the graphs).
  if (auto* nccl = dynamic_cast<comm::NcclCommunicator*>(&model_.collectives().comm());
      nccl != nullptr) {
    const model::ModelConfig& config = model_.config();
    COIL_RETURN_IF_ERROR(nccl->ReserveAllReduce(static_cast<size_t>(
        model_.scratch_rows() * std::max<int64_t>(config.d_model, config.ngroups))));
  }
#endif
  COIL_RETURN_IF_ERROR(backend.Synchronize());
  COIL_RETURN_IF_ERROR(backend.BeginCapture());
  model::StepContext ctx(backend, model_.collectives(), /*collectives=*/true);
  model_.Compute(ctx, bucket, bucket, true, batches, caches);
  auto graph = backend.EndCapture();  // always ends the capture, whatever failed inside
  COIL_RETURN_IF_ERROR(ctx.status());
  COIL_RETURN_IF_ERROR(graph.status());
  Graph& slot = graphs_[BucketIndex(bucket)];
  slot.graph = std::move(graph).value();
  slot.scratch_generation = model_.scratch_generation();
  ++captures_;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DecodeGraphs::Run(const StepMetadata& meta, StatePool& pool) {
  Backend& backend = model_.backend();
  // Every rank pads the same way, so the collectives match whether a rank replays its
  // graph or runs the padded batch op by op.
  const int64_t bucket = DecodeBucket(meta.batch.num_seqs());
  const int64_t largest = std::max(DecodeBucket(pool.state_rows()), bucket);
  COIL_RETURN_IF_ERROR(model_.EnsureScratch(largest, largest, 0));
  const PoolIdentity identity{pool.ConvState(0).raw(), pool.SsmState(0).raw(), pool.state_rows()};
  if (!(pool_ == identity)) {
    graphs_.clear();
    pool_ = identity;
  }
  const size_t index = BucketIndex(bucket);
  if (graphs_.size() <= index) graphs_.resize(index + 1);
  Graph& slot = graphs_[index];
  const bool current = slot.graph != nullptr &&
                       slot.scratch_generation == model_.scratch_generation() &&
                       backend.IsGraphCurrent(*slot.graph);
  if (!current && !capture_failed_) {
    slot.graph.reset();
    const absl::Status captured = Capture(bucket, pool);
    if (!captured.ok()) {
      capture_failed_ = true;
      std::fprintf(stderr, "coil: decode graphs off on this rank, steps run op by op: %s\n",
                   captured.ToString().c_str());
    }
  }
  const StepMetadata padded = PadDecodeBatch(meta, bucket, static_cast<int32_t>(pool.scratch_row()));
  model::StepContext ctx(backend, model_.collectives(), /*collectives=*/true);
  absl::StatusOr<model::StepBatches> uploaded = model_.UploadStep(padded);
  if (!uploaded.ok()) {
    ctx.Fail(Annotate(uploaded.status(), "the step's metadata"));
    uploaded = model::StepBatches{&padded.batch, nullptr};
  }
  // A step whose padded sample rows are not 0..bucket-1 (a resumed prompt's one-token chunk
  // that samples nothing, ahead of a row that does) runs op by op, with the gather.
  const bool every_row = SamplesEveryRow(padded);
  bool replayed = false;
  if (ctx.ok() && every_row && slot.graph != nullptr && !capture_failed_) {
    replayed = backend.Replay(*slot.graph).ok();
    if (replayed) ++replays_;
  }
  if (!replayed) {
    model_.Compute(ctx, bucket, bucket, every_row, *uploaded, model::RankCaches{&pool, nullptr});
  }
  COIL_RETURN_IF_ERROR(ctx.status());
  return static_cast<int64_t>(meta.num_samples());
}

}  // namespace coil
