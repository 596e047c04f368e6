// Mamba2Layer: the Mamba2 mixer (mamba_ssm's Mamba2 and Hugging Face's, which compute alike):
//   in_proj -> [z | xBC | dt]; xBC = silu(conv1d(xBC)) -> [x | B | C];
//   y = ssm_scan(x, dt, B, C); y = rmsnorm_grouped(y * silu(z)) * w; out_proj(y)
// on this rank's heads (ShardLayout), with its conv and SSM state in the step's StatePool at
// its own index among the model's Mamba2 layers. When a B/C group spans ranks, the gated
// norm's per-group sums of squares are all-reduced (whether groups are whole is a property of
// the shapes, the same on every rank, so every rank makes the same calls). A decode-only step
// takes the mixer as one op (MixerDecode, or MixerDecodeSumSquares where ranks share a
// group), with the bits of the ops it stands for.
#ifndef COIL_WORKERS_MODEL_MAMBA2_LAYER_H_
#define COIL_WORKERS_MODEL_MAMBA2_LAYER_H_

#include <cstdint>
#include <utility>

#include "kernels/backend.h"
#include "workers/model/layer.h"
#include "workers/model/model_config.h"
#include "workers/model/shard_layout.h"
#include "workers/model/weights.h"

namespace coil::model {

class Mamba2Layer final : public Layer {
 public:
  // `state_index`: this layer's index in the StatePool (its place among the Mamba2 layers).
  // `bf16_rows`: the model's matmuls take bf16 rows (bf16 weights).
  Mamba2Layer(Mamba2Weights weights, const ModelConfig& config, const ShardLayout& layout,
              int64_t state_index, bool bf16_rows);

  LayerKind kind() const override { return LayerKind::kMamba2; }
  ScratchWidths scratch() const override;
  void Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
               const Tensor& out) const override;

 private:
  // rmsnorm(y * silu(z)) * w into `out` (y itself, or the bf16 rows of out_proj's input).
  void GroupNorm(StepContext& ctx, const LayerStep& step, const Tensor& y, const Tensor& z,
                 const Tensor& out) const;
  // For groups that span ranks: the [rows, ngroups] sums buffer, the columns of groups with
  // no piece on this rank zeroed (a launch saved when there are none), local group g's
  // column at group_begin + g.
  Tensor GroupSums(StepContext& ctx, const LayerStep& step) const;
  // Local group g's columns here: [first, first + count) of y.
  std::pair<int64_t, int64_t> GroupColumns(int64_t g) const;
  // All-reduces the sums and applies the norm to each local group's gated columns.
  void ApplyGroupNorm(StepContext& ctx, const LayerStep& step, const Tensor& gated,
                      const Tensor& sums, const Tensor& out) const;

  Mamba2Weights w_;
  ModelConfig config_;
  ShardLayout layout_;
  int64_t state_index_;
  bool bf16_rows_;
  float norm_eps_;  // the gated norm's
  SsmScanOptions scan_;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MAMBA2_LAYER_H_
