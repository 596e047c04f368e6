// A 16 x 16 transpose of 32-bit values in AVX-512 registers, for the kernels that change
// a block's layout on the way to or from the bf16 products (matmul.cc, ssm_scan.cc).
#ifndef COIL_KERNELS_CPU_TRANSPOSE16_H_
#define COIL_KERNELS_CPU_TRANSPOSE16_H_

#if defined(__x86_64__)
#include <immintrin.h>

namespace coil {

// r[i][j] becomes r[j][i]; the values are moved, never computed on.
__attribute__((target("avx512f"))) inline void Transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Row 4 i + j now holds columns j, j + 4, j + 8, j + 12 of rows 4 i .. 4 i + 3, one
  // 128-bit lane per column; the lanes are gathered across the four groups of rows.
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
  }
}

}  // namespace coil

#endif  // __x86_64__
#endif  // COIL_KERNELS_CPU_TRANSPOSE16_H_
