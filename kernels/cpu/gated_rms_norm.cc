// Gated grouped RMSNorm (mamba_ssm RMSNormGated, norm_before_gate=False):
// out = rmsnorm(y * silu(z)) * weight, the RMS taken per group of E / ngroups columns, in
// two halves so that a group split across ranks can all-reduce its sum of squares between.
#include <cmath>
#include <vector>

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

// One row of the first half: gated = y * silu(z) and each group's sum of squares.
void GateRow(bool use_ref, const float* yr, const float* zr, float* gr, float* sr,
             int64_t ngroups, int64_t group) {
  for (int64_t g = 0; g < ngroups; ++g) {
    const int64_t o = g * group;
    if (use_ref) {
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

// One row of the second half, into f32 `o`.
void ApplyRow(bool use_ref, const float* gr, const float* sr, const float* w, int64_t ngroups,
              int64_t group, int64_t group_size, float eps, float* o) {
  for (int64_t g = 0; g < ngroups; ++g) {
    const int64_t off = g * group;
    if (use_ref) {
      const double scale = 1.0 / std::sqrt(static_cast<double>(sr[g]) / group_size + eps);
      for (int64_t i = 0; i < group; ++i) {
        o[off + i] = static_cast<float>(gr[off + i] * scale * w[off + i]);
      }
    } else {
      const float scale = 1.0f / std::sqrt(sr[g] / static_cast<float>(group_size) + eps);
      Scale(gr + off, w + off, scale, o + off, group);
    }
  }
}

// `row` (f32) into row t of a bf16 `out`.
void StoreBf16Row(const float* row, const Tensor& out, int64_t t, int64_t width) {
  NarrowToBf16(row, RowBf16(out, t), width);
}

}  // namespace

void CpuGatedSumSquares(const CpuContext& ctx, const Tensor& y, const Tensor& z,
                        int64_t ngroups, const Tensor& gated, const Tensor& sumsq) {
  const int64_t rows = y.dim(0), width = y.dim(1), group = width / ngroups;
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      GateRow(ctx.use_ref, RowF32(y, t), RowF32(z, t), RowF32(gated, t), RowF32(sumsq, t),
              ngroups, group);
    }
  });
}

void CpuGatedNormApply(const CpuContext& ctx, const Tensor& gated, const Tensor& sumsq,
                       const Tensor& weight, int64_t group_size, float eps, const Tensor& out) {
  const int64_t rows = gated.dim(0), width = gated.dim(1), ngroups = sumsq.dim(1);
  const int64_t group = width / ngroups;
  const bool bf16_out = out.dtype() == DType::kBF16;
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    // A bf16 out is the f32 row rounded: computed into `row`, then converted.
    float* const row = bf16_out ? RowScratch(width) : nullptr;
    for (int64_t t = begin; t < end; ++t) {
      float* o = bf16_out ? row : RowF32(out, t);
      ApplyRow(ctx.use_ref, RowF32(gated, t), RowF32(sumsq, t), weight.data<float>(), ngroups,
               group, group_size, eps, o);
      if (bf16_out) StoreBf16Row(o, out, t, width);
    }
  });
}

void CpuGatedRmsNorm(const CpuContext& ctx, const Tensor& y, const Tensor& z,
                     const Tensor& weight, int64_t ngroups, float eps, const Tensor& out) {
  const int64_t rows = y.dim(0), width = y.dim(1), group = width / ngroups;
  const bool bf16_out = out.dtype() == DType::kBF16;
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    // The two halves' row functions on a private row (the same bits as the two ops), in
    // per-thread scratch that decode steps reuse instead of allocating.
    float* const gated = RowScratch(2 * width + ngroups);
    float* const row = gated + width;
    float* const sums = row + width;
    for (int64_t t = begin; t < end; ++t) {
      GateRow(ctx.use_ref, RowF32(y, t), RowF32(z, t), gated, sums, ngroups, group);
      float* o = bf16_out ? row : RowF32(out, t);
      ApplyRow(ctx.use_ref, gated, sums, weight.data<float>(), ngroups, group, group, eps, o);
      if (bf16_out) StoreBf16Row(o, out, t, width);
    }
  });
}

}  // namespace coil
