// AMX tiles for the bf16 products (matmul.cc, bf16_gemm.cc): the one tile shape every
// kernel here uses, 16 rows of 64 bytes (A: 16 x 32 bf16, B: 16 pairs of rows x 16 columns
// in pair-interleaved form, C: 16 x 16 fp32), loaded once per kernel call. Callers check
// CpuFeatures::amx_bf16 first (the CPU has AMX and the kernel granted the tile data).
// A tdpbf16ps sums each C element over its k pairs in ascending order, so, like the
// AVX-512 kernels, an element's value never depends on the other rows or columns computed.
#ifndef COIL_KERNELS_CPU_AMX_H_
#define COIL_KERNELS_CPU_AMX_H_

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

#define COIL_AMX \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace coil {

// The tile configuration (palette 1) in the layout ldtilecfg reads.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Configures tiles 0-7 as 16 rows x 64 bytes (and zeroes them). Not GCC 12's
// _tile_loadconfig: its asm names only the first 8 bytes of the configuration as read, so
// the compiler may drop the stores of the rest.
COIL_AMX inline void ConfigureFullTiles() {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

// Ends this thread's use of the tiles (their state is then no longer saved on switches).
COIL_AMX inline void ReleaseTiles() { _tile_release(); }

}  // namespace coil

#endif  // __x86_64__
#endif  // COIL_KERNELS_CPU_AMX_H_
