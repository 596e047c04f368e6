// Argmax per row: the largest value and its lowest index (NaN never wins); each rank's
// (value, index) pair is what greedy sampling merges across vocab shards.
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

// Lane j keeps the first maximum among indices = j mod 16; the lanes are then merged
// preferring the larger value and, among equals, the lower index: the same answer as a
// scan from the left.
COIL_VECTORIZE void LaneMax(const float* v, int64_t n, float* best, int32_t* index) {
  for (int j = 0; j < 16; ++j) {
    best[j] = -std::numeric_limits<float>::infinity();
    index[j] = -1;
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) {
      const bool better = v[i + j] > best[j];
      best[j] = better ? v[i + j] : best[j];
      index[j] = better ? static_cast<int32_t>(i + j) : index[j];
    }
  }
  for (int j = 0; i + j < n; ++j) {
    if (v[i + j] > best[j]) {
      best[j] = v[i + j];
      index[j] = static_cast<int32_t>(i + j);
    }
  }
}

#if defined(__x86_64__)
// The same lanes as LaneMax with AVX-512 compares and blends (a strict > keeps the first).
__attribute__((target("avx512f"))) void LaneMaxAvx512(const float* v, int64_t n, float* best,
                                                      int32_t* index) {
  __m512 b = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i idx = _mm512_set1_epi32(-1);
  __m512i cur = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(x, b, _CMP_GT_OQ);
    b = _mm512_mask_mov_ps(b, gt, x);
    idx = _mm512_mask_mov_epi32(idx, gt, cur);
    cur = _mm512_add_epi32(cur, step);
  }
  _mm512_storeu_ps(best, b);
  _mm512_storeu_si512(index, idx);
  for (int j = 0; i + j < n; ++j) {
    if (v[i + j] > best[j]) {
      best[j] = v[i + j];
      index[j] = static_cast<int32_t>(i + j);
    }
  }
}
#endif

}  // namespace

void CpuArgmax(const CpuContext& ctx, const Tensor& logits, const Tensor& ids,
               const Tensor& values) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* v = RowF32(logits, t);
      float best_value = -std::numeric_limits<float>::infinity();
      int32_t best_index = -1;
      if (ctx.use_ref) {
        for (int64_t i = 0; i < vocab; ++i) {
          if (v[i] > best_value) {
            best_value = v[i];
            best_index = static_cast<int32_t>(i);
          }
        }
      } else {
        float best[16];
        int32_t index[16];
#if defined(__x86_64__)
        if (CpuFeatures::Get().avx512) {
          LaneMaxAvx512(v, vocab, best, index);
        } else {
          LaneMax(v, vocab, best, index);
        }
#else
        LaneMax(v, vocab, best, index);
#endif
        for (int j = 0; j < 16; ++j) {
          if (index[j] < 0) continue;
          if (best[j] > best_value || (best[j] == best_value && index[j] < best_index) ||
              best_index < 0) {
            best_value = best[j];
            best_index = index[j];
          }
        }
      }
      // A row of -inf and NaN only: index 0, value -inf.
      ids.data<int32_t>()[t * ids.stride(0)] = best_index < 0 ? 0 : best_index;
      values.data<float>()[t * values.stride(0)] = best_value;
    }
  });
}

}  // namespace coil
