// Gated grouped RMSNorm (mamba_ssm RMSNormGated, norm_before_gate=False):
// out = rmsnorm(y * silu(z)) * weight, the RMS taken per group of E / ngroups columns, in
// two halves so that a group split across ranks can all-reduce its sum of squares between.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

COIL_VECTORIZE float GateAndSumSquares(const float* y, const float* z, float* g, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) {
      const float v = y[i + j] * SiluF(z[i + j]);
      g[i + j] = v;
      lanes[j] += v * v;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const float v = y[i + j] * SiluF(z[i + j]);
    g[i + j] = v;
    lanes[j] += v * v;
  }
  return FoldLanes16(lanes);
}

COIL_VECTORIZE void Scale(const float* g, const float* w, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] * scale * w[i];
}

}  // namespace

void CpuGatedSumSquares(const CpuContext& ctx, const Tensor& y, const Tensor& z,
                        int64_t ngroups, const Tensor& gated, const Tensor& sumsq) {
  const int64_t rows = y.dim(0), width = y.dim(1), group = width / ngroups;
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* yr = RowF32(y, t);
      const float* zr = RowF32(z, t);
      float* gr = RowF32(gated, t);
      float* sr = RowF32(sumsq, t);
      for (int64_t g = 0; g < ngroups; ++g) {
        const int64_t o = g * group;
        if (ctx.use_ref) {
          double sum = 0.0;
          for (int64_t i = 0; i < group; ++i) {
            const double zi = zr[o + i];
            const double v = yr[o + i] * (zi / (1.0 + std::exp(-zi)));
            gr[o + i] = static_cast<float>(v);
            sum += v * v;
          }
          sr[g] = static_cast<float>(sum);
        } else {
          sr[g] = GateAndSumSquares(yr + o, zr + o, gr + o, group);
        }
      }
    }
  });
}

void CpuGatedNormApply(const CpuContext& ctx, const Tensor& gated, const Tensor& sumsq,
                       const Tensor& weight, int64_t group_size, float eps, const Tensor& out) {
  const int64_t rows = gated.dim(0), width = gated.dim(1), ngroups = sumsq.dim(1);
  const int64_t group = width / ngroups;
  const float* w = weight.data<float>();
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gr = RowF32(gated, t);
      const float* sr = RowF32(sumsq, t);
      float* o = RowF32(out, t);
      for (int64_t g = 0; g < ngroups; ++g) {
        const int64_t off = g * group;
        if (ctx.use_ref) {
          const double scale = 1.0 / std::sqrt(static_cast<double>(sr[g]) / group_size + eps);
          for (int64_t i = 0; i < group; ++i) {
            o[off + i] = static_cast<float>(gr[off + i] * scale * w[off + i]);
          }
        } else {
          const float scale =
              1.0f / std::sqrt(sr[g] / static_cast<float>(group_size) + eps);
          Scale(gr + off, w + off, scale, o + off, group);
        }
      }
    }
  });
}

}  // namespace coil
