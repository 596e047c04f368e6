// Bf16Gemm's two forms. AMX: blocks of 32 x 32 outputs in four C tiles (two A tiles of 16
// rows, two B tiles of 16 columns), K in steps of 32. AVX-512 BF16: blocks of 4 rows x 64
// (or 16) columns in registers, one vdpbf16ps per k pair, row and 16 columns.
#include "kernels/cpu/bf16_gemm.h"

#include <cstring>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers read _mm512_undefined_*() values, which -Werror rejects.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "kernels/cpu/amx.h"
#include "kernels/cpu/cpu_features.h"

namespace coil {
namespace {

#if defined(__x86_64__)
#define COIL_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

template <bool kTwoM, bool kTwoN>
COIL_AMX void AmxBlock(int64_t k_steps, const uint16_t* a, int64_t lda, const uint32_t* b,
                       int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const int64_t a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;
  if (accumulate) {
    _tile_loadd(0, c, c_stride);
    if constexpr (kTwoN) _tile_loadd(1, c + 16, c_stride);
    if constexpr (kTwoM) _tile_loadd(2, c + 16 * ldc, c_stride);
    if constexpr (kTwoM && kTwoN) _tile_loadd(3, c + 16 * ldc + 16, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t ks = 0; ks < k_steps; ++ks) {
    const uint32_t* bk = b + 16 * ks * ldb;
    _tile_loadd(4, a + 32 * ks, a_stride);
    _tile_loadd(6, bk, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTwoM) {
      _tile_loadd(5, a + 16 * lda + 32 * ks, a_stride);
      _tile_dpbf16ps(2, 5, 6);
    }
    if constexpr (kTwoN) {
      _tile_loadd(7, bk + 16, b_stride);
      _tile_dpbf16ps(1, 4, 7);
      if constexpr (kTwoM) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, c_stride);
  if constexpr (kTwoN) _tile_stored(1, c + 16, c_stride);
  if constexpr (kTwoM) _tile_stored(2, c + 16 * ldc, c_stride);
  if constexpr (kTwoM && kTwoN) _tile_stored(3, c + 16 * ldc + 16, c_stride);
}

COIL_AMX void AmxGemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                      const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const int64_t k_steps = k / 32;
  for (int64_t m0 = 0; m0 < m; m0 += 32) {
    const bool two_m = m0 + 16 < m;
    for (int64_t n0 = 0; n0 < n; n0 += 32) {
      const bool two_n = n0 + 16 < n;
      const uint16_t* ab = a + m0 * lda;
      const uint32_t* bb = b + n0;
      float* cb = c + m0 * ldc + n0;
      if (two_m && two_n) {
        AmxBlock<true, true>(k_steps, ab, lda, bb, ldb, cb, ldc, accumulate);
      } else if (two_m) {
        AmxBlock<true, false>(k_steps, ab, lda, bb, ldb, cb, ldc, accumulate);
      } else if (two_n) {
        AmxBlock<false, true>(k_steps, ab, lda, bb, ldb, cb, ldc, accumulate);
      } else {
        AmxBlock<false, false>(k_steps, ab, lda, bb, ldb, cb, ldc, accumulate);
      }
    }
  }
}

inline uint32_t PairAt(const uint16_t* row, int64_t j) {
  uint32_t word;
  std::memcpy(&word, row + 2 * j, sizeof(word));
  return word;
}

// R rows x NV vectors of 16 columns.
template <int R, int NV>
COIL_AVX512_BF16 void Avx512Block(int64_t pairs, const uint16_t* a, int64_t lda, const uint32_t* b,
                                  int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t j = 0; j < pairs; ++j) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + j * ldb + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(PairAt(a + r * lda, j)));
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

void Avx512Gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* b,
                int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const int64_t pairs = k / 2;
  for (int64_t m0 = 0; m0 < m; m0 += 4) {
    int64_t n0 = 0;
    for (; n0 + 64 <= n; n0 += 64) {
      Avx512Block<4, 4>(pairs, a + m0 * lda, lda, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate);
    }
    for (; n0 < n; n0 += 16) {
      Avx512Block<4, 1>(pairs, a + m0 * lda, lda, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate);
    }
  }
}
#endif  // __x86_64__

}  // namespace

Bf16Products HostBf16Products() {
  const CpuFeatures& cpu = CpuFeatures::Get();
  if (cpu.amx_bf16) return Bf16Products::kAmx;
  if (cpu.avx512_bf16) return Bf16Products::kAvx512;
  return Bf16Products::kNone;
}

Bf16GemmScope::Bf16GemmScope(Bf16Products form) : amx_(form == Bf16Products::kAmx) {
#if defined(__x86_64__)
  if (amx_) ConfigureFullTiles();
#endif
}

Bf16GemmScope::~Bf16GemmScope() {
#if defined(__x86_64__)
  if (amx_) ReleaseTiles();
#endif
}

void Bf16Gemm(Bf16Products form, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
              const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
#if defined(__x86_64__)
  if (form == Bf16Products::kAmx) {
    AmxGemm(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  } else {
    Avx512Gemm(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
#else
  (void)form, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc,
      (void)accumulate;
#endif
}

}  // namespace coil
