// Argmax per row on the GPU: one block of kArgmaxThreads per row. Each thread scans its
// strided columns left to right, then the block merges the per-thread candidates by
// BetterOf (argmax_pair.h), whose total order makes the result independent of the merge
// tree: the lowest index of the maximum; NaN never wins; a row without a value above -inf
// gives index 0 and value -inf, as on the CPU.
#include <cmath>
#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/argmax_pair.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_kernels.cuh"

namespace coil::cuda {
namespace {

// A wide block: a decode step has one row per sequence and V near 50k columns.
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxWarps = kArgmaxThreads / 32;

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxKernel(const float* __restrict__ logits, int64_t logits_stride, int64_t rows,
                 int64_t vocab, int32_t* __restrict__ ids, int64_t ids_stride,
                 float* __restrict__ values, int64_t values_stride) {
  __shared__ ArgmaxPair partial[kArgmaxWarps];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* v = logits + t * logits_stride;
    ArgmaxPair best{-INFINITY, -1};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      ScanStep(best, v[i], static_cast<int32_t>(i));
    }
    best = BlockBest(
        best, partial,
        [](ArgmaxPair p, int offset) {
          return ArgmaxPair{__shfl_xor_sync(0xffffffffu, p.value, offset),
                            __shfl_xor_sync(0xffffffffu, p.index, offset)};
        },
        [](ArgmaxPair a, ArgmaxPair b) { return BetterOf(a, b); });
    if (threadIdx.x == 0) {
      ids[t * ids_stride] = best.index < 0 ? 0 : best.index;
      values[t * values_stride] = best.value;
    }
  }
}

}  // namespace

absl::Status LaunchArgmax(const CudaContext& ctx, const Tensor& logits, const Tensor& ids,
                          const Tensor& values) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return absl::OkStatus();
  if (vocab > int64_t{0x7fffffff}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits have ", vocab, " columns; argmax returns i32 ids, so at most 2^31 - 1"));
  }
  ArgmaxKernel<<<RowGrid(rows), kArgmaxThreads, 0, ctx.stream>>>(
      logits.data<float>(), logits.stride(0), rows, vocab, ids.data<int32_t>(), ids.stride(0),
      values.data<float>(), values.stride(0));
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
