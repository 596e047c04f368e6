// y = x W^T with fp32 accumulation, W [N, K] stored f32, bf16 or f16.
// Batch invariance: every output element is one dot product whose order depends only on K:
// 16 lane partials over k (lane = k mod 16, or the k pair mod 32 for bf16), accumulated
// k-block by k-block, then folded in FoldLanes16's order. Tiling over rows and columns
// only decides which elements are computed together, never how, so row m of y is the same
// for any M (docs/ARCHITECTURE.md §6). With bf16 weights the x row is rounded to bf16 and
// the products taken by vdpbf16ps where the CPU has AVX-512 BF16. A CPU with AVX2 and FMA
// but no AVX-512 keeps the 16 lane partials in pairs of 8-wide registers (the AVX2 section).
// Where the CPU has AMX, bf16 weights (with K even) take the tiles instead, for every M: each
// element of y is then one sum over the k pairs in ascending order (the tile instruction's
// order), again whatever M, the tiling or the threads.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers read _mm512_undefined_*() values, which -Werror rejects.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "kernels/cpu/amx.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/transpose16.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

constexpr int kMr = 4;        // x rows per tile
constexpr int kNr = 4;        // W rows per tile
constexpr int64_t kMb = 256;  // x rows per cache block (L2)
constexpr int64_t kNb = 32;   // W rows per cache block (L1/L2), swept by every x tile

// Row m of x as the values a bf16 matmul multiplies: f32 x rounded to bf16, or bf16 x
// widened (the same values when x holds those roundings).
void Bf16RowValues(const Tensor& x, int64_t m, int64_t k_count, float* out) {
  if (x.dtype() == DType::kBF16) {
    const uint16_t* xr = RowBf16(x, m);
    for (int64_t k = 0; k < k_count; ++k) out[k] = Bf16ToFloat(xr[k]);
  } else {
    const float* xr = RowF32(x, m);
    for (int64_t k = 0; k < k_count; ++k) out[k] = Bf16ToFloat(FloatToBf16(xr[k]));
  }
}

// ---------------------------------------------------------------- reference
void MatmulRef(const Tensor& x, const Tensor& w, const Tensor& y, int64_t m_begin, int64_t m_end) {
  const int64_t n_count = w.dim(0), k_count = w.dim(1);
  std::vector<float> xrow(w.dtype() == DType::kBF16 ? static_cast<size_t>(k_count) : 0);
  for (int64_t m = m_begin; m < m_end; ++m) {
    const float* xr = w.dtype() == DType::kBF16 ? xrow.data() : RowF32(x, m);
    if (w.dtype() == DType::kBF16) Bf16RowValues(x, m, k_count, xrow.data());
    float* yr = RowF32(y, m);
    for (int64_t n = 0; n < n_count; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < k_count; ++k) {
        const int64_t i = n * k_count + k;
        double wv, xv = xr[k];
        switch (w.dtype()) {
          case DType::kBF16:
            wv = Bf16ToFloat(w.data<uint16_t>()[i]);  // xr holds the bf16 values
            break;
          case DType::kF16:
            wv = F16ToFloat(w.data<uint16_t>()[i]);
            break;
          default:
            wv = w.data<float>()[i];
        }
        acc += xv * wv;
      }
      yr[n] = static_cast<float>(acc);
    }
  }
}

// ---------------------------------------------------------------- portable
COIL_VECTORIZE float DotPortable(const float* x, const float* w, int64_t k_count) {
  float lanes[16] = {};
  int64_t k = 0;
  for (; k + 16 <= k_count; k += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += x[k + j] * w[k + j];
  }
  for (int j = 0; k + j < k_count; ++j) lanes[j] += x[k + j] * w[k + j];
  return FoldLanes16(lanes);
}

void MatmulPortable(const Tensor& x, const Tensor& w, const Tensor& y, int64_t n_begin,
                    int64_t n_end) {
  const int64_t m_count = x.dim(0), k_count = w.dim(1);
  std::vector<float> wrow(static_cast<size_t>(k_count)), xrow(static_cast<size_t>(k_count));
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t k = 0; k < k_count; ++k) {
      const int64_t i = n * k_count + k;
      wrow[k] = w.dtype() == DType::kF32    ? w.data<float>()[i]
                : w.dtype() == DType::kBF16 ? Bf16ToFloat(w.data<uint16_t>()[i])
                                            : F16ToFloat(w.data<uint16_t>()[i]);
    }
    for (int64_t m = 0; m < m_count; ++m) {
      const float* xr = xrow.data();
      if (w.dtype() == DType::kBF16) {
        Bf16RowValues(x, m, k_count, xrow.data());
      } else {
        xr = RowF32(x, m);
      }
      RowF32(y, m)[n] = DotPortable(xr, wrow.data(), k_count);
    }
  }
}

#if defined(__x86_64__)
#define COIL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define COIL_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// Folds four accumulators at once in FoldLanes16's order; returns their four sums.
COIL_AVX512 inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i first = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(first, v));
}

COIL_AVX512 inline void StoreSums(float* y, __m128 sums, int nr) {
  if (nr == 4) {
    _mm_storeu_ps(y, sums);
  } else {
    _mm_mask_storeu_ps(y, static_cast<__mmask8>((1u << nr) - 1), sums);
  }
}

// How the tiles fetch W ahead of use. kAhead (T0) and kAheadStream (NTA): a tile streams
// its own W rows and prefetches the tile kPrefetchTiles further on as it goes (below);
// kAheadStream where W is read once (a single tile of x rows: decode at a few rows), so its
// lines are fetched non-temporally and push less of what the step reads again (the recurrent
// state, the activations) out of the last-level cache. kByBlock: many x tiles sweep each
// block of W rows, so the tiles prefetch nothing and RunTiles spreads the next block's
// prefetch over the current block's tiles: W keeps streaming from memory evenly, where
// fetching it only while the first x tile sweeps the block stalls that sweep.
enum class WFetch { kAhead, kAheadStream, kByBlock };

// Prefetches the cache line of W element i. The address may lie past W's end (the last
// tiles'): it is formed as an integer, and a prefetch never faults.
template <DType WT, WFetch kFetch = WFetch::kAhead>
inline void PrefetchW(const void* w, int64_t i) {
  const int64_t bytes = WT == DType::kF32 ? sizeof(float) : sizeof(uint16_t);
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w) + i * bytes),
               kFetch == WFetch::kAheadStream ? _MM_HINT_NTA : _MM_HINT_T0);
}

// A thread's W rows are contiguous. Each tile prefetches, as it streams its NR rows of W,
// the tile kPrefetchTiles tiles further on (NR whole rows, the same bytes), in address order:
// each k step takes the next NR x 64 bytes of it. The models' rows (1.5-3 KB) end before the
// hardware prefetchers reach full stride, and prefetching row by row (one line of each row
// per step) gains almost nothing: the linear order is what lets them follow
// (docs/kernels.md).
constexpr int kPrefetchTiles = 2;

// How a single x tile fetches W (decode at a few rows): streamed, so each line is read once.
constexpr WFetch kSingleTileFetch = WFetch::kAheadStream;

// MR x NR tile, bf16 x (padded with zeros to a multiple of 32) times bf16 W rows.
template <int MR, int NR, WFetch kFetch>
COIL_AVX512_BF16 void TileBf16(const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t k_count,
                               float* y, int64_t ldy) {
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t ahead = kPrefetchTiles * NR * k_count;
  int64_t k = 0;
  for (; k + 32 <= k_count; k += 32) {
    if constexpr (kFetch != WFetch::kByBlock) {
      for (int j = 0; j < NR; ++j) PrefetchW<DType::kBF16, kFetch>(w, ahead + NR * k + 32 * j);
    }
    __m512i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_si512(w + j * k_count + k);
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(xb + i * ldx + k);
      for (int j = 0; j < NR; ++j) {
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
      }
    }
  }
  if (k < k_count) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (k_count - k)) - 1);
    __m512i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_epi16(mask, w + j * k_count + k);
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(xb + i * ldx + k);
      for (int j = 0; j < NR; ++j) {
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    StoreSums(y + i * ldy, Reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), NR);
  }
}

template <DType WT>
COIL_AVX512 inline __m512 LoadW16(const void* w, int64_t i) {
  if constexpr (WT == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i)));
  }
}

template <DType WT>
COIL_AVX512 inline __m512 LoadW16Masked(const void* w, int64_t i, __mmask16 mask) {
  if constexpr (WT == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + i);
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + i));
  }
}

// MR x NR tile, f32 x (padded to a multiple of 16) times f32 or f16 W rows, with FMAs.
template <DType WT, int MR, int NR, WFetch kFetch>
COIL_AVX512 void TileF32(const float* xp, int64_t ldx, const void* w, int64_t k_count, float* y,
                         int64_t ldy) {
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t ahead = kPrefetchTiles * NR * k_count;
  int64_t k = 0;
  for (; k + 16 <= k_count; k += 16) {
    if constexpr (kFetch != WFetch::kByBlock) {
      for (int j = 0; j < NR; ++j) PrefetchW<WT, kFetch>(w, ahead + NR * k + 16 * j);
    }
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = LoadW16<WT>(w, j * k_count + k);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(xp + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < k_count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k_count - k)) - 1);
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = LoadW16Masked<WT>(w, j * k_count + k, mask);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(xp + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    StoreSums(y + i * ldy, Reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), NR);
  }
}

using Bf16TileFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t);
using F32TileFn = void (*)(const float*, int64_t, const void*, int64_t, float*, int64_t);

// [WFetch][mr - 1][nr - 1] -> the tile kernel for the edge sizes.
#define COIL_ROW_BF16(MR, F) \
  { &TileBf16<MR, 1, F>, &TileBf16<MR, 2, F>, &TileBf16<MR, 3, F>, &TileBf16<MR, 4, F> }
#define COIL_BF16(F) \
  { COIL_ROW_BF16(1, F), COIL_ROW_BF16(2, F), COIL_ROW_BF16(3, F), COIL_ROW_BF16(4, F) }
constexpr Bf16TileFn kBf16Tiles[3][4][4] = {
    COIL_BF16(WFetch::kAhead), COIL_BF16(WFetch::kAheadStream), COIL_BF16(WFetch::kByBlock)};
#undef COIL_BF16
#undef COIL_ROW_BF16
#define COIL_ROW_F32(WT, MR, F) \
  { &TileF32<WT, MR, 1, F>, &TileF32<WT, MR, 2, F>, &TileF32<WT, MR, 3, F>, &TileF32<WT, MR, 4, F> }
#define COIL_F32(WT, F) \
  { COIL_ROW_F32(WT, 1, F), COIL_ROW_F32(WT, 2, F), COIL_ROW_F32(WT, 3, F), COIL_ROW_F32(WT, 4, F) }
constexpr F32TileFn kF32Tiles[3][4][4] = {COIL_F32(DType::kF32, WFetch::kAhead),
                                          COIL_F32(DType::kF32, WFetch::kAheadStream),
                                          COIL_F32(DType::kF32, WFetch::kByBlock)};
constexpr F32TileFn kF16Tiles[3][4][4] = {COIL_F32(DType::kF16, WFetch::kAhead),
                                          COIL_F32(DType::kF16, WFetch::kAheadStream),
                                          COIL_F32(DType::kF16, WFetch::kByBlock)};
#undef COIL_F32
#undef COIL_ROW_F32

COIL_AVX512_BF16 void RowToBf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

// Runs the tile kernels over all rows and W rows [n_begin, n_end): x in blocks of kMb rows
// (L2), W in blocks of kNb rows; each x tile (L1) is swept over the W block's tiles. One x
// tile streams W through the tiles (WFetch::kAhead*); more take the kByBlock tiles, and
// each of the block's tiles prefetches its share of the next block's W lines.
template <typename XT, typename WT, typename TileFn>
void RunTiles(const XT* xpacked, int64_t ldx, int64_t m_count, const WT* w, int64_t ldw,
              int64_t k_count, const Tensor& y, int64_t n_begin, int64_t n_end,
              const TileFn (&tiles)[3][4][4], WFetch single_tile) {
  const bool by_block = m_count > kMr;
  const auto& kernels = tiles[static_cast<int>(by_block ? WFetch::kByBlock : single_tile)];
  const int64_t row_bytes = ldw * static_cast<int64_t>(sizeof(WT));
  for (int64_t m0 = 0; m0 < m_count; m0 += kMb) {
    const int64_t m1 = std::min(m_count, m0 + kMb);
    const int64_t m_tiles = (m1 - m0 + kMr - 1) / kMr;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kNb) {
      const int64_t n1 = std::min(n_end, n0 + kNb);
      const int64_t block_tiles = m_tiles * ((n1 - n0 + kNr - 1) / kNr);
      // The next block of this thread's rows (after the last, the first again where the
      // next x block sweeps it), in lines.
      const bool wrap = n1 >= n_end;
      const int64_t next0 = wrap ? n_begin : n1;
      const int64_t next_rows =
          by_block && !(wrap && m1 >= m_count) ? std::min(n_end, next0 + kNb) - next0 : 0;
      const char* next = reinterpret_cast<const char*>(w + next0 * ldw);
      const int64_t lines = (next_rows * row_bytes + 63) / 64;
      int64_t tile = 0;
      for (int64_t m = m0; m < m1; m += kMr) {
        const int mr = static_cast<int>(std::min<int64_t>(kMr, m1 - m));
        for (int64_t n = n0; n < n1; n += kNr, ++tile) {
          for (int64_t line = tile * lines / block_tiles; line < (tile + 1) * lines / block_tiles;
               ++line) {
            _mm_prefetch(next + 64 * line, _MM_HINT_T0);
          }
          const int nr = static_cast<int>(std::min<int64_t>(kNr, n1 - n));
          kernels[mr - 1][nr - 1](xpacked + m * ldx, ldx, w + n * ldw, k_count, RowF32(y, m) + n,
                                  y.stride(0));
        }
      }
    }
  }
}

// A 64-byte aligned, zero-filled scratch array (x rows packed for the tiles).
template <typename T>
struct AlignedArray {
  explicit AlignedArray(int64_t n)
      : data(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))) {
    std::memset(data.get(), 0, n * sizeof(T));
  }
  T* get() const { return data.get(); }
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data;
};

// ---------------------------------------------------------------- AMX (bf16 weights)
// y^T = W x^T on the tiles: A = 16 rows of W x 32 k (read in place, or from a zero-padded
// copy at the N and K edges), B = 16 rows of x as 16 k pairs x 16 rows (xv, below), C = 16
// W rows x 16 x rows, transposed into y. Blocks of 32 W rows x 32 x rows take 4 C tiles.
constexpr int64_t kAmxRows = 32;  // W rows per block (two A tiles); the ParallelFor grain

// `count` bf16 of this thread's scratch, reused call after call.
uint16_t* RowScratchBf16(int64_t count) {
  thread_local std::vector<uint16_t> scratch;
  if (scratch.size() < static_cast<size_t>(count)) scratch.resize(static_cast<size_t>(count));
  return scratch.data();
}

// x rows [16 mb, 16 mb + 16) as B tiles: for k step ks, the tile's row j holds the pair
// (32 ks + 2 j, + 1) of each of the 16 rows, zeros past M and K:
// xv[((mb * k_pairs + 16 ks + j) * 16 + col) * 2 + (k & 1)]. `stage` holds 16 x kp bf16.
COIL_AVX512_BF16 void PackAmxRows(const Tensor& x, int64_t mb, int64_t m_count, int64_t k_count,
                                  int64_t kp, uint16_t* stage, uint16_t* xv) {
  std::memset(stage, 0, sizeof(uint16_t) * 16 * kp);
  for (int64_t r = 0; r < 16 && 16 * mb + r < m_count; ++r) {
    const int64_t m = 16 * mb + r;
    if (x.dtype() == DType::kBF16) {
      std::memcpy(stage + r * kp, RowBf16(x, m), sizeof(uint16_t) * k_count);
    } else {
      RowToBf16(RowF32(x, m), stage + r * kp, k_count);
    }
  }
  uint16_t* out = xv + mb * kp * 16;  // (kp / 2 pairs) x 16 columns x 2
  for (int64_t ks = 0; ks < kp / 32; ++ks) {
    __m512 rows[16];
    for (int r = 0; r < 16; ++r) rows[r] = _mm512_loadu_ps(stage + r * kp + 32 * ks);
    Transpose16x16(rows);
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(out + (16 * ks + j) * 32, rows[j]);
  }
}

// C tile (16 W rows x 16 x rows, in `c`) -> y[m, n0 .. n0 + n_valid) for its valid rows m.
COIL_AVX512 void StoreTransposed(const float* c, const Tensor& y, int64_t m0, int64_t m_valid,
                                 int64_t n0, int64_t n_valid) {
  __m512 rows[16];
  for (int r = 0; r < 16; ++r) rows[r] = _mm512_loadu_ps(c + 16 * r);
  Transpose16x16(rows);
  const __mmask16 mask = static_cast<__mmask16>(n_valid >= 16 ? 0xffffu : (1u << n_valid) - 1);
  for (int64_t j = 0; j < m_valid; ++j)
    _mm512_mask_storeu_ps(RowF32(y, m0 + j) + n0, mask, rows[j]);
}

// The k loop of one block: C tiles 0 (A 4 x B 6), 1 (4 x 7), 2 (5 x 6), 3 (5 x 7), the
// second A (W rows 16-31) and B (x rows 16-31) only where they exist.
// `ahead` (when not null) is the W block kPrefetchTiles blocks further on (32 whole rows,
// contiguous): each k step prefetches the next 32 lines of it in address order, as
// TileBf16 does.
template <bool kTwoA, bool kTwoB>
COIL_AMX void AmxBlock(const uint16_t* a, int64_t lda, const uint16_t* b0, int64_t k_steps,
                       const uint16_t* ahead) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint16_t* b1 = b0 + k_steps * 16 * 32;
  for (int64_t ks = 0; ks < k_steps; ++ks) {
    if (ahead != nullptr) {
      for (int64_t r = 0; r < kAmxRows; ++r)
        PrefetchW<DType::kBF16>(ahead, 32 * (kAmxRows * ks + r));
    }
    _tile_loadd(4, a + 32 * ks, lda * 2);
    _tile_loadd(6, b0 + ks * 16 * 32, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTwoA) {
      _tile_loadd(5, a + 16 * lda + 32 * ks, lda * 2);
      _tile_dpbf16ps(2, 5, 6);
    }
    if constexpr (kTwoB) {
      _tile_loadd(7, b1 + ks * 16 * 32, 64);
      _tile_dpbf16ps(1, 4, 7);
      if constexpr (kTwoA) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// y rows [0, M) x columns [n_begin, n_end) from the packed x (xv, kp bf16 per row).
COIL_AMX void AmxMatmulRange(const uint16_t* w, int64_t k_count, const uint16_t* xv, int64_t kp,
                             int64_t m_count, const Tensor& y, int64_t n_begin, int64_t n_end) {
  const int64_t m_blocks = (m_count + 15) / 16, k_steps = kp / 32;
  std::vector<uint16_t> panel;  // W rows at the edges, zero-padded to 32 x kp
  alignas(64) float c[4][256];
  ConfigureFullTiles();
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kAmxRows) {
    const int64_t rows = std::min(kAmxRows, n_end - n0);
    const uint16_t* a = w + n0 * k_count;
    int64_t lda = k_count;
    if (rows < kAmxRows || kp != k_count) {
      panel.assign(static_cast<size_t>(kAmxRows * kp), 0);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(panel.data() + r * kp, w + (n0 + r) * k_count, sizeof(uint16_t) * k_count);
      }
      a = panel.data();
      lda = kp;
    }
    const bool two_a = rows > 16;
    // Only the first pass over this block reads it from memory; the later ones find it
    // in the cache. The prefetched rows are whole rows of W: with kp == k_count.
    const int64_t ahead_row = n0 + kPrefetchTiles * kAmxRows;
    const uint16_t* ahead = kp == k_count && ahead_row < n_end ? w + ahead_row * k_count : nullptr;
    for (int64_t mb = 0; mb < m_blocks; mb += 2) {
      const bool two_b = mb + 1 < m_blocks;
      const uint16_t* b0 = xv + mb * kp * 16;
      const uint16_t* pf = mb == 0 ? ahead : nullptr;
      if (two_a && two_b) {
        AmxBlock<true, true>(a, lda, b0, k_steps, pf);
      } else if (two_a) {
        AmxBlock<true, false>(a, lda, b0, k_steps, pf);
      } else if (two_b) {
        AmxBlock<false, true>(a, lda, b0, k_steps, pf);
      } else {
        AmxBlock<false, false>(a, lda, b0, k_steps, pf);
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
      _tile_stored(3, c[3], 64);
      for (int i = 0; i < (two_a ? 2 : 1); ++i) {
        for (int j = 0; j < (two_b ? 2 : 1); ++j) {
          const int64_t m0 = 16 * (mb + j);
          StoreTransposed(c[2 * i + j], y, m0, std::min<int64_t>(16, m_count - m0), n0 + 16 * i,
                          std::min<int64_t>(16, rows - 16 * i));
        }
      }
    }
  }
  ReleaseTiles();
}

void AmxMatmul(const CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y) {
  const int64_t m_count = x.dim(0), n_count = w.dim(0), k_count = w.dim(1);
  const int64_t kp = (k_count + 31) / 32 * 32, m_blocks = (m_count + 15) / 16;
  AlignedArray<uint16_t> xv(m_blocks * 16 * kp);
  ctx.pool->ParallelFor(m_blocks, 1, [&](int64_t begin, int64_t end) {
    uint16_t* stage = RowScratchBf16(16 * kp);
    for (int64_t mb = begin; mb < end; ++mb)
      PackAmxRows(x, mb, m_count, k_count, kp, stage, xv.get());
  });
  const uint16_t* wp = w.data<uint16_t>();
  ctx.pool->ParallelFor(n_count, kAmxRows, [&](int64_t n_begin, int64_t n_end) {
    AmxMatmulRange(wp, k_count, xv.get(), kp, m_count, y, n_begin, n_end);
  });
}

// ---------------------------------------------------------------- AVX2 + FMA
// The same dot-product form in 8-wide registers: each output element keeps 16 lane partials
// (lane = k mod 16) in two registers, `lo` (lanes 0-7) and `hi` (8-15), and folds them in
// FoldLanes16's order. With bf16 weights x holds bf16 values, every product of two bf16
// values is exact in fp32, and so a fused multiply-add rounds as the portable loop's
// multiply then add: the bits are the portable path's. With f32 and f16 weights the tiles
// take FMAs in the AVX-512 path's order, and give its bits.
#define COIL_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr int kMr2 = 2;       // x rows per streaming tile (few rows: W read once, from memory)
constexpr int kNr2 = 3;       // W rows per streaming tile
constexpr int kMrS = 3;       // x rows per split tile (more rows: W widened first, reused from L1)
constexpr int kNrS = 4;       // W rows per split tile, widened together
constexpr int64_t kMbS = 96;  // x rows per cache block (L2), a multiple of kMrS
constexpr int64_t kPanelMinRows = 8;  // from this M on, the split tiles
constexpr int64_t kGrain2 = 12;       // W rows per ParallelFor grain: both tiles' multiple

template <DType WT>
COIL_AVX2 inline __m256 LoadW8(const void* w, int64_t i) {
  if constexpr (WT == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (WT == DType::kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  } else {
    const __m128i raw =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
}

// Sums of up to four elements' lane partials, in FoldLanes16's order: lanes i + (i + 8) is
// lo + hi, then + (i + 4) the two halves, then (i + 2) and (i + 1) across the transposed
// quarters.
COIL_AVX2 inline __m128 Fold4(const __m256* lo, const __m256* hi, int count) {
  __m128 q[4];
  for (int j = 0; j < 4; ++j) {
    if (j < count) {
      const __m256 a = _mm256_add_ps(lo[j], hi[j]);
      q[j] = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    } else {
      q[j] = _mm_setzero_ps();
    }
  }
  _MM_TRANSPOSE4_PS(q[0], q[1], q[2], q[3]);
  return _mm_add_ps(_mm_add_ps(q[0], q[2]), _mm_add_ps(q[1], q[3]));
}

COIL_AVX2 inline void StoreSums2(float* y, __m128 sums, int nr) {
  alignas(16) float v[4];
  _mm_store_ps(v, sums);
  for (int j = 0; j < nr; ++j) y[j] = v[j];
}

// MR x NR tile, f32 x (padded with zeros to a multiple of 16) times W rows of type WT,
// `ldw` elements apart. W's rows are contiguous (ldw = k_count) and streamed from memory, so
// the tile prefetches the tile kPrefetchTiles further on as the AVX-512 one does; kStream:
// non-temporally (PrefetchW).
template <DType WT, int MR, int NR, bool kStream>
COIL_AVX2 void TileAvx2(const float* xp, int64_t ldx, const void* w, int64_t ldw, int64_t k_count,
                        float* y, int64_t ldy) {
  __m256 lo[MR][NR], hi[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  }
  const int64_t ahead = kPrefetchTiles * NR * k_count;
  int64_t k = 0;
  for (; k + 16 <= k_count; k += 16) {
    for (int j = 0; j < NR; ++j) {
      PrefetchW<WT, kStream ? WFetch::kAheadStream : WFetch::kAhead>(w, ahead + NR * k + 16 * j);
    }
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xp + i * ldx + k);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = LoadW8<WT>(w, j * ldw + k);
      for (int i = 0; i < MR; ++i) lo[i][j] = _mm256_fmadd_ps(xv[i], wv, lo[i][j]);
    }
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xp + i * ldx + k + 8);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = LoadW8<WT>(w, j * ldw + k + 8);
      for (int i = 0; i < MR; ++i) hi[i][j] = _mm256_fmadd_ps(xv[i], wv, hi[i][j]);
    }
  }
  if (k < k_count) {
    // The last partial block: W's tail copied into zeros (x is zero there already).
    using Elem = std::conditional_t<WT == DType::kF32, float, uint16_t>;
    Elem tail[NR][16] = {};
    for (int j = 0; j < NR; ++j) {
      std::memcpy(tail[j], static_cast<const Elem*>(w) + j * ldw + k,
                  sizeof(Elem) * static_cast<size_t>(k_count - k));
    }
    for (int half = 0; half < 2; ++half) {
      __m256 xv[MR];
      for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xp + i * ldx + k + 8 * half);
      for (int j = 0; j < NR; ++j) {
        const __m256 wv = LoadW8<WT>(tail[j], 8 * half);
        for (int i = 0; i < MR; ++i) {
          if (half == 0) {
            lo[i][j] = _mm256_fmadd_ps(xv[i], wv, lo[i][j]);
          } else {
            hi[i][j] = _mm256_fmadd_ps(xv[i], wv, hi[i][j]);
          }
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) StoreSums2(y + i * ldy, Fold4(lo[i], hi[i], NR), NR);
}

using Avx2TileFn = void (*)(const float*, int64_t, const void*, int64_t, int64_t, float*, int64_t);

// [mr - 1][nr - 1] -> the tile kernel for the edge sizes.
template <DType WT, bool kStream>
struct Avx2Tiles {
  static constexpr Avx2TileFn kTiles[kMr2][kNr2] = {
      {&TileAvx2<WT, 1, 1, kStream>, &TileAvx2<WT, 1, 2, kStream>, &TileAvx2<WT, 1, 3, kStream>},
      {&TileAvx2<WT, 2, 1, kStream>, &TileAvx2<WT, 2, 2, kStream>, &TileAvx2<WT, 2, 3, kStream>}};
};

// The split layout of a row padded to ldx (a multiple of 16) floats: the lanes 0-7 of every
// 16-block first, then the lanes 8-15, so each lane half is one contiguous run of ldx / 2.
COIL_AVX2 inline void SplitHalves(const float* row, int64_t ldx, float* out) {
  const int64_t half = ldx / 2;
  for (int64_t b = 0; b < ldx / 16; ++b) {
    _mm256_storeu_ps(out + 8 * b, _mm256_loadu_ps(row + 16 * b));
    _mm256_storeu_ps(out + half + 8 * b, _mm256_loadu_ps(row + 16 * b + 8));
  }
}

// W rows [n0, n1) widened to fp32, zero-padded to ldx and split (SplitHalves), in one pass.
template <DType WT>
COIL_AVX2 void WidenSplit(const void* w, int64_t k_count, int64_t n0, int64_t n1, int64_t ldx,
                          float* panel) {
  using Elem = std::conditional_t<WT == DType::kF32, float, uint16_t>;
  const int64_t half = ldx / 2, whole = k_count / 16 * 16;
  for (int64_t n = n0; n < n1; ++n) {
    const Elem* src = static_cast<const Elem*>(w) + n * k_count;
    float* dst = panel + (n - n0) * ldx;
    for (int64_t k = 0; k < whole; k += 16) {
      _mm256_storeu_ps(dst + k / 2, LoadW8<WT>(src, k));
      _mm256_storeu_ps(dst + half + k / 2, LoadW8<WT>(src, k + 8));
    }
    if (whole < ldx) {
      alignas(32) float tail[16] = {};
      for (int64_t k = whole; k < k_count; ++k) {
        if constexpr (WT == DType::kF32) {
          tail[k - whole] = src[k];
        } else if constexpr (WT == DType::kF16) {
          tail[k - whole] = F16ToFloat(src[k]);
        } else {
          tail[k - whole] = Bf16ToFloat(src[k]);
        }
      }
      std::memcpy(dst + whole / 2, tail, sizeof(float) * 8);
      std::memcpy(dst + half + whole / 2, tail + 8, sizeof(float) * 8);
    }
  }
}

// MR x NR tile over split rows: the lane half 0-7 over its contiguous run, then 8-15, one
// register per element in each pass (so twice the elements of the streaming tile in the same
// registers). Each lane partial still takes its k in ascending order by FMA, so the sums, and
// the fold, are the streaming tile's bit for bit.
template <int MR, int NR>
COIL_AVX2 void TileSplit(const float* xs, int64_t ldx, const float* ws, float* y, int64_t ldy) {
  const int64_t half = ldx / 2;
  __m256 lo[MR][NR];
  for (int h = 0; h < 2; ++h) {
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    }
    const float* xh = xs + h * half;
    const float* wh = ws + h * half;
    for (int64_t k = 0; k < half; k += 8) {
      __m256 xv[MR];
      for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xh + i * ldx + k);
      for (int j = 0; j < NR; ++j) {
        const __m256 wv = _mm256_loadu_ps(wh + j * ldx + k);
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
      }
    }
    if (h == 0) {
      for (int i = 0; i < MR; ++i) {
        for (int j = 0; j < NR; ++j) lo[i][j] = acc[i][j];
      }
    } else {
      for (int i = 0; i < MR; ++i) StoreSums2(y + i * ldy, Fold4(lo[i], acc[i], NR), NR);
    }
  }
}

using SplitTileFn = void (*)(const float*, int64_t, const float*, float*, int64_t);
#define COIL_ROW_SPLIT(MR) \
  { &TileSplit<MR, 1>, &TileSplit<MR, 2>, &TileSplit<MR, 3>, &TileSplit<MR, 4> }
constexpr SplitTileFn kSplitTiles[kMrS][kNrS] = {COIL_ROW_SPLIT(1), COIL_ROW_SPLIT(2),
                                                 COIL_ROW_SPLIT(3)};
#undef COIL_ROW_SPLIT

// ---------------------------------------------------------------- AVX2, long rows
// Past about 1,000 columns a split tile's four W rows and three x rows (28 x K bytes) no
// longer fit L1 beside each other, and the tiles wait on L2 (docs/kernels.md). For such K
// the lane-major form computes the same 16 lane partials of every element one lane at a
// time: lane l's partial is the FMA chain over k = l, l + 16, ... in ascending order from
// zero, as in the split tiles. Its register tile is 6 x rows by 16 W rows (12 registers,
// each 8 W rows of one x row): a step broadcasts 6 x values and loads 16 W values, both of
// lane l at one k, so x streams at 4 bytes a cycle from L2 and the lane's W panel (16 rows x
// K / 16) stays in L1. The lanes go in FoldLanes16's tree order (kLaneOrder, 4-bit reversed),
// and each finished lane adds into a stack of partial tiles, one slot per tree level, so the
// fold pairs the same partials: the sums are the split tiles' bit for bit.
constexpr int kLaneMr = 6;                  // x rows per register tile
constexpr int kLaneNr = 16;                 // W rows per panel and per register tile
constexpr int64_t kLaneMinK = 1024;         // from this padded K on, the lane-major form,
constexpr int64_t kLaneMinRows = 48;        // and from this M: fewer rows pay more for the
                                            // panel's packing and the last tile's padding
                                            // than they save (a decode batch of 32)
constexpr int64_t kLaneTilesPerBlock = 48;  // x tiles per block: a lane of it stays in L2
constexpr int kLaneOrder[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
// The tree levels lane kLaneOrder[j] completes: the trailing ones of j (4: the whole sum).
constexpr int kLaneLevels[16] = {0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2, 0, 1, 0, 4};
constexpr int kLaneTileFloats = kLaneMr * kLaneNr;

// The x rows in tiles of kLaneMr rows, and the tiles in blocks of per_block (the last one
// shorter), each block packed lane-major: [lane][tile in the block][k / 16][row of 6]. The
// rows past M are zeros.
struct LaneBlocks {
  LaneBlocks(int64_t m_count, int64_t ldx)
      : kq(ldx / 16), tiles((m_count + kLaneMr - 1) / kLaneMr) {
    const int64_t blocks = (tiles + kLaneTilesPerBlock - 1) / kLaneTilesPerBlock;
    per_block = (tiles + blocks - 1) / blocks;
  }
  int64_t Begin(int64_t t) const { return t / per_block * per_block; }
  int64_t Count(int64_t t0) const { return std::min(per_block, tiles - t0); }
  int64_t kq, tiles, per_block;
};

// Scatters row m (its values zero-padded to 16 * kq) into the lane-major blocks at xq.
void PackLaneRow(const float* row, int64_t m, const LaneBlocks& lb, float* xq) {
  const int64_t t = m / kLaneMr, t0 = lb.Begin(t), kq = lb.kq;
  const int64_t lane_stride = lb.Count(t0) * kq * kLaneMr;
  float* dst = xq + t0 * kLaneMr * 16 * kq + (t - t0) * kq * kLaneMr + m % kLaneMr;
  for (int64_t q = 0; q < kq; ++q) {
    for (int l = 0; l < 16; ++l) dst[l * lane_stride + q * kLaneMr] = row[16 * q + l];
  }
}

// W rows [n0, n0 + nr) widened into the lane-major panel [lane][k / 16][16 rows]; rows from
// nr on and columns from K on are zeros.
template <DType WT>
COIL_AVX2 void PackLanePanel(const void* w, int64_t k_count, int64_t n0, int nr, int64_t kq,
                             float* wp) {
  using Elem = std::conditional_t<WT == DType::kF32, float, uint16_t>;
  const int64_t whole = k_count / 16;
  for (int rh = 0; rh < 2; ++rh) {
    const Elem* rows[8];
    Elem tails[8][16] = {};  // each row's last partial 16-block, zero-padded
    for (int r = 0; r < 8; ++r) {
      const int64_t n = 8 * rh + r;
      rows[r] = n < nr ? static_cast<const Elem*>(w) + (n0 + n) * k_count : nullptr;
      if (rows[r] != nullptr && whole < kq) {
        std::memcpy(tails[r], rows[r] + 16 * whole, sizeof(Elem) * (k_count - 16 * whole));
      }
    }
    for (int64_t q = 0; q < kq; ++q) {
      for (int lh = 0; lh < 2; ++lh) {
        __m256 v[8];
        for (int r = 0; r < 8; ++r) {
          if (rows[r] == nullptr) {
            v[r] = _mm256_setzero_ps();
          } else {
            v[r] = q < whole ? LoadW8<WT>(rows[r], 16 * q + 8 * lh) : LoadW8<WT>(tails[r], 8 * lh);
          }
        }
        Transpose8x8(v);
        for (int l = 0; l < 8; ++l) {
          _mm256_storeu_ps(wp + ((8 * lh + l) * kq + q) * kLaneNr + 8 * rh, v[l]);
        }
      }
    }
  }
}

// clang-format off
#define COIL_LANE_TILE(OP) \
  OP(0, 0) OP(0, 1) OP(1, 0) OP(1, 1) OP(2, 0) OP(2, 1) \
  OP(3, 0) OP(3, 1) OP(4, 0) OP(4, 1) OP(5, 0) OP(5, 1)
// clang-format on
#define COIL_LANE_ZERO(i, v) __m256 c##i##v = _mm256_setzero_ps();
#define COIL_LANE_ADD(i, v) \
  c##i##v = _mm256_add_ps(_mm256_loadu_ps(s + i * kLaneNr + 8 * v), c##i##v);
#define COIL_LANE_STORE(i, v) _mm256_storeu_ps(s + i * kLaneNr + 8 * v, c##i##v);
#define COIL_LANE_STORE_Y(i, v) _mm256_storeu_ps(y + i * ldy + 8 * v, c##i##v);
#define COIL_LANE_ROW(i)                                  \
  {                                                       \
    const __m256 xb = _mm256_broadcast_ss(x + 6 * q + i); \
    c##i##0 = _mm256_fmadd_ps(xb, w0, c##i##0);           \
    c##i##1 = _mm256_fmadd_ps(xb, w1, c##i##1);           \
  }

// One lane of a 6 x 16 tile: x is the tile's lane block [k / 16][6], w the panel's
// [k / 16][16]. The lane's partials then fold with the first `kLevels` slots of the stack
// (the partner subtrees the tree order finished before it); the result waits in slot
// kLevels, or, after the last lane, is the tile's y (mr x nr of it).
template <int kLevels>
COIL_AVX2 void LaneTile(const float* x, const float* w, int64_t kq, float* slots, float* y,
                        int64_t ldy, int mr, int nr) {
  COIL_LANE_TILE(COIL_LANE_ZERO)
  for (int64_t q = 0; q < kq; ++q) {
    const __m256 w0 = _mm256_loadu_ps(w + kLaneNr * q);
    const __m256 w1 = _mm256_loadu_ps(w + kLaneNr * q + 8);
    // clang-format off
    COIL_LANE_ROW(0) COIL_LANE_ROW(1) COIL_LANE_ROW(2)
    COIL_LANE_ROW(3) COIL_LANE_ROW(4) COIL_LANE_ROW(5)
    // clang-format on
  }
  for (int level = 0; level < kLevels; ++level) {
    const float* s = slots + level * kLaneTileFloats;
    COIL_LANE_TILE(COIL_LANE_ADD)
  }
  if constexpr (kLevels < 4) {
    float* s = slots + kLevels * kLaneTileFloats;
    COIL_LANE_TILE(COIL_LANE_STORE)
  } else if (mr == kLaneMr && nr == kLaneNr) {
    COIL_LANE_TILE(COIL_LANE_STORE_Y)
  } else {
    alignas(32) float tile[kLaneTileFloats];
    float* s = tile;
    COIL_LANE_TILE(COIL_LANE_STORE)
    for (int i = 0; i < mr; ++i) std::memcpy(y + i * ldy, tile + i * kLaneNr, sizeof(float) * nr);
  }
}
#undef COIL_LANE_ROW
#undef COIL_LANE_STORE_Y
#undef COIL_LANE_STORE
#undef COIL_LANE_ADD
#undef COIL_LANE_ZERO
#undef COIL_LANE_TILE

using LaneTileFn = void (*)(const float*, const float*, int64_t, float*, float*, int64_t, int, int);
constexpr LaneTileFn kLaneTiles[5] = {&LaneTile<0>, &LaneTile<1>, &LaneTile<2>, &LaneTile<3>,
                                      &LaneTile<4>};

// y rows [0, M) x columns [n_begin, n_end) from the lane-major x blocks: per block of x
// tiles and panel of 16 W rows, the panel is packed once and every lane sweeps the block.
template <DType WT>
void MatmulLaneRange(const float* xq, const LaneBlocks& lb, int64_t m_count, const void* w,
                     int64_t k_count, const Tensor& y, int64_t n_begin, int64_t n_end) {
  const int64_t kq = lb.kq, ldy = y.stride(0);
  thread_local std::vector<float> storage;
  const size_t panel_floats = static_cast<size_t>(16 * kq * kLaneNr);
  const size_t need = panel_floats + static_cast<size_t>(lb.per_block * 4 * kLaneTileFloats);
  if (storage.size() < need) storage.resize(need);
  float* const panel = storage.data();
  float* const slots = panel + panel_floats;
  const int64_t elem = WT == DType::kF32 ? 4 : 2;
  const char* wb = static_cast<const char*>(w);
  for (int64_t t0 = 0; t0 < lb.tiles; t0 += lb.per_block) {
    const int64_t count = lb.Count(t0);
    const float* block = xq + t0 * kLaneMr * 16 * kq;
    for (int64_t n = n_begin; n < n_end; n += kLaneNr) {
      const int nr = static_cast<int>(std::min<int64_t>(kLaneNr, n_end - n));
      PackLanePanel<WT>(w, k_count, n, nr, kq, panel);
      // The next panel's W rows are prefetched a share per tile call, so that packing it
      // finds them in the cache (in the model they come from memory).
      const int64_t next_rows = std::min<int64_t>(kLaneNr, n_end - n - nr);
      const int64_t lines = next_rows > 0 ? (next_rows * k_count * elem + 63) / 64 : 0;
      const char* next = wb + (n + nr) * k_count * elem;
      const int64_t calls = 16 * count;
      for (int j = 0; j < 16; ++j) {
        const int lane = kLaneOrder[j];
        const LaneTileFn tile = kLaneTiles[kLaneLevels[j]];
        const float* xl = block + lane * count * kq * kLaneMr;
        for (int64_t t = 0; t < count; ++t) {
          const int64_t call = j * count + t;
          for (int64_t line = call * lines / calls; line < (call + 1) * lines / calls; ++line) {
            _mm_prefetch(next + 64 * line, _MM_HINT_T0);
          }
          const int64_t m = (t0 + t) * kLaneMr;
          const int mr = static_cast<int>(std::min<int64_t>(kLaneMr, m_count - m));
          tile(xl + t * kq * kLaneMr, panel + lane * kq * kLaneNr, kq,
               slots + t * 4 * kLaneTileFloats, RowF32(y, m) + n, ldy, mr, nr);
        }
      }
    }
  }
}

// y rows [0, M) x columns [n_begin, n_end). Few rows stream W straight into the tiles (x
// packed plainly in xp); more rows widen kNrS W rows at a time into a split fp32 panel (L1)
// and sweep a block of split x rows (xs, L2) over it, so each W row is widened once per
// block of kMbS rows.
template <DType WT>
void MatmulAvx2Range(const float* xp, const float* xs, int64_t ldx, int64_t m_count, const void* w,
                     int64_t k_count, const Tensor& y, int64_t n_begin, int64_t n_end) {
  const int64_t ldy = y.stride(0);
  if (m_count < kPanelMinRows) {
    using Elem = std::conditional_t<WT == DType::kF32, float, uint16_t>;
    const Elem* wp = static_cast<const Elem*>(w);
    // One row tile reads each W line once (PrefetchW); more read the thread's W again per
    // tile, partly from the last-level cache.
    const auto& tiles = m_count <= kMr2
                            ? Avx2Tiles<WT, kSingleTileFetch == WFetch::kAheadStream>::kTiles
                            : Avx2Tiles<WT, false>::kTiles;
    for (int64_t m = 0; m < m_count; m += kMr2) {
      const int mr = static_cast<int>(std::min<int64_t>(kMr2, m_count - m));
      for (int64_t n = n_begin; n < n_end; n += kNr2) {
        const int nr = static_cast<int>(std::min<int64_t>(kNr2, n_end - n));
        tiles[mr - 1][nr - 1](xp + m * ldx, ldx, wp + n * k_count, k_count, k_count,
                              RowF32(y, m) + n, ldy);
      }
    }
    return;
  }
  thread_local std::vector<float> panel_storage;
  if (panel_storage.size() < static_cast<size_t>(kNrS * ldx)) {
    panel_storage.resize(static_cast<size_t>(kNrS * ldx));
  }
  float* const panel = panel_storage.data();
  // While the tiles sweep one panel, the next panel's W rows are prefetched, a share of
  // their lines per tile, so that widening them finds them in the cache.
  const int64_t elem = WT == DType::kF32 ? 4 : 2;
  const char* wb = static_cast<const char*>(w);
  for (int64_t m0 = 0; m0 < m_count; m0 += kMbS) {
    const int64_t m1 = std::min(m_count, m0 + kMbS);
    const int64_t tiles = (m1 - m0 + kMrS - 1) / kMrS;
    for (int64_t n = n_begin; n < n_end; n += kNrS) {
      const int nr = static_cast<int>(std::min<int64_t>(kNrS, n_end - n));
      WidenSplit<WT>(w, k_count, n, n + nr, ldx, panel);
      const int64_t next_rows = std::min<int64_t>(kNrS, n_end - n - nr);
      const int64_t lines = next_rows > 0 ? (next_rows * k_count * elem + 63) / 64 : 0;
      const char* next = wb + (n + nr) * k_count * elem;
      for (int64_t t = 0; t < tiles; ++t) {
        for (int64_t line = t * lines / tiles; line < (t + 1) * lines / tiles; ++line) {
          _mm_prefetch(next + 64 * line, _MM_HINT_T0);
        }
        const int64_t m = m0 + kMrS * t;
        const int mr = static_cast<int>(std::min<int64_t>(kMrS, m1 - m));
        kSplitTiles[mr - 1][nr - 1](xs + m * ldx, ldx, panel, RowF32(y, m) + n, ldy);
      }
    }
  }
}

void MatmulAvx2(const CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y) {
  const int64_t m_count = x.dim(0), n_count = w.dim(0), k_count = w.dim(1);
  const int64_t ldx = (k_count + 15) / 16 * 16;
  const bool split = m_count >= kPanelMinRows;
  const bool lanes = split && ldx >= kLaneMinK && m_count >= kLaneMinRows;
  const LaneBlocks lb(m_count, ldx);
  AlignedArray<float> xp(lanes ? lb.tiles * kLaneMr * ldx : m_count * ldx);
  ctx.pool->ParallelFor(m_count, 1, [&](int64_t begin, int64_t end) {
    float* row = split ? RowScratch(ldx) : nullptr;
    for (int64_t m = begin; m < end; ++m) {
      float* dst = split ? row : xp.get() + m * ldx;
      if (w.dtype() == DType::kBF16) {
        Bf16RowValues(x, m, k_count, dst);
      } else {
        std::memcpy(dst, RowF32(x, m), sizeof(float) * k_count);
      }
      if (split) std::fill(row + k_count, row + ldx, 0.0f);
      if (lanes) {
        PackLaneRow(row, m, lb, xp.get());
      } else if (split) {
        SplitHalves(row, ldx, xp.get() + m * ldx);
      }
    }
  });
  const void* wp = w.raw();
  const float* plain = split ? nullptr : xp.get();
  const float* halves = split ? xp.get() : nullptr;
  ctx.pool->ParallelFor(n_count, lanes ? kLaneNr : kGrain2, [&](int64_t n_begin, int64_t n_end) {
    auto range = [&](auto type) {
      constexpr DType kType = decltype(type)::value;
      if (lanes) {
        MatmulLaneRange<kType>(xp.get(), lb, m_count, wp, k_count, y, n_begin, n_end);
      } else {
        MatmulAvx2Range<kType>(plain, halves, ldx, m_count, wp, k_count, y, n_begin, n_end);
      }
    };
    switch (w.dtype()) {
      case DType::kBF16:
        range(std::integral_constant<DType, DType::kBF16>{});
        break;
      case DType::kF16:
        range(std::integral_constant<DType, DType::kF16>{});
        break;
      default:
        range(std::integral_constant<DType, DType::kF32>{});
    }
  });
}
#endif  // __x86_64__

}  // namespace

void CpuMatmul(const CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y) {
  const int64_t m_count = x.dim(0), n_count = w.dim(0), k_count = w.dim(1);
  // bf16 x comes with bf16 weights only (Backend::Matmul): every bf16 path below takes it
  // as the rounded rows it would otherwise make from f32 x, so y is the same.
  if (ctx.use_ref) {
    ctx.pool->ParallelFor(m_count, 1,
                          [&](int64_t begin, int64_t end) { MatmulRef(x, w, y, begin, end); });
    return;
  }
  const CpuFeatures& cpu = CpuFeatures::Get();
#if defined(__x86_64__)
  if (w.dtype() == DType::kBF16 && cpu.amx_bf16 && k_count % 2 == 0) {
    AmxMatmul(ctx, x, w, y);
    return;
  }
  if (w.dtype() == DType::kBF16 && cpu.avx512_bf16) {
    const int64_t ldx = (k_count + 31) / 32 * 32;
    AlignedArray<uint16_t> xb(m_count * ldx);
    ctx.pool->ParallelFor(m_count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        if (x.dtype() == DType::kBF16) {
          std::memcpy(xb.get() + m * ldx, RowBf16(x, m), sizeof(uint16_t) * k_count);
        } else {
          RowToBf16(RowF32(x, m), xb.get() + m * ldx, k_count);
        }
      }
    });
    const uint16_t* wp = w.data<uint16_t>();
    ctx.pool->ParallelFor(n_count, kNr, [&](int64_t n_begin, int64_t n_end) {
      RunTiles(xb.get(), ldx, m_count, wp, k_count, k_count, y, n_begin, n_end, kBf16Tiles,
               kSingleTileFetch);
    });
    return;
  }
  if (w.dtype() != DType::kBF16 && cpu.avx512) {
    const int64_t ldx = (k_count + 15) / 16 * 16;
    AlignedArray<float> xp(m_count * ldx);
    for (int64_t m = 0; m < m_count; ++m) {
      std::memcpy(xp.get() + m * ldx, RowF32(x, m), sizeof(float) * k_count);
    }
    const auto& tiles = w.dtype() == DType::kF32 ? kF32Tiles : kF16Tiles;
    const char* wp = static_cast<const char*>(w.raw());
    const int64_t row_bytes = k_count * static_cast<int64_t>(DTypeSize(w.dtype()));
    ctx.pool->ParallelFor(n_count, kNr, [&](int64_t n_begin, int64_t n_end) {
      RunTiles(xp.get(), ldx, m_count, wp, row_bytes, k_count, y, n_begin, n_end, tiles,
               kSingleTileFetch);
    });
    return;
  }
  if (cpu.avx2_fma) {
    MatmulAvx2(ctx, x, w, y);
    return;
  }
#endif
  ctx.pool->ParallelFor(n_count, kNr, [&](int64_t n_begin, int64_t n_end) {
    MatmulPortable(x, w, y, n_begin, n_end);
  });
}

}  // namespace coil
