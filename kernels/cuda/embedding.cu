// Embedding lookup on the GPU: one block per token copies (and widens to f32) its table
// row, or writes zeros for an id outside this shard's range. The table's rows may be
// strided, so the model also gathers rows of an f32 activation tensor with it.
#include <cuda_fp16.h>

#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_kernels.cuh"

namespace coil::cuda {
namespace {

template <DType kTable>
__device__ __forceinline__ float LoadAsFloat(const void* row, int64_t i) {
  if constexpr (kTable == DType::kF32) {
    return static_cast<const float*>(row)[i];
  } else if constexpr (kTable == DType::kBF16) {
    // bf16 is the upper half of an f32: exact, NaN payloads included (as on the CPU).
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(row)[i]) << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(row)[i]));
  }
}

template <DType kTable>
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const char* __restrict__ table,
                                int64_t vocab, int64_t table_row_bytes, int64_t vocab_offset,
                                float* __restrict__ out, int64_t out_stride, int64_t rows,
                                int64_t width) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    float* dst = out + t * out_stride;
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_offset;
    if (row < 0 || row >= vocab) {
      for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = 0.0f;
      continue;
    }
    const void* src = table + row * table_row_bytes;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = LoadAsFloat<kTable>(src, i);
  }
}

}  // namespace

absl::Status LaunchEmbedding(const CudaContext& ctx, const Tensor& ids, const Tensor& table,
                             int64_t vocab_offset, const Tensor& out) {
  const int64_t rows = ids.dim(0), vocab = table.dim(0), width = table.dim(1);
  if (rows == 0) return absl::OkStatus();
  const int64_t row_bytes = table.stride(0) * static_cast<int64_t>(DTypeSize(table.dtype()));
  const auto* ids_data = ids.data<int32_t>();
  const auto* table_data = static_cast<const char*>(table.raw());
  float* out_data = out.data<float>();
  const unsigned grid = RowGrid(rows);
  switch (table.dtype()) {
    case DType::kF32:
      EmbeddingKernel<DType::kF32><<<grid, kRowThreads, 0, ctx.stream>>>(
          ids_data, table_data, vocab, row_bytes, vocab_offset, out_data, out.stride(0), rows,
          width);
      break;
    case DType::kBF16:
      EmbeddingKernel<DType::kBF16><<<grid, kRowThreads, 0, ctx.stream>>>(
          ids_data, table_data, vocab, row_bytes, vocab_offset, out_data, out.stride(0), rows,
          width);
      break;
    default:
      EmbeddingKernel<DType::kF16><<<grid, kRowThreads, 0, ctx.stream>>>(
          ids_data, table_data, vocab, row_bytes, vocab_offset, out_data, out.stride(0), rows,
          width);
      break;
  }
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
