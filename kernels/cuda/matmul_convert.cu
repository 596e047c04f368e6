// The 16-bit copy of a matmul's activations: one block per row of x converts its K floats
// to bf16, or to an f16 pair (high part and remainder), at a padded leading dimension.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/row_kernels.cuh"

namespace coil::cuda {
namespace {

__global__ void RowsToBf16Kernel(const float* __restrict__ x, int64_t x_stride, int64_t rows,
                                 int64_t k, __nv_bfloat16* __restrict__ out, int64_t ld) {
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const float* src = x + m * x_stride;
    __nv_bfloat16* dst = out + m * ld;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) dst[i] = __float2bfloat16_rn(src[i]);
  }
}

// bf16 rows copied to the aligned leading dimension (rows whose start or stride cuBLASLt
// could not read in place).
__global__ void CopyBf16RowsKernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                                   int64_t rows, int64_t k, __nv_bfloat16* __restrict__ out,
                                   int64_t ld) {
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) out[m * ld + i] = x[m * x_stride + i];
  }
}

__global__ void RowsToF16PairKernel(const float* __restrict__ x, int64_t x_stride, int64_t rows,
                                    int64_t k, __half* __restrict__ hi, __half* __restrict__ lo,
                                    int64_t ld) {
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const float* src = x + m * x_stride;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      const float v = src[i];
      const __half h = __float2half_rn(v);
      // v - h is exact in f32 (h is v rounded to 11 bits, within a factor 2 of it); its f16
      // rounding keeps the next 11 bits.
      hi[m * ld + i] = h;
      lo[m * ld + i] = __float2half_rn(v - __half2float(h));
    }
  }
}

}  // namespace

absl::Status LaunchRowsToHalf(const CudaContext& ctx, const Tensor& x, DType to, void* hi, void* lo,
                              int64_t ld) {
  const int64_t rows = x.dim(0), k = x.dim(1);
  if (rows == 0) return absl::OkStatus();
  if (x.dtype() == DType::kBF16) {
    CopyBf16RowsKernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(
        static_cast<const __nv_bfloat16*>(x.raw()), x.stride(0), rows, k,
        static_cast<__nv_bfloat16*>(hi), ld);
  } else if (to == DType::kBF16) {
    RowsToBf16Kernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(
        x.data<float>(), x.stride(0), rows, k, static_cast<__nv_bfloat16*>(hi), ld);
  } else {
    RowsToF16PairKernel<<<RowGrid(rows), kRowThreads, 0, ctx.stream>>>(
        x.data<float>(), x.stride(0), rows, k, static_cast<__half*>(hi), static_cast<__half*>(lo),
        ld);
  }
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
