// K/V rows into their pages: a copy (f32 cache) or a round to nearest even (bf16 cache),
// one row of KVH * Dh values per token. Rows touch disjoint slots (the batch's invariant),
// so rows split across threads freely; the reference mode is the same loop on one thread.
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {

void CpuKvCacheWrite(const CpuContext& ctx, const Tensor& k, const Tensor& v,
                     const PagedKvBatch& batch, const Tensor& k_cache, const Tensor& v_cache) {
  const int64_t rows = k.dim(0), width = k.dim(1), block_size = batch.block_size;
  const bool bf16 = k_cache.dtype() == DType::kBF16;
  const size_t elem = DTypeSize(k_cache.dtype());
  auto write = [&](int64_t begin, int64_t end) {
    int s = 0;
    for (int64_t t = begin; t < end; ++t) {
      while (batch.cu_seqlens[s + 1] <= t) ++s;
      const int64_t p = batch.start_positions[s] + (t - batch.cu_seqlens[s]);
      const int64_t slot = int64_t{batch.page(s, p)} * block_size + p % block_size;
      for (const auto& [src, cache] :
           {std::pair<const Tensor*, const Tensor*>{&k, &k_cache}, {&v, &v_cache}}) {
        char* dst = static_cast<char*>(cache->raw()) + slot * width * elem;
        if (bf16) {
          NarrowToBf16(RowF32(*src, t), reinterpret_cast<uint16_t*>(dst), width);
        } else {
          std::memcpy(dst, RowF32(*src, t), width * sizeof(float));
        }
      }
    }
  };
  if (ctx.use_ref) {
    write(0, rows);
  } else {
    ctx.pool->ParallelFor(rows, 1, write);
  }
}

}  // namespace coil
