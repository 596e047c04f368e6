// Model: one rank's shard of a language model built from blocks of the residual stream, and
// its forward pass:
//   embedding -> for each block: residual += previous output; x = rmsnorm(residual) * norm;
//   out = layer(x), summed over the ranks -> residual += out; rmsnorm_f(residual) -> lm_head
//   (on the sampled rows only).
// The layers come from the config: every block a Mamba2 mixer for a Mamba2 model (either
// config layout), the pattern's Mamba2, attention and MLP blocks for a hybrid. The residual
// stream stays fp32. Weights are this rank's slices (ShardLayout), read from the checkpoint
// once (weights.h); the collectives of tensor parallelism are the embedding's and every
// block output's all-reduce, plus what a layer adds (the Mamba2 gated norm's sums when a
// group spans ranks). Activations are step scratch, grown to the largest step seen and
// reused; growing it bumps scratch_generation(), so whoever recorded its addresses (a
// decode graph) knows they changed.
//
// A step is three calls, so that the runner can replay the last one as a graph: EnsureScratch
// (collective: the ranks agree on the outcome), UploadStep (the step's metadata packed and
// uploaded in one copy: the batches' device mirrors point into that block, so no op uploads
// anything) and Compute (enqueues only: no host copy, no synchronization). Forward runs the
// three eagerly.
#ifndef COIL_WORKERS_MODEL_MODEL_H_
#define COIL_WORKERS_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/kv_cache.h"
#include "kernels/paged_kv_batch.h"
#include "kernels/state_pool.h"
#include "kernels/tensor.h"
#include "workers/comm/communicator.h"
#include "workers/model/layer.h"
#include "workers/model/model_config.h"
#include "workers/model/model_files.h"
#include "workers/model/shard_layout.h"
#include "workers/model/step_context.h"
#include "workers/model/step_metadata.h"
#include "workers/model/weights.h"

namespace coil::model {

// This rank's per-sequence memory a step reads and writes: the recurrent-state rows of the
// Mamba2 layers and, for a model with attention, the KV pages of the attention layers.
struct RankCaches {
  StatePool* states = nullptr;
  KvCache* kv = nullptr;  // null without attention layers
};

// An uploaded step's batches, their device mirrors pointing into the metadata block.
struct StepBatches {
  const RecurrentBatch* recurrent = nullptr;
  const PagedKvBatch* kv = nullptr;  // null without attention layers
};

struct LoadOptions {
  WeightType weight_type = WeightType::kAuto;
  // Called after each layer loads with (layers done, layers in all), e.g. for progress.
  std::function<void(int64_t, int64_t)> progress;
  // Run a decode step's Mamba2 mixer as one op (MixerDecode, or MixerDecodeSumSquares where
  // ranks share a group: one launch on CUDA); false runs the ops it stands for (the same
  // bits: for measuring what the fusion saves).
  bool fused_mixer = true;
};

class Model {
 public:
  // Reads this rank's slices of `files` into `backend` memory. `comm` decides the rank and
  // TP size; it and `backend` must outlive the model.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const ModelFiles& files, Backend& backend,
                                                     comm::Communicator& comm,
                                                     const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const ShardLayout& layout() const { return layout_; }
  Backend& backend() const { return backend_; }
  RankCollectives& collectives() { return collectives_; }
  ::coil::DType weight_dtype() const { return weight_dtype_; }
  // Bytes of weights this rank holds.
  size_t weight_bytes() const { return weights_.bytes(); }
  // Seconds spent in this model's collectives since it was loaded (for benchmarks: the
  // communication share of a step).
  double comm_seconds() const { return collectives_.seconds(); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // The state pool shape this rank needs for `state_rows` sequences (its Mamba2 layers),
  // the SSM state of `ssm_dtype` (f32 or bf16).
  StatePoolShape StateShape(int64_t state_rows, DType ssm_dtype = DType::kF32) const;
  // The KV cache shape this rank needs for `pages` pages of `block_size` tokens (its
  // attention layers; K/V in bf16 for a bf16 model, else f32).
  KvCacheShape KvShape(int64_t pages, int64_t block_size) const;
  void set_fused_mixer(bool enabled) { fused_mixer_ = enabled; }

  // ---- one step, in three calls ----
  // Grows the step scratch for `rows` tokens, `sampled_rows` sampled rows and a metadata
  // block of `meta_words` words. Every rank grows at the same steps (the same plans), and
  // with more than one rank they agree on the outcome before any step collective, so that a
  // rank that cannot allocate fails the step on every rank instead of leaving the others
  // waiting in a collective it skips.
  absl::Status EnsureScratch(int64_t rows, int64_t sampled_rows, int64_t meta_words);
  // Packs and uploads `meta` into the metadata block (one copy) and returns its batches with
  // the device mirrors set (left null on the CPU).
  absl::StatusOr<StepBatches> UploadStep(const StepMetadata& meta);
  // The forward pass from the embedding to the lm_head on the uploaded step: `rows` tokens,
  // logits for `sampled` rows (the packed sample rows, or every row when all_rows) into
  // logits(). Enqueues only, so that it can be captured.
  void Compute(StepContext& ctx, int64_t rows, int64_t sampled, bool all_rows,
               const StepBatches& batches, const RankCaches& caches);
  // The logits of the last step's `sampled` rows: f32 [sampled, layout().vocab.size()].
  Tensor logits(int64_t sampled) const;
  // Incremented whenever a scratch buffer is reallocated: anything recorded with older
  // addresses (a graph) is stale.
  uint64_t scratch_generation() const { return scratch_generation_; }
  // The most rows the scratch holds now.
  int64_t scratch_rows() const { return scratch_rows_; }

  // EnsureScratch, UploadStep and Compute for `meta`, eagerly; returns how many rows of
  // logits() hold the sampled rows' logits, in meta's order (every row when all_rows).
  absl::StatusOr<int64_t> Run(const StepMetadata& meta, const RankCaches& caches, bool all_rows);
  // Run, then this rank's logits columns [rows, layout().vocab.size()] to the host.
  absl::Status Forward(const StepMetadata& meta, const RankCaches& caches, bool all_rows,
                       std::vector<float>& logits);

 private:
  Model(const ModelConfig& config, const ShardLayout& layout, Backend& backend,
        comm::Communicator& comm)
      : config_(config), layout_(layout), backend_(backend), collectives_(backend, comm) {}

  absl::Status LoadWeights(const checkpoint::Checkpoint& checkpoint, const LoadOptions& options);
  absl::Status GrowScratch(int64_t rows, int64_t sampled_rows, int64_t meta_words);

  ModelConfig config_;
  ShardLayout layout_;
  Backend& backend_;
  RankCollectives collectives_;
  ::coil::DType weight_dtype_ = ::coil::DType::kF32;
  bool fused_mixer_ = true;

  WeightStore weights_;  // owns the memory every weight tensor views
  Tensor embedding_;     // [vocab.size(), D]
  Tensor lm_head_;       // [vocab.size(), D]; the embedding when tied
  Tensor norm_f_;        // f32 [D]
  std::vector<Tensor> block_norms_;  // f32 [D] per block
  std::vector<std::unique_ptr<Layer>> layers_;
  ScratchWidths widths_;  // the widest of the layers' scratch needs

  // Step scratch, sized for scratch_rows_ tokens.
  int64_t scratch_rows_ = 0;
  int64_t scratch_sampled_ = 0;
  int64_t scratch_meta_words_ = 0;
  Buffer residual_, normed_, block_out_, scratch_a_, scratch_b_, scratch_c_, scratch_d_,
      sampled_, logits_;
  // bf16 weights only: the matmuls' inputs as bf16 rows, written rounded by the ops before
  // them (the block norm, a layer's own norms), so the matmuls convert nothing.
  Buffer rows16_;
  Buffer meta_;   // the step's packed metadata (PackStepMetadata), token ids first
  Buffer agree_;  // one float: the ranks' all-reduced count of failed scratch growths
  uint64_t scratch_generation_ = 0;
  PackedStepMetadata packed_;
  RecurrentBatch step_batch_;  // the uploaded step's batches with their device mirrors
  PagedKvBatch step_kv_;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MODEL_H_
