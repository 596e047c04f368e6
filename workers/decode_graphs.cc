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

// The block-table entries a sequence of `max_context` positions needs.
int64_t PagesPerSequence(int32_t max_context, int64_t block_size) {
  return block_size > 0 ? (int64_t{max_context} + block_size - 1) / block_size : 0;
}

}  // namespace

bool DecodeGraphs::enabled() const {
  // Only collectives enqueued on the backend's stream (NCCL) can be captured; MPI cannot.
  const comm::Communicator& comm = model_.collectives().comm();
  return enabled_ && model_.backend().SupportsGraphs() &&
         (comm.size() == 1 || comm.memory_space() == comm::MemorySpace::kDevice);
}

bool DecodeGraphs::Takes(const StepMetadata& meta) const {
  if (!enabled() || !IsDecodeOnly(meta)) return false;
  if (!model_.config().has_attention()) return true;
  // A graph's block tables hold PagesPerSequence entries per sequence and its attention
  // grid spans max_context positions: a longer context or table runs op by op.
  const PagedKvBatch& kv = meta.kv;
  if (kv.block_size <= 0 || max_context_ <= 0) return false;
  const int64_t pages = PagesPerSequence(max_context_, kv.block_size);
  for (int s = 0; s < kv.num_seqs(); ++s) {
    if (kv.context_length(s) > max_context_ || kv.cu_blocks[s + 1] - kv.cu_blocks[s] > pages) {
      return false;
    }
  }
  return true;
}

StepMetadata DecodeGraphs::ScratchBatch(int64_t bucket, const model::RankCaches& caches) const {
  KvPages kv;
  if (caches.kv != nullptr) {
    kv.block_size = static_cast<int32_t>(caches.kv->block_size());
    kv.pages = caches.kv->scratch_page();  // the scratch page's index: every entry's table
  }
  StepMetadata scratch =
      ScratchDecodeBatch(bucket, static_cast<int32_t>(caches.states->scratch_row()), kv);
  if (caches.kv != nullptr) scratch.kv.max_context = max_context_;
  return scratch;
}

int64_t DecodeGraphs::nodes(int64_t num_seqs) const {
  const size_t index = BucketIndex(DecodeBucket(num_seqs));
  if (index >= graphs_.size() || graphs_[index].graph == nullptr) return 0;
  return graphs_[index].graph->nodes();
}

absl::Status DecodeGraphs::Capture(int64_t bucket, int64_t warm_up_bucket,
                                   const model::RankCaches& caches) {
  Backend& backend = model_.backend();
  // The warm-up makes every lazy allocation (op scratch, algorithm choices) happen outside
  // the capture; without collectives it is local, so ranks may capture at different steps.
  // With attention it runs the largest bucket at the graphs' capacity, which sizes the
  // decode attention's split scratch for every bucket at once: a smaller bucket's warm-up
  // would leave it to grow at the next bucket's, dropping the graphs captured before.
  // The graphs take every bucket row in order (a scratch batch samples rows 0..bucket-1),
  // so their lm_head reads the final norm's rows without a gather.
  {
    const StepMetadata warm = ScratchBatch(warm_up_bucket, caches);
    COIL_ASSIGN_OR_RETURN(const model::StepBatches batches, model_.UploadStep(warm));
    model::StepContext warm_up(backend, model_.collectives(), /*collectives=*/false);
    model_.Compute(warm_up, warm_up_bucket, warm_up_bucket, true, batches, caches);
    COIL_RETURN_IF_ERROR(warm_up.status());
  }
  const StepMetadata scratch = ScratchBatch(bucket, caches);
  COIL_ASSIGN_OR_RETURN(const model::StepBatches batches, model_.UploadStep(scratch));
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

absl::StatusOr<int64_t> DecodeGraphs::Run(const StepMetadata& meta,
                                          const model::RankCaches& caches) {
  Backend& backend = model_.backend();
  StatePool& pool = *caches.states;
  const bool attention = model_.config().has_attention();
  if (attention && caches.kv == nullptr) {
    return absl::InternalError(
        "a decode graph of a model with attention layers needs its KV cache");
  }
  // Every rank pads the same way, so the collectives match whether a rank replays its
  // graph or runs the padded batch op by op.
  const int64_t bucket = DecodeBucket(meta.batch.num_seqs());
  const int64_t largest = std::max(DecodeBucket(pool.state_rows()), bucket);
  // The metadata block holds the largest bucket's step with full block tables, so no
  // replay's upload outgrows it (the tables come last: a bucket's other offsets are fixed).
  const int64_t pages_per_sequence =
      attention ? PagesPerSequence(max_context_, caches.kv->block_size()) : 0;
  COIL_RETURN_IF_ERROR(
      model_.EnsureScratch(largest, largest, MaxDecodePackedWords(largest, pages_per_sequence)));
  PoolIdentity identity{pool.ConvState(0).raw(), pool.SsmState(0).raw(), pool.state_rows()};
  if (attention) {
    identity.k = caches.kv->KCache(0).raw();
    identity.v = caches.kv->VCache(0).raw();
    identity.pages = caches.kv->pages();
  }
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
    const absl::Status captured = Capture(bucket, attention ? largest : bucket, caches);
    if (!captured.ok()) {
      capture_failed_ = true;
      std::fprintf(stderr, "coil: decode graphs off on this rank, steps run op by op: %s\n",
                   captured.ToString().c_str());
    }
  }
  StepMetadata padded =
      PadDecodeBatch(meta, bucket, static_cast<int32_t>(pool.scratch_row()),
                     attention ? static_cast<int32_t>(caches.kv->scratch_page()) : 0);
  // The capacity the graph was captured with: an op-by-op run of the step then launches the
  // same attention grid and reads the same scratch.
  if (attention) padded.kv.max_context = max_context_;
  model::StepContext ctx(backend, model_.collectives(), /*collectives=*/true);
  absl::StatusOr<model::StepBatches> uploaded = model_.UploadStep(padded);
  if (!uploaded.ok()) {
    ctx.Fail(Annotate(uploaded.status(), "the step's metadata"));
    uploaded = model::StepBatches{&padded.batch, attention ? &padded.kv : nullptr};
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
    model_.Compute(ctx, bucket, bucket, every_row, *uploaded, caches);
  }
  COIL_RETURN_IF_ERROR(ctx.status());
  return static_cast<int64_t>(meta.num_samples());
}

}  // namespace coil
