// MlpLayer: Nemotron-H's MLP block, out = down(relu(up(x))^2), with up_proj column-parallel
// (this rank's intermediate features) and down_proj row-parallel (the matching columns), so
// `out` is this rank's share of the sum the model all-reduces. No state.
#ifndef COIL_WORKERS_MODEL_MLP_LAYER_H_
#define COIL_WORKERS_MODEL_MLP_LAYER_H_

#include "workers/model/layer.h"
#include "workers/model/shard_layout.h"
#include "workers/model/weights.h"

namespace coil::model {

class MlpLayer final : public Layer {
 public:
  // `bf16_rows`: the matmuls take bf16 rows (bf16 weights), so relu^2 writes down_proj's
  // input as bf16.
  MlpLayer(MlpWeights weights, const ShardLayout& layout, bool bf16_rows);

  LayerKind kind() const override { return LayerKind::kMlp; }
  ScratchWidths scratch() const override;
  void Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
               const Tensor& out) const override;

 private:
  MlpWeights w_;
  ShardLayout layout_;
  bool bf16_rows_;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MLP_LAYER_H_
