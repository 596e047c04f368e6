#include "workers/model/mlp_layer.h"

#include <utility>

namespace coil::model {

MlpLayer::MlpLayer(MlpWeights weights, const ShardLayout& layout, bool bf16_rows)
    : w_(std::move(weights)), layout_(layout), bf16_rows_(bf16_rows) {}

ScratchWidths MlpLayer::scratch() const {
  ScratchWidths widths;
  widths.a = layout_.mlp_width();       // up_proj's output (relu^2 in place with f32 weights)
  widths.rows16 = layout_.mlp_width();  // down_proj's input with bf16 weights
  return widths;
}

void MlpLayer::Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
                       const Tensor& out) const {
  Backend& backend = ctx.backend();
  const Device device = backend.device();
  const int64_t width = layout_.mlp_width();
  const Tensor up(step.scratch.a, ::coil::DType::kF32, {step.rows, width}, device);
  const Tensor activated =
      bf16_rows_ ? Tensor(step.scratch.rows16, ::coil::DType::kBF16, {step.rows, width}, device)
                 : up;
  ctx.Run([&] { return backend.Matmul(x, w_.up, up); });
  ctx.Run([&] { return backend.Relu2(up, activated); });
  ctx.Run([&] { return backend.Matmul(activated, w_.down, out); });
}

}  // namespace coil::model
