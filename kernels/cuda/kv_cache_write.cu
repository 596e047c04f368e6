// KvCacheWrite on the GPU: one block per row (rows strided over the grid), a thread per
// element of the row's kv_heads * head_dim, the row's sequence found by a binary search of
// cu_seqlens (device mirrors, so a captured graph reads each replay's positions and tables).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/paged_attention_tiles.h"

namespace coil::cuda {
namespace {

__global__ void KvCacheWriteKernel(KvWriteParams w, const int32_t* cu_seqlens, int32_t num_seqs,
                                   int64_t rows) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    // The row's sequence: the last s with cu_seqlens[s] <= t (binary search).
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (cu_seqlens[mid] <= t) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < w.width;
         i += static_cast<int32_t>(blockDim.x)) {
      KvWriteElement(w, lo, cu_seqlens[lo], static_cast<int32_t>(t), i);
    }
  }
}

}  // namespace

absl::Status LaunchKvCacheWrite(const CudaContext& ctx, const Tensor& k, const Tensor& v,
                                const PagedKvBatch& batch, const Tensor& k_cache,
                                const Tensor& v_cache) {
  const int64_t rows = k.dim(0);
  KvWriteParams w;
  w.k = k.data<float>();
  w.k_stride = k.stride(0);
  w.v = v.data<float>();
  w.v_stride = v.stride(0);
  w.k_cache = k_cache.raw();
  w.v_cache = v_cache.raw();
  w.bf16 = k_cache.dtype() == DType::kBF16;
  w.width = static_cast<int32_t>(k.dim(1));
  w.block_size = batch.block_size;
  w.start_positions = batch.device_start_positions;
  w.cu_blocks = batch.device_cu_blocks;
  w.block_table = batch.device_block_table;
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(256, (w.width + 31) / 32 * 32));
  KvCacheWriteKernel<<<static_cast<unsigned>(std::min<int64_t>(rows, 0x7fffffff)), threads, 0,
                       ctx.stream>>>(w, batch.device_cu_seqlens, batch.num_seqs(), rows);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
