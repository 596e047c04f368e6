// Mamba2Model: one rank's shard of a Mamba2 language model and its forward pass.
//
//   embedding -> for each layer: residual += mixer_out; h = rmsnorm(residual) -> mixer(h)
//   -> residual += mixer_out; rmsnorm_f(residual) -> lm_head (sampled rows only)
//   mixer: in_proj -> [z | xBC | dt]; xBC = silu(conv1d(xBC)) -> [x | B | C];
//          y = ssm_scan(x, dt, B, C); y = rmsnorm_grouped(y * silu(z)) * w; out_proj(y)
//
// The residual stream stays fp32. Weights are this rank's slices (ShardLayout), read from
// the memory-mapped checkpoint once; the collectives of tensor parallelism are: the
// embedding and every out_proj output all-reduced, and the gated norm's per-group sums of
// squares all-reduced when a group spans ranks. Activations are step scratch, grown to the
// largest step seen and reused.
#ifndef COIL_WORKERS_MODEL_MAMBA2_MODEL_H_
#define COIL_WORKERS_MODEL_MAMBA2_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/state_pool.h"
#include "kernels/tensor.h"
#include "workers/comm/communicator.h"
#include "workers/model/checkpoint.h"
#include "workers/model/model_config.h"
#include "workers/model/shard_layout.h"
#include "workers/step_metadata.h"

namespace coil::model {

// The element type of the big matrices (in_proj, out_proj, embedding, lm_head). Vectors
// (norms, conv, A_log, D, dt_bias) are always f32.
enum class WeightType {
  kAuto,  // bf16 when the checkpoint stores them in 16 bits (f16 is converted), else f32
  kF32,
  kBF16,
};
absl::StatusOr<WeightType> ParseWeightType(absl::string_view text);  // auto|f32|bf16

struct LoadOptions {
  WeightType weight_type = WeightType::kAuto;
  // Called after each layer loads with (layers done, layers in all), e.g. for progress.
  std::function<void(int64_t, int64_t)> progress;
};

class Mamba2Model {
 public:
  // Reads this rank's slices from `checkpoint` into `backend` memory. `comm` decides the
  // rank and TP size and must outlive the model, as must `backend`.
  static absl::StatusOr<std::unique_ptr<Mamba2Model>> Load(const Checkpoint& checkpoint,
                                                           Backend& backend,
                                                           comm::Communicator& comm,
                                                           const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const ShardLayout& layout() const { return layout_; }
  ::coil::DType weight_dtype() const { return weight_dtype_; }
  // Bytes of weights this rank holds.
  size_t weight_bytes() const { return weight_bytes_; }
  // Seconds spent in this model's collectives since it was loaded (for benchmarks: the
  // communication share of a step).
  double comm_seconds() const { return comm_seconds_; }
  // The state pool shape this rank needs for `state_rows` sequences.
  StatePoolShape StateShape(int64_t state_rows) const;

  // Runs one step over `meta`'s packed tokens, reading and writing `pool`, and writes this
  // rank's logits columns [rows, layout().vocab.size()] to `logits` (host memory): for the
  // sampled rows (meta.sample_rows), or every row when `all_rows`.
  absl::Status Forward(const StepMetadata& meta, StatePool& pool, bool all_rows,
                       std::vector<float>& logits);

 private:
  struct Layer {
    Tensor norm;         // f32 [D]
    Tensor in_proj;      // [in_proj_rows, D]: z | x | B | C | dt of this rank
    Tensor conv_weight;  // f32 [conv_channels, d_conv]: x | B | C channels
    Tensor conv_bias;    // f32 [conv_channels]
    Tensor dt_bias;      // f32 [heads]
    Tensor a_log;        // f32 [heads]
    Tensor d;            // f32 [heads]
    Tensor mixer_norm;   // f32 [d_inner]
    Tensor out_proj;     // [D, d_inner]
  };

  Mamba2Model(const ModelConfig& config, const ShardLayout& layout, Backend& backend,
              comm::Communicator& comm)
      : config_(config), layout_(layout), backend_(backend), comm_(comm) {}

  absl::Status LoadWeights(const Checkpoint& checkpoint, const LoadOptions& options);
  absl::StatusOr<Tensor> Upload(std::vector<uint8_t> host, ::coil::DType dtype,
                                std::initializer_list<int64_t> shape);
  absl::Status EnsureScratch(int64_t rows, int64_t sampled_rows);
  absl::Status AllReduce(const Tensor& t);
  // Returns a failed collective; a local error is stored in `status` (see Forward).
  absl::Status GroupNorm(const Layer& layer, const Tensor& y, const Tensor& z, int64_t rows,
                         absl::Status& status, int64_t layer_index);

  ModelConfig config_;
  ShardLayout layout_;
  Backend& backend_;
  comm::Communicator& comm_;
  ::coil::DType weight_dtype_ = ::coil::DType::kF32;
  size_t weight_bytes_ = 0;
  float mixer_norm_eps_ = 1e-5f;
  double comm_seconds_ = 0.0;

  std::vector<Buffer> weight_buffers_;  // own the memory the tensors below view
  Tensor embedding_;                    // [vocab.size(), D]
  Tensor lm_head_;                      // [vocab.size(), D]; the embedding when tied
  Tensor norm_f_;                       // f32 [D]
  std::vector<Layer> layers_;

  // Step scratch, sized for scratch_rows_ tokens.
  int64_t scratch_rows_ = 0;
  int64_t scratch_sampled_ = 0;
  Buffer ids_, residual_, normed_, mixer_out_, zxbcdt_, xbc_, y_, sumsq_, group_sums_,
      sampled_, logits_;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MAMBA2_MODEL_H_
