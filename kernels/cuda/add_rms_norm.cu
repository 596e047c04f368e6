// RMSNorm fused with the residual add on the GPU: one block per row. Phase 1 adds x into
// the residual and sums the squares; phase 2 writes out = residual * scale * weight, with
// scale = 1 / sqrt(sum / width + eps) as the CPU computes it, as f32 or rounded to bf16
// (the next matmul's input, without a conversion kernel). Each thread touches the same
// columns in both phases, so out may alias x (the thread read x[i] before it writes out[i]).
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_kernels.cuh"

namespace coil::cuda {
namespace {

// No __restrict__ on x and out: they may alias.
template <typename OutT>
__global__ void AddRmsNormKernel(const float* x, int64_t x_stride, const float* weight, float eps,
                                 float* residual, int64_t residual_stride, OutT* out,
                                 int64_t out_stride, int64_t rows, int64_t width) {
  __shared__ float scratch[32];
  PdlWait();  // x is the previous kernel's output
  PdlLaunchDependents();
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    float* r = residual + t * residual_stride;
    const float* xr = x == nullptr ? nullptr : x + t * x_stride;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      const float v = xr == nullptr ? r[i] : r[i] + xr[i];
      r[i] = v;
      sum += v * v;
    }
    sum = BlockSum(sum, scratch);
    const float scale = 1.0f / sqrtf(sum / static_cast<float>(width) + eps);
    OutT* o = out + t * out_stride;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      StoreOut(o + i, r[i] * scale * weight[i]);
    }
  }
}

}  // namespace

absl::Status LaunchAddRmsNorm(const CudaContext& ctx, const Tensor& x, const Tensor& weight,
                              float eps, const Tensor& residual, const Tensor& out) {
  const int64_t rows = residual.dim(0), width = residual.dim(1);
  if (rows == 0) return absl::OkStatus();
  const float* x_data = x.empty() ? nullptr : x.data<float>();
  const int64_t x_stride = x.empty() ? 0 : x.stride(0);
  cudaError_t launched = cudaSuccess;
  WithOutPointer(out, [&](auto* o) {
    launched = LaunchMaybePdl(ctx, AddRmsNormKernel<std::remove_pointer_t<decltype(o)>>,
                              dim3(RowGrid(rows)), dim3(kRowThreads), 0, x_data, x_stride,
                              weight.data<float>(), eps, residual.data<float>(),
                              residual.stride(0), o, out.stride(0), rows, width);
  });
  COIL_CUDA_RETURN_IF_ERROR(launched);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
