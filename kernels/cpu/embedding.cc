// Embedding lookup: one row of the (possibly vocab-sharded) table per token, as f32.
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

COIL_VECTORIZE void Bf16RowToF32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BitsFloat(static_cast<uint32_t>(src[i]) << 16);
}

void F16RowToF32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToFloat(src[i]);
}

}  // namespace

void CpuEmbedding(const CpuContext& ctx, const Tensor& ids, const Tensor& table,
                  int64_t vocab_offset, const Tensor& out) {
  const int64_t rows = ids.dim(0), width = table.dim(1), vocab = table.dim(0);
  const int32_t* id = ids.data<int32_t>();
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* dst = RowF32(out, t);
      const int64_t row = static_cast<int64_t>(id[t]) - vocab_offset;
      if (row < 0 || row >= vocab) {
        std::memset(dst, 0, width * sizeof(float));
        continue;
      }
      const char* src = static_cast<const char*>(table.raw()) +
                        row * table.stride(0) * static_cast<int64_t>(DTypeSize(table.dtype()));
      switch (table.dtype()) {
        case DType::kF32:
          std::memcpy(dst, src, width * sizeof(float));
          break;
        case DType::kBF16:
          Bf16RowToF32(reinterpret_cast<const uint16_t*>(src), dst, width);
          break;
        default:
          F16RowToF32(reinterpret_cast<const uint16_t*>(src), dst, width);
          break;
      }
    }
  });
}

}  // namespace coil
