// Causal grouped-query attention over a paged K/V cache, on the host.
// Batch invariance: every (row, head) reduces over its keys the same way wherever it is
// computed. Keys come in tiles of kTile positions aligned to absolute positions ([0, 32),
// [32, 64), ...), each tile gathered from its pages into f32 (so the page size never shows),
// and a row's last tile is cut at its own position. Per tile, in this order:
//   s_j = fold(q . k_j) * scale for the row's keys j (a dot product as 16 lane partials over
//         head_dim, lane = d mod 16, folded in FoldLanes16's order), -inf past the row;
//   m' = max(m, max_j s_j); a = exp(m - m'); p_j = exp(s_j - m');
//   l = l a + (fold(p_0..15) + fold(p_16..31));
//   acc = (acc a + sum over even j of p_j v_j) + (sum over odd j), each sum j ascending
//         (two chains, half as deep: the tile's latency, not its work, bounds decode);
// and out = acc / l after the row's last tile. Which rows and heads share a tile's gathered
// keys (a work item: a run's block of rows x the query heads of one KV head) only decides
// what is computed together, never how, so a decode row, the same row in a prefill chunk,
// a prompt split anywhere and any batch around it give the same bits; threads take whole
// items. The AVX-512 form takes the dot products and p_j v_j with FMAs; the portable form
// multiplies and adds (other bits, the same invariance). The reference mode computes each
// row's softmax in double, two passes over its keys: the oracle.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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

constexpr int kTile = 32;      // keys per tile, tiles aligned to multiples of 32 positions
constexpr int kRowBlock = 16;  // query rows of one run per work item

// Where a layer's K and V live and how a (row, head) maps onto them.
struct Geometry {
  int64_t heads, kv_heads, group, head_dim, dpad, block_size;
  bool bf16;
  const void* k;
  const void* v;
  float scale;
};

// The element offset of (position p of sequence s, KV head g, dim 0) in a cache.
inline int64_t CacheOffset(const Geometry& geo, const PagedKvBatch& batch, int s, int64_t p,
                           int64_t g) {
  const int64_t slot = int64_t{batch.page(s, p)} * geo.block_size + p % geo.block_size;
  return (slot * geo.kv_heads + g) * geo.head_dim;
}

inline float CacheValue(const Geometry& geo, const void* cache, int64_t i) {
  return geo.bf16 ? Bf16ToFloat(static_cast<const uint16_t*>(cache)[i])
                  : static_cast<const float*>(cache)[i];
}

// ---------------------------------------------------------------- reference
void AttentionRef(const Geometry& geo, const Tensor& q, const PagedKvBatch& batch,
                  const Tensor& out, int64_t t_begin, int64_t t_end) {
  std::vector<double> scores, acc(static_cast<size_t>(geo.head_dim));
  int s = 0;
  for (int64_t t = t_begin; t < t_end; ++t) {
    while (batch.cu_seqlens[s + 1] <= t) ++s;
    const int64_t p = batch.start_positions[s] + (t - batch.cu_seqlens[s]);
    const float* qr = RowF32(q, t);
    scores.resize(static_cast<size_t>(p + 1));
    for (int64_t h = 0; h < geo.heads; ++h) {
      const int64_t g = h / geo.group;
      const float* qh = qr + h * geo.head_dim;
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= p; ++j) {
        const int64_t base = CacheOffset(geo, batch, s, j, g);
        double dot = 0.0;
        for (int64_t d = 0; d < geo.head_dim; ++d) {
          dot += static_cast<double>(qh[d]) * CacheValue(geo, geo.k, base + d);
        }
        scores[j] = dot * geo.scale;
        max = std::max(max, scores[j]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= p; ++j) {
        const double w = std::exp(scores[j] - max);
        sum += w;
        const int64_t base = CacheOffset(geo, batch, s, j, g);
        for (int64_t d = 0; d < geo.head_dim; ++d) acc[d] += w * CacheValue(geo, geo.v, base + d);
      }
      for (int64_t d = 0; d < geo.head_dim; ++d) {
        const float o = static_cast<float>(acc[d] / sum);
        if (out.dtype() == DType::kBF16) {
          RowBf16(out, t)[h * geo.head_dim + d] = FloatToBf16(o);
        } else {
          RowF32(out, t)[h * geo.head_dim + d] = o;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- tiles
// One (row, head)'s running softmax: max m, sum l and acc [dpad].
struct RowState {
  float m, l;
  float* acc;
};

// Portable: one tile of `valid` keys (kt, vt: [kTile, dpad] f32, zero past head_dim).
COIL_VECTORIZE void TilePortable(const float* q, const float* kt, const float* vt, int valid,
                                 int64_t dpad, float scale, RowState& st) {
  float s[kTile];
  for (int j = 0; j < kTile; ++j) {
    float lanes[16] = {};
    const float* k = kt + j * dpad;
    for (int64_t d = 0; d < dpad; d += 16) {
      for (int i = 0; i < 16; ++i) lanes[i] += q[d + i] * k[d + i];
    }
    s[j] = j < valid ? FoldLanes16(lanes) * scale : -std::numeric_limits<float>::infinity();
  }
  float tile_max = s[0];
  for (int j = 1; j < valid; ++j) tile_max = std::max(tile_max, s[j]);
  const float m = std::max(st.m, tile_max);
  const float alpha = ExpF(st.m - m);
  float p[kTile];
  for (int j = 0; j < kTile; ++j) p[j] = j < valid ? ExpF(s[j] - m) : 0.0f;
  st.l = st.l * alpha + (FoldLanes16(p) + FoldLanes16(p + 16));
  st.m = m;
  // The even keys' values onto the rescaled acc, the odd keys' apart, then their sum.
  for (int64_t d = 0; d < dpad; ++d) {
    float even = st.acc[d] * alpha, odd = 0.0f;
    for (int j = 0; j < valid; j += 2) even += p[j] * vt[j * dpad + d];
    for (int j = 1; j < valid; j += 2) odd += p[j] * vt[j * dpad + d];
    st.acc[d] = even + odd;
  }
}

#if defined(__x86_64__)
#define COIL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// ExpF (vec_math.h) on 16 lanes, the same operations in the same order: the same bits.
COIL_AVX512 inline __m512 Exp16(__m512 x_in) {
  const __m512 x =
      _mm512_min_ps(_mm512_max_ps(x_in, _mm512_set1_ps(-86.5f)), _mm512_set1_ps(88.3f));
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), shifter);
  const __m512 n = _mm512_sub_ps(t, shifter);
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(shifter));
  const __m512 result =
      _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(e, 23)));
  const __mmask16 under = _mm512_cmp_ps_mask(x_in, _mm512_set1_ps(-86.5f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(under, result, _mm512_setzero_ps());
}

// The sum of v's 16 lanes in FoldLanes16's order (i + i+8, + i+4, + i+2, + i+1).
COIL_AVX512 inline float SumLanes(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// Lane j of the result = the sum of a[j]'s 16 lanes, each in FoldLanes16's order: four
// levels of pairwise folds (halves, quarters, pairs, neighbours), then one permutation.
COIL_AVX512 inline __m512 SumLanes16(const __m512 (&a)[16]) {
  __m512 c[8], e[4], g[2];
  for (int k = 0; k < 8; ++k) {  // lanes i + i+8: c[k] = [a[2k] folded | a[2k+1] folded]
    c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int k = 0; k < 4; ++k) {  // + i+4: e[k]'s 128-bit lane q holds source 4k + q
    e[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int k = 0; k < 2; ++k) {  // + i+2, within each 128-bit lane
    g[k] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * k], e[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(e[2 * k], e[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // + i+1: lane 4q + r of the sum holds source 4r + q.
  const __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, sum);
}

// acc = (acc * alpha + sum of p_j v_j over the even keys) + (sum over the odd keys), each sum
// in key order (two chains of FMAs, half as deep), C blocks of 16 dims in registers.
template <int C>
COIL_AVX512 inline void AccumulateValues(const float* p, int valid, const float* vt, int64_t dpad,
                                         __m512 alpha, float* acc_out) {
  __m512 even[C], odd[C];
  for (int c = 0; c < C; ++c) {
    even[c] = _mm512_mul_ps(_mm512_loadu_ps(acc_out + 16 * c), alpha);
    odd[c] = _mm512_setzero_ps();
  }
  int j = 0;
  for (; j + 1 < valid; j += 2) {
    const __m512 pe = _mm512_set1_ps(p[j]), po = _mm512_set1_ps(p[j + 1]);
    for (int c = 0; c < C; ++c) {
      even[c] = _mm512_fmadd_ps(pe, _mm512_loadu_ps(vt + j * dpad + 16 * c), even[c]);
      odd[c] = _mm512_fmadd_ps(po, _mm512_loadu_ps(vt + (j + 1) * dpad + 16 * c), odd[c]);
    }
  }
  if (j < valid) {
    const __m512 pe = _mm512_set1_ps(p[j]);
    for (int c = 0; c < C; ++c) {
      even[c] = _mm512_fmadd_ps(pe, _mm512_loadu_ps(vt + j * dpad + 16 * c), even[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc_out + 16 * c, _mm512_add_ps(even[c], odd[c]));
}

// The scores of keys [j0, j0 + 16) of the tile: lane j = the fold of key j0 + j's 16 lane
// partials over head_dim.
COIL_AVX512 inline __m512 Scores16(const float* q, const float* kt, int64_t dpad) {
  __m512 dots[16];
  for (int j = 0; j < 16; ++j) dots[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dpad; d += 16) {
    const __m512 qv = _mm512_loadu_ps(q + d);
    for (int j = 0; j < 16; ++j) {
      dots[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kt + j * dpad + d), dots[j]);
    }
  }
  return SumLanes16(dots);
}

// TilePortable's steps with 16-lane vectors and FMAs, the tile's keys in two halves of 16.
COIL_AVX512 void TileAvx512(const float* q, const float* kt, const float* vt, int valid,
                            int64_t dpad, float scale, RowState& st) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 sc = _mm512_set1_ps(scale);
  const __mmask16 first =
      valid >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << valid) - 1);
  const __mmask16 second = valid >= 32
                               ? __mmask16(0xffff)
                               : static_cast<__mmask16>(valid > 16 ? (1u << (valid - 16)) - 1 : 0u);
  const __m512 s0 = _mm512_mask_blend_ps(first, neg_inf, _mm512_mul_ps(Scores16(q, kt, dpad), sc));
  const __m512 s1 = valid > 16
                        ? _mm512_mask_blend_ps(second, neg_inf,
                                               _mm512_mul_ps(Scores16(q, kt + 16 * dpad, dpad), sc))
                        : neg_inf;
  const float m = std::max(st.m, _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));  // exact
  const float alpha = ExpF(st.m - m);
  const __m512 mv = _mm512_set1_ps(m);
  const __m512 p0 = Exp16(_mm512_sub_ps(s0, mv)), p1 = Exp16(_mm512_sub_ps(s1, mv));
  st.l = st.l * alpha + (SumLanes(p0) + SumLanes(p1));
  st.m = m;
  alignas(64) float pj[kTile];
  _mm512_store_ps(pj, p0);
  _mm512_store_ps(pj + 16, p1);
  const __m512 a = _mm512_set1_ps(alpha);
  for (int64_t d = 0; d < dpad; d += 128) {
    switch (std::min<int64_t>(8, (dpad - d) / 16)) {
      case 1:
        AccumulateValues<1>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      case 2:
        AccumulateValues<2>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      case 3:
        AccumulateValues<3>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      case 4:
        AccumulateValues<4>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      case 5:
        AccumulateValues<5>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      case 6:
        AccumulateValues<6>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      case 7:
        AccumulateValues<7>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
      default:
        AccumulateValues<8>(pj, valid, vt + d, dpad, a, st.acc + d);
        break;
    }
  }
}

// 16 bf16 values as f32 (exact: the high halves).
COIL_AVX512 inline __m512 Widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Keys and values of positions [key0, key0 + count) of sequence s, KV head g, as f32 rows
// [dpad] of kt and vt (zeros past head_dim), walking the pages from key0's; then asks for
// the `ahead` positions after them to be fetched into the cache (the next tile's).
COIL_AVX512 void GatherTileAvx512(const Geometry& geo, const PagedKvBatch& batch, int s, int64_t g,
                                  int64_t key0, int count, int ahead, float* kt, float* vt) {
  const int32_t* table = batch.block_table.data() + batch.cu_blocks[s];
  int64_t entry = key0 / geo.block_size, in_page = key0 % geo.block_size;
  for (int j = 0; j < count; ++j) {
    const int64_t offset =
        ((int64_t{table[entry]} * geo.block_size + in_page) * geo.kv_heads + g) * geo.head_dim;
    if (++in_page == geo.block_size) {
      in_page = 0;
      ++entry;
    }
    for (int64_t d = 0; d < geo.head_dim; d += 16) {
      const __mmask16 mask = geo.head_dim - d >= 16
                                 ? __mmask16(0xffff)
                                 : static_cast<__mmask16>((1u << (geo.head_dim - d)) - 1);
      __m512 k, v;
      if (geo.bf16) {
        k = Widen(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(geo.k) + offset + d));
        v = Widen(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(geo.v) + offset + d));
      } else {
        k = _mm512_maskz_loadu_ps(mask, static_cast<const float*>(geo.k) + offset + d);
        v = _mm512_maskz_loadu_ps(mask, static_cast<const float*>(geo.v) + offset + d);
      }
      _mm512_store_ps(kt + j * geo.dpad + d, k);
      _mm512_store_ps(vt + j * geo.dpad + d, v);
    }
  }
  // The walk now stands at position key0 + count.
  const int64_t row_bytes = geo.head_dim * (geo.bf16 ? 2 : 4);
  for (int j = 0; j < ahead; ++j) {
    const int64_t offset =
        ((int64_t{table[entry]} * geo.block_size + in_page) * geo.kv_heads + g) * row_bytes;
    if (++in_page == geo.block_size) {
      in_page = 0;
      ++entry;
    }
    for (int64_t b = 0; b < row_bytes; b += 64) {
      _mm_prefetch(static_cast<const char*>(geo.k) + offset + b, _MM_HINT_T0);
      _mm_prefetch(static_cast<const char*>(geo.v) + offset + b, _MM_HINT_T0);
    }
  }
}
#endif  // __x86_64__

void GatherTilePortable(const Geometry& geo, const PagedKvBatch& batch, int s, int64_t g,
                        int64_t key0, int count, float* kt, float* vt) {
  const int32_t* table = batch.block_table.data() + batch.cu_blocks[s];
  int64_t entry = key0 / geo.block_size, in_page = key0 % geo.block_size;
  for (int j = 0; j < count; ++j) {
    const int64_t offset =
        ((int64_t{table[entry]} * geo.block_size + in_page) * geo.kv_heads + g) * geo.head_dim;
    if (++in_page == geo.block_size) {
      in_page = 0;
      ++entry;
    }
    for (const auto& [cache, dst] :
         {std::pair{geo.k, kt + j * geo.dpad}, std::pair{geo.v, vt + j * geo.dpad}}) {
      for (int64_t d = 0; d < geo.head_dim; ++d) dst[d] = CacheValue(geo, cache, offset + d);
      for (int64_t d = geo.head_dim; d < geo.dpad; ++d) dst[d] = 0.0f;
    }
  }
}

// ---------------------------------------------------------------- work items
// Rows [row_begin, row_end) of sequence s (row indices into the step) against KV head g.
struct Item {
  int32_t s, g;
  int64_t row_begin, row_end;
  double cost;  // (row, head, key) triples, for the schedule
};

template <bool kAvx512>
void RunItem(const Geometry& geo, const Tensor& q, const PagedKvBatch& batch, const Item& item,
             const Tensor& out) {
  const int64_t dpad = geo.dpad, group = geo.group;
  const int64_t rows = item.row_end - item.row_begin, states = rows * group;
  // This thread's scratch: q and acc per state, one tile of keys and values.
  float* const scratch = RowScratch((2 * states + 2 * kTile) * dpad + 2 * states + 16);
  float* const base =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  float* const qs = base;
  float* const accs = qs + states * dpad;
  float* const kt = accs + states * dpad;
  float* const vt = kt + kTile * dpad;
  std::vector<RowState> st(static_cast<size_t>(states));
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = RowF32(q, item.row_begin + r);
    for (int64_t i = 0; i < group; ++i) {
      float* dst = qs + (r * group + i) * dpad;
      std::memcpy(dst, qr + (item.g * group + i) * geo.head_dim, geo.head_dim * sizeof(float));
      std::fill(dst + geo.head_dim, dst + dpad, 0.0f);
      st[r * group + i] = {-std::numeric_limits<float>::infinity(), 0.0f,
                           accs + (r * group + i) * dpad};
      std::fill(st[r * group + i].acc, st[r * group + i].acc + dpad, 0.0f);
    }
  }
  const int s = item.s;
  const int64_t first_pos = batch.start_positions[s] + (item.row_begin - batch.cu_seqlens[s]);
  const int64_t last_pos = first_pos + rows - 1;
  for (int64_t key0 = 0; key0 <= last_pos; key0 += kTile) {
    const int gathered = static_cast<int>(std::min<int64_t>(kTile, last_pos - key0 + 1));
#if defined(__x86_64__)
    if constexpr (kAvx512) {
      const int ahead = static_cast<int>(std::min<int64_t>(kTile, last_pos - key0 - gathered + 1));
      GatherTileAvx512(geo, batch, s, item.g, key0, gathered, ahead, kt, vt);
    } else {
      GatherTilePortable(geo, batch, s, item.g, key0, gathered, kt, vt);
    }
#else
    GatherTilePortable(geo, batch, s, item.g, key0, gathered, kt, vt);
#endif
    // Keys past the block's last row are never read as values; as keys they are masked, but
    // zeros keep their dot products finite.
    std::fill(kt + gathered * dpad, kt + kTile * dpad, 0.0f);
    for (int64_t r = std::max<int64_t>(0, key0 - first_pos); r < rows; ++r) {
      const int valid = static_cast<int>(std::min<int64_t>(kTile, first_pos + r - key0 + 1));
      for (int64_t i = 0; i < group; ++i) {
        const float* qv = qs + (r * group + i) * dpad;
#if defined(__x86_64__)
        if constexpr (kAvx512) {
          TileAvx512(qv, kt, vt, valid, dpad, geo.scale, st[r * group + i]);
          continue;
        }
#endif
        TilePortable(qv, kt, vt, valid, dpad, geo.scale, st[r * group + i]);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < group; ++i) {
      const RowState& state = st[r * group + i];
      const int64_t col = (item.g * group + i) * geo.head_dim;
      if (out.dtype() == DType::kBF16) {
        uint16_t* o = RowBf16(out, item.row_begin + r) + col;
        for (int64_t d = 0; d < geo.head_dim; ++d) o[d] = FloatToBf16(state.acc[d] / state.l);
      } else {
        float* o = RowF32(out, item.row_begin + r) + col;
        for (int64_t d = 0; d < geo.head_dim; ++d) o[d] = state.acc[d] / state.l;
      }
    }
  }
}

}  // namespace

void CpuPagedAttention(const CpuContext& ctx, const Tensor& q, const Tensor& k_cache,
                       const Tensor& v_cache, const PagedKvBatch& batch, float scale,
                       const Tensor& out) {
  Geometry geo;
  geo.kv_heads = k_cache.dim(2);
  geo.head_dim = k_cache.dim(3);
  geo.heads = q.dim(1) / geo.head_dim;
  geo.group = geo.heads / geo.kv_heads;
  geo.dpad = (geo.head_dim + 15) / 16 * 16;
  geo.block_size = batch.block_size;
  geo.bf16 = k_cache.dtype() == DType::kBF16;
  geo.k = k_cache.raw();
  geo.v = v_cache.raw();
  geo.scale = scale;
  if (ctx.use_ref) {
    ctx.pool->ParallelFor(q.dim(0), 1, [&](int64_t begin, int64_t end) {
      AttentionRef(geo, q, batch, out, begin, end);
    });
    return;
  }
  std::vector<Item> items;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    for (int64_t r0 = batch.cu_seqlens[s]; r0 < batch.cu_seqlens[s + 1]; r0 += kRowBlock) {
      const int64_t r1 = std::min<int64_t>(batch.cu_seqlens[s + 1], r0 + kRowBlock);
      const double last = batch.start_positions[s] + (r1 - 1 - batch.cu_seqlens[s]);
      const double cost = static_cast<double>(r1 - r0) * (last + 1) * geo.group;
      for (int32_t g = 0; g < geo.kv_heads; ++g) items.push_back({s, g, r0, r1, cost});
    }
  }
  // Longest first, then taken one at a time by whichever thread is free: a long prompt's
  // late rows do not all land on one thread. Items write disjoint outputs.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
#if defined(__x86_64__)
  const bool avx512 = CpuFeatures::Get().avx512;
#else
  const bool avx512 = false;
#endif
  std::atomic<size_t> next{0};
  const int64_t workers =
      std::min<int64_t>(ctx.pool->threads(), static_cast<int64_t>(items.size()));
  ctx.pool->ParallelFor(workers, 1, [&](int64_t, int64_t) {
    for (size_t i = next.fetch_add(1); i < items.size(); i = next.fetch_add(1)) {
      if (avx512) {
        RunItem<true>(geo, q, batch, items[i], out);
      } else {
        RunItem<false>(geo, q, batch, items[i], out);
      }
    }
  });
}

}  // namespace coil
