// Gated grouped RMSNorm on the GPU, in the two halves of the Backend contract (a group that
// spans ranks all-reduces its sum of squares in between). GatedSumSquares: one block per
// row, gated = y * silu(z) and one block sum per group. GatedNormApply: one block per row,
// out = gated * rsqrt-as-the-CPU(sumsq / group_size + eps) * weight, as f32 or rounded to
// bf16 (the out_proj matmul's input, without a conversion kernel). Every thread reads and
// writes the same column, so gated may alias y and out may alias gated. GatedRmsNorm does
// both in one block per row for groups a rank holds whole. All rows, and the sumsq column
// view, are addressed through their strides.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gated_norm_math.h"
#include "kernels/cuda/row_kernels.cuh"

namespace coil::cuda {
namespace {

// The block's sum of (y * silu(z))^2 over columns [begin, begin + group) of one row, each
// thread taking the same columns (and writing them to `gated` unless it is null): shared by
// the kernels below and the fused mixer decode, which is what gives them the same bits.
__device__ __forceinline__ float GroupSumSquares(const float* yr, const float* zr, float* gated,
                                                 int64_t begin, int64_t group, float* scratch) {
  const float part = GatedPartialSumSquares([yr](int64_t i) { return yr[i]; }, zr, gated, begin,
                                            group, static_cast<int>(threadIdx.x),
                                            static_cast<int>(blockDim.x));
  return BlockSum(part, scratch);
}

// No __restrict__ on y and gated: they may alias.
__global__ void GatedSumSquaresKernel(const float* y, int64_t y_stride, const float* __restrict__ z,
                                      int64_t z_stride, float* gated, int64_t gated_stride,
                                      float* __restrict__ sumsq, int64_t sumsq_stride, int64_t rows,
                                      int64_t ngroups, int64_t group) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* yr = y + t * y_stride;
    const float* zr = z + t * z_stride;
    float* gr = gated + t * gated_stride;
    for (int64_t g = 0; g < ngroups; ++g) {
      const float sum = GroupSumSquares(yr, zr, gr, g * group, group, scratch);
      if (threadIdx.x == 0) sumsq[t * sumsq_stride + g] = sum;
    }
  }
}

// No __restrict__ on gated and out: they may alias.
template <typename OutT>
__global__ void GatedNormApplyKernel(const float* gated, int64_t gated_stride,
                                     const float* __restrict__ sumsq, int64_t sumsq_stride,
                                     const float* __restrict__ weight, float group_size, float eps,
                                     OutT* out, int64_t out_stride, int64_t rows, int64_t width,
                                     int64_t group) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* gr = gated + t * gated_stride;
    const float* sr = sumsq + t * sumsq_stride;
    OutT* o = out + t * out_stride;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      const float scale = GatedNormScale(sr[i / group], group_size, eps);
      StoreOut(o + i, gr[i] * scale * weight[i]);
    }
  }
}

// Both halves in one block per row (GatedRmsNorm): per group, the sum of squares exactly as
// GatedSumSquaresKernel takes it (same columns per thread, same BlockSum), then the scale
// as GatedNormApplyKernel takes it, the gated value computed again rather than stored. Each
// thread reads y[i] and z[i] and writes out[i] for the same columns, so out may alias y.
template <typename OutT>
__global__ void GatedRmsNormKernel(const float* y, int64_t y_stride, const float* __restrict__ z,
                                   int64_t z_stride, const float* __restrict__ weight, float eps,
                                   OutT* out, int64_t out_stride, int64_t rows, int64_t ngroups,
                                   int64_t group) {
  __shared__ float scratch[32];
  const float group_size = static_cast<float>(group);
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* yr = y + t * y_stride;
    const float* zr = z + t * z_stride;
    OutT* o = out + t * out_stride;
    for (int64_t g = 0; g < ngroups; ++g) {
      const int64_t begin = g * group;
      const float sum = GroupSumSquares(yr, zr, nullptr, begin, group, scratch);
      const float scale = GatedNormScale(sum, group_size, eps);
      for (int64_t i = begin + threadIdx.x; i < begin + group; i += blockDim.x) {
        const float v = yr[i] * GatedSilu(zr[i]);
        StoreOut(o + i, v * scale * weight[i]);
      }
    }
  }
}

}  // namespace

absl::Status LaunchGatedRmsNorm(const CudaContext& ctx, const Tensor& y, const Tensor& z,
                                const Tensor& weight, int64_t ngroups, float eps,
                                const Tensor& out) {
  const int64_t rows = y.dim(0), width = y.dim(1);
  if (rows == 0) return absl::OkStatus();
  WithOutPointer(out, [&](auto* o) {
    GatedRmsNormKernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(
        y.data<float>(), y.stride(0), z.data<float>(), z.stride(0), weight.data<float>(), eps, o,
        out.stride(0), rows, ngroups, width / ngroups);
  });
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchGatedSumSquares(const CudaContext& ctx, const Tensor& y, const Tensor& z,
                                   int64_t ngroups, const Tensor& gated, const Tensor& sumsq) {
  const int64_t rows = y.dim(0), width = y.dim(1);
  if (rows == 0) return absl::OkStatus();
  GatedSumSquaresKernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(
      y.data<float>(), y.stride(0), z.data<float>(), z.stride(0), gated.data<float>(),
      gated.stride(0), sumsq.data<float>(), sumsq.stride(0), rows, ngroups, width / ngroups);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchGatedNormApply(const CudaContext& ctx, const Tensor& gated, const Tensor& sumsq,
                                  const Tensor& weight, int64_t group_size, float eps,
                                  const Tensor& out) {
  const int64_t rows = gated.dim(0), width = gated.dim(1);
  if (rows == 0) return absl::OkStatus();
  // The CPU divides by static_cast<float>(group_size): the same float here.
  WithOutPointer(out, [&](auto* o) {
    GatedNormApplyKernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(
        gated.data<float>(), gated.stride(0), sumsq.data<float>(), sumsq.stride(0),
        weight.data<float>(), static_cast<float>(group_size), eps, o, out.stride(0), rows, width,
        width / sumsq.dim(1));
  });
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
