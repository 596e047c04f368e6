// out = max(x, 0)^2 per element (an f32 out may be x itself: each element is read, then
// written); a bf16 out is the f32 value rounded to nearest even (FloatToBf16's bits). NaN
// stays NaN, as in torch.relu. An AVX-512 form where the CPU has it (the portable loop's
// branches keep GCC from vectorizing it), the same bits.
#include <cstring>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers read _mm512_undefined_*() values, which -Werror rejects.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

inline float Relu2Value(float x) {
  const float r = x < 0.0f ? 0.0f : x;
  return r * r;
}

void Relu2Row(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Relu2Value(x[i]);
}

void Relu2RowBf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(Relu2Value(x[i]));
}

#if defined(__x86_64__)
#define COIL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// max(0, x) returns x when x is NaN (the second operand), as x < 0 ? 0 : x does.
COIL_AVX512 inline __m512 Relu2Vector(__m512 x) {
  const __m512 r = _mm512_max_ps(_mm512_setzero_ps(), x);
  return _mm512_mul_ps(r, r);
}

COIL_AVX512 void Relu2RowAvx512(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, Relu2Vector(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// FloatToBf16 on 16 lanes: u + 0x7fff + (bit 16 of u), the high half; NaN keeps its high
// half with the quiet bit set.
COIL_AVX512 void Relu2RowBf16Avx512(const float* x, uint16_t* out, int64_t n) {
  const __m512i round = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i u = _mm512_castps_si512(Relu2Vector(_mm512_maskz_loadu_ps(m, x + i)));
    const __m512i bit = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i h = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(round, bit)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    h = _mm512_mask_or_epi32(h, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(h));
  }
}
#endif  // __x86_64__

}  // namespace

void CpuRelu2(const CpuContext& ctx, const Tensor& x, const Tensor& out) {
  const int64_t rows = x.dim(0), width = x.dim(1);
  const bool bf16 = out.dtype() == DType::kBF16;
#if defined(__x86_64__)
  const bool avx512 = !ctx.use_ref && CpuFeatures::Get().avx512;
#else
  const bool avx512 = false;
#endif
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
#if defined(__x86_64__)
      if (avx512) {
        if (bf16) {
          Relu2RowBf16Avx512(RowF32(x, t), RowBf16(out, t), width);
        } else {
          Relu2RowAvx512(RowF32(x, t), RowF32(out, t), width);
        }
        continue;
      }
#endif
      if (bf16) {
        Relu2RowBf16(RowF32(x, t), RowBf16(out, t), width);
      } else {
        Relu2Row(RowF32(x, t), RowF32(out, t), width);
      }
    }
  };
  if (ctx.use_ref) {
    run(0, rows);
  } else {
    ctx.pool->ParallelFor(rows, 1, run);
  }
}

}  // namespace coil
