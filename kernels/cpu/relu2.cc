// out = max(x, 0)^2 per element (an f32 out may be x itself: each element is read, then
// written); a bf16 out is the f32 value rounded to nearest even.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

COIL_VECTORIZE void Relu2Row(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN, as in torch.relu
    out[i] = r * r;
  }
}

COIL_VECTORIZE void Relu2RowBf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN, as in torch.relu
    out[i] = FloatToBf16(r * r);
  }
}

}  // namespace

void CpuRelu2(const CpuContext& ctx, const Tensor& x, const Tensor& out) {
  const int64_t rows = x.dim(0), width = x.dim(1);
  const bool bf16 = out.dtype() == DType::kBF16;
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (bf16) {
        Relu2RowBf16(RowF32(x, t), RowBf16(out, t), width);
      } else {
        Relu2Row(RowF32(x, t), RowF32(out, t), width);
      }
    }
  };
  if (ctx.use_ref) {
    run(0, rows);
  } else {
    ctx.pool->ParallelFor(rows, 1, run);
  }
}

}  // namespace coil
