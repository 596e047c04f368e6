// RMSNorm fused with the residual add (mamba_ssm's fused add_norm with residual_in_fp32):
// residual += x; out = residual * rsqrt(mean(residual^2) + eps) * weight.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

// residual += x, and the sum of squares in 16 lane partials folded in the fixed order.
COIL_VECTORIZE float AddAndSumSquares(const float* x, float* r, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) {
      const float v = x == nullptr ? r[i + j] : r[i + j] + x[i + j];
      r[i + j] = v;
      lanes[j] += v * v;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const float v = x == nullptr ? r[i + j] : r[i + j] + x[i + j];
    r[i + j] = v;
    lanes[j] += v * v;
  }
  return FoldLanes16(lanes);
}

COIL_VECTORIZE void Scale(const float* r, const float* w, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = r[i] * scale * w[i];
}

}  // namespace

void CpuAddRmsNorm(const CpuContext& ctx, const Tensor& x, const Tensor& weight, float eps,
                   const Tensor& residual, const Tensor& out) {
  const int64_t rows = residual.dim(0), width = residual.dim(1);
  const float* w = weight.data<float>();
  const bool bf16_out = out.dtype() == DType::kBF16;
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    // A bf16 out is the f32 row rounded: computed into `row`, then converted.
    float* const row = bf16_out ? RowScratch(width) : nullptr;
    for (int64_t t = begin; t < end; ++t) {
      const float* xr = x.empty() ? nullptr : RowF32(x, t);
      float* r = RowF32(residual, t);
      float* o = bf16_out ? row : RowF32(out, t);
      if (ctx.use_ref) {
        double sum = 0.0;
        for (int64_t i = 0; i < width; ++i) {
          if (xr != nullptr) r[i] = r[i] + xr[i];
          sum += static_cast<double>(r[i]) * r[i];
        }
        const double scale = 1.0 / std::sqrt(sum / width + eps);
        for (int64_t i = 0; i < width; ++i) {
          o[i] = static_cast<float>(r[i] * scale * w[i]);
        }
      } else {
        const float sum = AddAndSumSquares(xr, r, width);
        const float scale = 1.0f / std::sqrt(sum / static_cast<float>(width) + eps);
        Scale(r, w, scale, o, width);
      }
      if (bf16_out) NarrowToBf16(o, RowBf16(out, t), width);
    }
  });
}

}  // namespace coil
