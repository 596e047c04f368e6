// Relu2 on the GPU: one block per row, out = max(x, 0)^2 as f32 or rounded to bf16 (the
// down_proj matmul's input rows, so the MLP needs no conversion pass between its matmuls).
// Each thread reads and writes the same columns, so out may be x itself. NaN stays NaN.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_kernels.cuh"

namespace coil::cuda {
namespace {

// No __restrict__: out may be x.
template <typename OutT>
__global__ void Relu2Kernel(const float* x, int64_t x_stride, OutT* out, int64_t out_stride,
                            int64_t rows, int64_t width) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* xr = x + t * x_stride;
    OutT* o = out + t * out_stride;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      const float v = xr[i];
      const float r = v < 0.0f ? 0.0f : v;
      StoreOut(o + i, r * r);
    }
  }
}

}  // namespace

absl::Status LaunchRelu2(const CudaContext& ctx, const Tensor& x, const Tensor& out) {
  const int64_t rows = x.dim(0), width = x.dim(1);
  WithOutPointer(out, [&](auto* o) {
    Relu2Kernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(x.data<float>(), x.stride(0), o,
                                                               out.stride(0), rows, width);
  });
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
