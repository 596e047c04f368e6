// The Mamba2 selective scan over varlen runs with state slots. Two forms:
//  - the recurrence, token by token (mamba_ssm selective_state_update; llama.cpp
//    ggml_ssm_scan): runs of one token, and every token in the reference mode;
//  - the chunked SSD form (mamba_ssm ssd_combined), for pieces of two or more tokens: within
//    a chunk, y = (C B^T . L) (dt x) + exp(cumsum A dt) C h_prev, then the state is carried to
//    the chunk's end. A piece never crosses a multiple of chunk_size of the absolute
//    position, so a prompt split at chunk multiples computes the same pieces as whole.
// With SsmScanOptions::bf16_products, on a CPU with AMX or AVX-512 BF16 (and headdim a
// multiple of 16, d_state of 32), the SSD form's three products take bf16 operands with
// fp32 sums (Bf16Gemm), as mamba_ssm's kernels do for bf16 activations; otherwise they
// stay fp32. Each (sequence, head) is computed by one thread in a fixed order; the batch
// and the thread count never change a result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers read _mm512_undefined_*() values, which -Werror rejects.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/transpose16.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

struct Dims {
  int64_t heads, headdim, d_state, groups, heads_per_group, first_head, state_rows;
  // The local group local head `head` reads (SsmScanOptions::heads_per_group).
  int64_t GroupOf(int64_t head) const { return (first_head + head) / heads_per_group; }
};

// Which vector forms the recurrence and the fp32 SSD form take: 16-wide AVX-512, 8-wide
// AVX2 + FMA (the same bits, ssd_forms.inc), or the portable loops.
enum class SsdForm { kPortable, kAvx2, kAvx512 };

// A chunk-aligned piece of a sequence's run that takes the SSD form.
struct Piece {
  int64_t row0;       // first packed row
  int64_t length;     // >= 2
  int64_t cb_offset;  // into the C B^T workspace: [groups][length][length] (fp32 form),
                      // [groups][Lp][Lp] (bf16 form, Lp = length rounded up to 32)
  int64_t bv_offset;  // bf16 form: into the pair-interleaved B workspace, [groups][Lp/2][N]
};

inline float DtRef(float dt, float bias, const SsmScanOptions& o) {
  const double v = static_cast<double>(dt) + bias;
  const double sp = v > 20.0 ? v : std::log1p(std::exp(v));
  return std::min(std::max(static_cast<float>(sp), o.dt_min), o.dt_max);
}

inline float DtFast(float dt, float bias, const SsmScanOptions& o) {
  return std::min(std::max(SoftplusF(dt + bias), o.dt_min), o.dt_max);
}

// One token of the recurrence, vectorized over d_state; y[p] folds 16 lane partials.
COIL_VECTORIZE void RecurrenceStep(float* h, const float* x, const float* b, const float* c,
                                   float decay, float dtv, float d, int64_t p_count,
                                   int64_t n_count, float* y) {
  for (int64_t p = 0; p < p_count; ++p) {
    const float xdt = x[p] * dtv;
    float* hp = h + p * n_count;
    float lanes[16] = {};
    int64_t n = 0;
    for (; n + 16 <= n_count; n += 16) {
      for (int j = 0; j < 16; ++j) {
        const float v = hp[n + j] * decay + xdt * b[n + j];
        hp[n + j] = v;
        lanes[j] += v * c[n + j];
      }
    }
    for (int j = 0; n + j < n_count; ++j) {
      const float v = hp[n + j] * decay + xdt * b[n + j];
      hp[n + j] = v;
      lanes[j] += v * c[n + j];
    }
    y[p] = FoldLanes16(lanes) + d * x[p];
  }
}

// The reference: the same recurrence in plain scalar order (the oracle).
void RecurrenceStepRef(float* h, const float* x, const float* b, const float* c, float decay,
                       float dtv, float d, int64_t p_count, int64_t n_count, float* y) {
  for (int64_t p = 0; p < p_count; ++p) {
    const float xdt = x[p] * dtv;
    float* hp = h + p * n_count;
    float acc = 0.0f;
    for (int64_t n = 0; n < n_count; ++n) {
      hp[n] = hp[n] * decay + xdt * b[n];
      acc = acc + hp[n] * c[n];
    }
    y[p] = acc + d * x[p];
  }
}

// A bf16 state row widened to fp32 (NarrowToBf16 rounds it back, to nearest even), and
// fp32 values rounded to bf16 in place.
COIL_VECTORIZE void WidenBf16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}
COIL_VECTORIZE void RoundToBf16(float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = Bf16ToFloat(FloatToBf16(h[i]));
}

COIL_VECTORIZE void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];
}

COIL_VECTORIZE void ScaleInPlace(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * a;
}

// coef[s] = cb[s] * exp(cum_t - cum[s]) * dtv[s] for s in [0, n).
COIL_VECTORIZE void DecayCoefficients(const float* cb, const double* cum, double cum_t,
                                      const float* dtv, float* coef, int64_t n) {
  for (int64_t s = 0; s < n; ++s) {
    coef[s] = cb[s] * ExpF(static_cast<float>(cum_t - cum[s])) * dtv[s];
  }
}

// w[s] = exp(cum_r - cum[s]) * dtv[s] for s in [0, n).
COIL_VECTORIZE void DecayWeights(const double* cum, double cum_r, const float* dtv, float* w,
                                 int64_t n) {
  for (int64_t s = 0; s < n; ++s) w[s] = ExpF(static_cast<float>(cum_r - cum[s])) * dtv[s];
}

// coef[s] = cb[s] * (f * w[s]) for s in [0, n).
COIL_VECTORIZE void ScaledCoefficients(const float* cb, float f, const float* w, float* coef,
                                       int64_t n) {
  for (int64_t s = 0; s < n; ++s) coef[s] = cb[s] * (f * w[s]);
}

// The intra-chunk coefficients of an SSD piece's rows, coef_t[s] = cb[t, s] exp(cum_t - cum_s)
// dt_s for s <= t, which every fp32 form takes from here. The exps are factored per block of
// kBlock rows: for s before the block's first row r, exp(cum_t - cum_s) = exp(cum_t - cum_r)
// exp(cum_r - cum_s), both factors at most 1, and the second (times dt_s) is taken once for
// the block's rows; from r on they are taken directly. A piece of L rows takes about
// L^2 / (2 kBlock) + kBlock L / 2 exps instead of L^2 / 2 (5,120 instead of 32,896 at 256).
class DecayRows {
 public:
  static constexpr int64_t kBlock = 16;

  // cb: the piece's C B^T ([length][length]); cum, dtv: per row. `weights` is scratch.
  DecayRows(const float* cb, int64_t length, const double* cum, const float* dtv,
            std::vector<float>& weights)
      : cb_(cb), length_(length), cum_(cum), dtv_(dtv), weights_(weights) {
    weights_.resize(static_cast<size_t>(length));
  }

  // Row t's t + 1 coefficients into coef. Rows are asked for in ascending order.
  void Row(int64_t t, float* coef) {
    const int64_t r = t / kBlock * kBlock;
    if (r != block_) {
      DecayWeights(cum_, cum_[r], dtv_, weights_.data(), r);
      block_ = r;
    }
    const float* cb_t = cb_ + t * length_;
    ScaledCoefficients(cb_t, ExpF(static_cast<float>(cum_[t] - cum_[r])), weights_.data(), coef, r);
    DecayCoefficients(cb_t + r, cum_ + r, cum_[t], dtv_ + r, coef + r, t + 1 - r);
  }

 private:
  const float* cb_;
  int64_t length_;
  const double* cum_;
  const float* dtv_;
  std::vector<float>& weights_;
  int64_t block_ = -1;
};

#if defined(__x86_64__)
#define COIL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

#define COIL_AVX2 __attribute__((target("avx2,fma")))

// Prefetches the state row `row` of n_count values, a cache line at a time.
template <typename StateT>
inline void PrefetchRow(const StateT* row, int64_t n_count) {
  constexpr int64_t kPerLine = 64 / sizeof(StateT);
  for (int64_t n = 0; n < n_count; n += kPerLine) {
    _mm_prefetch(reinterpret_cast<const char*>(row + n), _MM_HINT_T0);
  }
}

// y[r] = (the sum of row r's 16 lane partials) + d x[r] for 8 rows at once, in
// FoldLanes16's order, from half[r] = lanes 0-7 + lanes 8-15 (its first add): transposed,
// register i holds lane i of every row, so the remaining adds (lane i + (i + 4), then
// + (i + 2), then + (i + 1)) pair the same values for all 8 rows in one vector add each,
// where one row alone takes a chain of shuffles and adds.
COIL_AVX2 inline void FoldRows8(__m256 half[8], float d, const float* x, float* y) {
  Transpose8x8(half);
  const __m256 q0 = _mm256_add_ps(half[0], half[4]), q1 = _mm256_add_ps(half[1], half[5]);
  const __m256 q2 = _mm256_add_ps(half[2], half[6]), q3 = _mm256_add_ps(half[3], half[7]);
  const __m256 sums = _mm256_add_ps(_mm256_add_ps(q0, q2), _mm256_add_ps(q1, q3));
  _mm256_storeu_ps(y, _mm256_add_ps(sums, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(x))));
}

// The state row as fp32: loads 16 values (fp32, or bf16 widened exactly).
template <typename StateT>
COIL_AVX512 inline __m512 LoadState16(const StateT* h) {
  if constexpr (sizeof(StateT) == 4) {
    return _mm512_loadu_ps(h);
  } else {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
}

// Stores 16 fp32 values as the state's type: bf16 rounded to nearest even as FloatToBf16
// (integer operations, so every path gives the same bits; NaN stays NaN). kBf16Insn (only
// where the CPU has AVX-512 BF16) rounds by one vcvtneps2bf16 instead, which agrees with
// FloatToBf16 on every value but the denormals, which it flushes to zero: a vector holding
// one (as good as never: a state decays through normal values for thousands of steps)
// takes the integer operations. The instruction is written as assembly because the
// functions around it are compiled for AVX-512F alone.
template <typename StateT, bool kBf16Insn = false>
COIL_AVX512 inline void StoreState16(StateT* h, __m512 v) {
  if constexpr (sizeof(StateT) == 4) {
    _mm512_storeu_ps(h, v);
  } else {
    const __m512i u = _mm512_castps_si512(v);
    if constexpr (kBf16Insn) {
      // Denormals: exponent bits all 0, mantissa bits not.
      const __mmask16 denormal =
          _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)), u,
                                      _mm512_set1_epi32(0x007fffff));
      if (denormal == 0) {
        __m256i r;
        __asm__("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(v));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(h), r);
        return;
      }
    }
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h), _mm512_cvtepi32_epi16(r));
  }
}

// RecurrenceStep's operations in the same order (so the same bits) for d_state a multiple
// of 16 and headdim a multiple of 8, on a state row of fp32 or bf16 (computed in fp32,
// stored rounded): each state value is read once and written once, in place, and the next
// item's state (`next`, or null) is prefetched a row at a time, so a decode step streams
// the states. Each row's 16 lane partials are added as lanes 0-7 + 8-15, and rows go 8 at a
// time through the rest of the fold together (FoldRows8).
template <typename StateT, bool kBf16Insn = false>
COIL_AVX512 void RecurrenceStepAvx512(StateT* h, const float* x, const float* b, const float* c,
                                      float decay, float dtv, float d, int64_t p_count,
                                      int64_t n_count, float* y, const StateT* next) {
  const __m512 dv = _mm512_set1_ps(decay);
  for (int64_t p0 = 0; p0 < p_count; p0 += 8) {
    __m256 half[8];
    for (int r = 0; r < 8; ++r) {
      const int64_t p = p0 + r;
      StateT* hp = h + p * n_count;
      if (next != nullptr) PrefetchRow(next + p * n_count, n_count);
      const __m512 xdt = _mm512_set1_ps(x[p] * dtv);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t n = 0; n < n_count; n += 16) {
        const __m512 v = _mm512_add_ps(_mm512_mul_ps(LoadState16(hp + n), dv),
                                       _mm512_mul_ps(xdt, _mm512_loadu_ps(b + n)));
        StoreState16<StateT, kBf16Insn>(hp + n, v);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(v, _mm512_loadu_ps(c + n)));
      }
      half[r] = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    }
    FoldRows8(half, d, x + p0, y + p0);
  }
}

// The same step in 8-wide registers (AVX2), the same multiplies and adds in the same order,
// so the same bits again. An fp32 row is taken 16 values at a time as lanes 0-7 and 8-15.
// A bf16 row is taken as its even and its odd values (one 32-byte load, a shift and a mask
// widen them; their roundings merge back with a shift, a mask and an or), against B and C
// split the same way once per call: the lane partials are the same, only held in another
// arrangement until the fold. Rows go 8 at a time (headdim is a multiple of 16), folded
// together (FoldRows8).
COIL_AVX2 void RecurrenceStepAvx2(float* h, const float* x, const float* b, const float* c,
                                  float decay, float dtv, float d, int64_t p_count, int64_t n_count,
                                  float* y, const float* next) {
  const __m256 dv = _mm256_set1_ps(decay);
  for (int64_t p0 = 0; p0 < p_count; p0 += 8) {
    __m256 half[8];
    for (int r = 0; r < 8; ++r) {
      const int64_t p = p0 + r;
      float* hp = h + p * n_count;
      if (next != nullptr) PrefetchRow(next + p * n_count, n_count);
      const __m256 xdt = _mm256_set1_ps(x[p] * dtv);
      __m256 acc_lo = _mm256_setzero_ps(), acc_hi = _mm256_setzero_ps();
      for (int64_t n = 0; n < n_count; n += 16) {
        const __m256 lo = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(hp + n), dv),
                                        _mm256_mul_ps(xdt, _mm256_loadu_ps(b + n)));
        const __m256 hi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(hp + n + 8), dv),
                                        _mm256_mul_ps(xdt, _mm256_loadu_ps(b + n + 8)));
        _mm256_storeu_ps(hp + n, lo);
        _mm256_storeu_ps(hp + n + 8, hi);
        acc_lo = _mm256_add_ps(acc_lo, _mm256_mul_ps(lo, _mm256_loadu_ps(c + n)));
        acc_hi = _mm256_add_ps(acc_hi, _mm256_mul_ps(hi, _mm256_loadu_ps(c + n + 8)));
      }
      half[r] = _mm256_add_ps(acc_lo, acc_hi);
    }
    FoldRows8(half, d, x + p0, y + p0);
  }
}

// Rounds fp32 bits to the bf16 in their high 16 bits, to nearest even (FloatToBf16 for
// every value but NaN, which the caller handles).
COIL_AVX2 inline __m256i RoundHigh(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}

COIL_AVX2 void RecurrenceStepAvx2(uint16_t* h, const float* x, const float* b, const float* c,
                                  float decay, float dtv, float d, int64_t p_count, int64_t n_count,
                                  float* y, const uint16_t* next) {
  // Per 16 values n0 .. n0 + 15: B's 8 even values, B's 8 odd, then C's.
  thread_local std::vector<float> split;
  split.resize(static_cast<size_t>(2 * n_count));
  for (int64_t n0 = 0; n0 < n_count; n0 += 16) {
    float* out = split.data() + 2 * n0;
    for (int i = 0; i < 8; ++i) {
      out[i] = b[n0 + 2 * i];
      out[8 + i] = b[n0 + 2 * i + 1];
      out[16 + i] = c[n0 + 2 * i];
      out[24 + i] = c[n0 + 2 * i + 1];
    }
  }
  const __m256 dv = _mm256_set1_ps(decay);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 half[8];
  for (int64_t p = 0; p < p_count; ++p) {
    uint16_t* hp = h + p * n_count;
    if (next != nullptr) PrefetchRow(next + p * n_count, n_count);
    const __m256 xdt = _mm256_set1_ps(x[p] * dtv);
    __m256 acc_even = _mm256_setzero_ps(), acc_odd = _mm256_setzero_ps();
    for (int64_t n = 0; n < n_count; n += 16) {
      const float* bc = split.data() + 2 * n;
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hp + n));
      const __m256 even =
          _mm256_add_ps(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)), dv),
                        _mm256_mul_ps(xdt, _mm256_loadu_ps(bc)));
      const __m256 odd =
          _mm256_add_ps(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(raw, high)), dv),
                        _mm256_mul_ps(xdt, _mm256_loadu_ps(bc + 8)));
      const __m256i merged = _mm256_or_si256(_mm256_srli_epi32(RoundHigh(even), 16),
                                             _mm256_and_si256(RoundHigh(odd), high));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hp + n), merged);
      if (_mm256_movemask_ps(_mm256_cmp_ps(even, odd, _CMP_UNORD_Q)) != 0) {
        alignas(32) float v[16];
        _mm256_store_ps(v, even);
        _mm256_store_ps(v + 8, odd);
        for (int i = 0; i < 8; ++i) {
          hp[n + 2 * i] = FloatToBf16(v[i]);
          hp[n + 2 * i + 1] = FloatToBf16(v[8 + i]);
        }
      }
      acc_even = _mm256_add_ps(acc_even, _mm256_mul_ps(even, _mm256_loadu_ps(bc + 16)));
      acc_odd = _mm256_add_ps(acc_odd, _mm256_mul_ps(odd, _mm256_loadu_ps(bc + 24)));
    }
    // Back to lanes 0-7 and 8-15: lane 2i is even i, lane 2i + 1 odd i.
    const __m256 first = _mm256_unpacklo_ps(acc_even, acc_odd);   // lanes 0-3, 8-11
    const __m256 second = _mm256_unpackhi_ps(acc_even, acc_odd);  // lanes 4-7, 12-15
    half[p % 8] = _mm256_add_ps(_mm256_permute2f128_ps(first, second, 0x20),
                                _mm256_permute2f128_ps(first, second, 0x31));
    if (p % 8 == 7) FoldRows8(half, d, x + p - 7, y + p - 7);
  }
}

// The vector forms of the SSD piece's three products (ssd_forms.inc), once for 16-wide
// AVX-512 registers and once for 8-wide AVX2 ones; both give the same bits.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
namespace ssd512 {
using V = __m512;
constexpr int kLanes = 16;
inline V VZero() { return _mm512_setzero_ps(); }
inline V VLoad(const float* p) { return _mm512_loadu_ps(p); }
inline void VStore(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V VSet1(float x) { return _mm512_set1_ps(x); }
inline V VMul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V VFma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline void VStoreFirst(float* p, V v, int64_t count) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
}
constexpr int kYRows = 2, kYVecs = 4;          // y tile: rows x registers along headdim
constexpr int kStateRows = 2, kStateVecs = 4;  // state tile: rows x registers along d_state
#include "kernels/cpu/ssd_forms.inc"
}  // namespace ssd512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace ssd256 {
using V = __m256;
constexpr int kLanes = 8;
inline V VZero() { return _mm256_setzero_ps(); }
inline V VLoad(const float* p) { return _mm256_loadu_ps(p); }
inline void VStore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V VSet1(float x) { return _mm256_set1_ps(x); }
inline V VMul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V VFma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline void VStoreFirst(float* p, V v, int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes), v);
}
constexpr int kYRows = 6, kYVecs = 2;          // y tile: rows x registers along headdim
constexpr int kStateRows = 6, kStateVecs = 2;  // state tile: rows x registers along d_state
#include "kernels/cpu/ssd_forms.inc"
}  // namespace ssd256
#pragma GCC pop_options
#endif  // __x86_64__

// C B^T for one piece and group, lower triangle (s <= t), as axpys over s.
void ComputeCb(const Tensor& b, const Tensor& c, int64_t row0, int64_t length, int64_t g,
               int64_t n_count, float* cb, std::vector<float>& bt, SsdForm form) {
#if defined(__x86_64__)
  if (form != SsdForm::kPortable) {
    const int64_t ldb = (length + 63) / 64 * 64;
    bt.assign(static_cast<size_t>(n_count * ldb), 0.0f);
    for (int64_t s = 0; s < length; ++s) {
      const float* bs = RowF32(b, row0 + s) + g * n_count;
      for (int64_t n = 0; n < n_count; ++n) bt[n * ldb + s] = bs[n];
    }
    const auto cb_form = form == SsdForm::kAvx512 ? &ssd512::Cb : &ssd256::Cb;
    cb_form(RowF32(c, row0) + g * n_count, c.stride(0), bt.data(), ldb, n_count, length, cb);
    return;
  }
#endif
  bt.resize(static_cast<size_t>(n_count * length));
  for (int64_t s = 0; s < length; ++s) {
    const float* bs = RowF32(b, row0 + s) + g * n_count;
    for (int64_t n = 0; n < n_count; ++n) bt[n * length + s] = bs[n];
  }
  for (int64_t t = 0; t < length; ++t) {
    float* row = cb + t * length;
    std::memset(row, 0, sizeof(float) * length);
    const float* ct = RowF32(c, row0 + t) + g * n_count;
    for (int64_t n = 0; n < n_count; ++n) Axpy(ct[n], bt.data() + n * length, row, t + 1);
  }
}

struct ChunkWorkspace {
  std::vector<float> h_t, y, dtv, coef;
  std::vector<float> scratch;  // the vector forms': a y tile's decay coefficients, then w x
  std::vector<float> weights;  // DecayRows
  std::vector<double> cum;
};

// One SSD piece for one head: writes y rows [row0, row0 + length) and advances h. With
// `no_prior` (h is a fresh sequence's zero state) the off-chunk part is left out, as
// mamba_ssm leaves it out without initial states: each of its sums would stay +0.
void ChunkStep(const Tensor& x, const Tensor& dt, const Tensor& b, const Tensor& c, const float* cb,
               const Dims& dims, int64_t head, float a, float d, float bias,
               const SsmScanOptions& options, int64_t row0, int64_t length, float* h, bool no_prior,
               const Tensor& y, ChunkWorkspace& ws, SsdForm form) {
  const int64_t P = dims.headdim, N = dims.d_state, g = dims.GroupOf(head);
  ws.h_t.resize(static_cast<size_t>(N * P));
  ws.y.resize(static_cast<size_t>(length * P));
  ws.dtv.resize(static_cast<size_t>(length));
  ws.coef.resize(static_cast<size_t>(length));
  ws.cum.resize(static_cast<size_t>(length));
  double cum = 0.0;
  for (int64_t s = 0; s < length; ++s) {
    ws.dtv[s] = DtFast(RowF32(dt, row0 + s)[head], bias, options);
    cum += static_cast<double>(a * ws.dtv[s]);
    ws.cum[s] = cum;
  }
  DecayRows decay(cb, length, ws.cum.data(), ws.dtv.data(), ws.weights);
  // Off-chunk part: y[t] = exp(cum[t]) * (h_prev C[t]), as axpys over p with h transposed.
  const int64_t n_prior = no_prior ? 0 : N;
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t n = 0; n < n_prior; ++n) ws.h_t[n * P + p] = h[p * N + n];
  }
#if defined(__x86_64__)
  if (form != SsdForm::kPortable) {
    const bool wide = form == SsdForm::kAvx512;
    const auto y_piece = wide ? &ssd512::YPiece : &ssd256::YPiece;
    const auto state_update = wide ? &ssd512::StateUpdate : &ssd256::StateUpdate;
    const float* x0 = RowF32(x, row0) + head * P;
    constexpr int64_t kMaxYRows = std::max(ssd512::kYRows, ssd256::kYRows);
    ws.scratch.resize(static_cast<size_t>(std::max(kMaxYRows, P) * length));
    y_piece(RowF32(c, row0) + g * N, c.stride(0), ws.h_t.data(), n_prior, P, decay, ws.cum.data(),
            x0, x.stride(0), length, d, RowF32(y, row0) + head * P, y.stride(0), ws.scratch.data());
    const double cum_end = ws.cum[length - 1];
    for (int64_t s = 0; s < length; ++s) {
      ws.coef[s] = ExpF(static_cast<float>(cum_end - ws.cum[s])) * ws.dtv[s];
    }
    state_update(h, P, N, ExpF(static_cast<float>(cum_end)), ws.coef.data(), x0, x.stride(0),
                 RowF32(b, row0) + g * N, b.stride(0), length, ws.scratch.data());
    return;
  }
#endif
  for (int64_t t = 0; t < length; ++t) {
    float* yt = ws.y.data() + t * P;
    std::memset(yt, 0, sizeof(float) * P);
    const float* ct = RowF32(c, row0 + t) + g * N;
    for (int64_t n = 0; n < n_prior; ++n) Axpy(ct[n], ws.h_t.data() + n * P, yt, P);
    ScaleInPlace(ExpF(static_cast<float>(ws.cum[t])), yt, P);
    // Intra-chunk part, s = 0..t in order.
    decay.Row(t, ws.coef.data());
    for (int64_t s = 0; s <= t; ++s) Axpy(ws.coef[s], RowF32(x, row0 + s) + head * P, yt, P);
    const float* xt = RowF32(x, row0 + t) + head * P;
    float* out = RowF32(y, row0 + t) + head * P;
    for (int64_t p = 0; p < P; ++p) out[p] = yt[p] + d * xt[p];
  }
  // The state at the piece's end: h = exp(cum_end) h + sum_s exp(cum_end - cum[s]) dt x B.
  const double cum_end = ws.cum[length - 1];
  std::vector<float>& w = ws.coef;
  for (int64_t s = 0; s < length; ++s) {
    w[s] = ExpF(static_cast<float>(cum_end - ws.cum[s])) * ws.dtv[s];
  }
  const float decay_end = ExpF(static_cast<float>(cum_end));
  for (int64_t p = 0; p < P; ++p) {
    float* hp = h + p * N;
    ScaleInPlace(decay_end, hp, N);
    for (int64_t s = 0; s < length; ++s) {
      const float coef = w[s] * (RowF32(x, row0 + s) + head * P)[p];
      Axpy(coef, RowF32(b, row0 + s) + g * N, hp, N);
    }
  }
}

// ---------------------------------------------------------------- bf16 products
// The SSD piece as three Bf16Gemm products, every operand rounded to bf16 (round to nearest
// even) and every sum fp32, over the piece padded with zeros to Lp = a multiple of 32 rows:
//   per piece and group (shared by its heads): cb = C B^T, and B pair-interleaved over s;
//   per head: y = [e_t C_t | coef_t] . [h_prev ; x] with e_t = exp(cum_t) and
//     coef_t[s] = cb[t, s] exp(cum_t - cum_s) dt_s for s <= t (0 above), then + D x_t;
//     h = exp(cum_end) h + (w x)^T B with w_s = exp(cum_end - cum_s) dt_s.
// The exps of coef are factored per block of 32 rows starting at r: exp(cum_t - cum_s) =
// exp(cum_t - cum_r) exp(cum_r - cum_s) for s < r (both factors <= 1, cum falls), and
// taken directly within the block.
#if defined(__x86_64__)
constexpr int64_t kBf16Block = 32;

inline int64_t PaddedLength(int64_t length) {
  return (length + kBf16Block - 1) / kBf16Block * kBf16Block;
}

#define COIL_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// dst[i] = bf16(src[i]) for i < n (n a multiple of 16).
COIL_AVX512_BF16 void ToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
  }
}

// dst[i] = bf16(scale src[i]) for i < n (n a multiple of 16).
COIL_AVX512_BF16 void ScaledToBf16(const float* src, float scale, int64_t n, uint16_t* dst) {
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + i), sv)));
  }
}

// dst[i] = (bf16(r0[i]), bf16(r1[i])) as one word, low half first, for i < n (n a multiple
// of 16); r1 null reads zeros.
COIL_AVX512_BF16 void PairRows(const float* r0, const float* r1, int64_t n, uint32_t* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + i)));
    __m512i word = lo;
    if (r1 != nullptr) {
      const __m512i hi =
          _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r1 + i)));
      word = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
    _mm512_storeu_si512(dst + i, word);
  }
}

// dst[c, r] = src[r, c] for 32-bit values, rows and cols multiples of 16.
COIL_AVX512_BF16 void TransposeWords(const uint32_t* src, int64_t ld_src, int64_t rows,
                                     int64_t cols, uint32_t* dst, int64_t ld_dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512 v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = _mm512_castsi512_ps(_mm512_loadu_si512(src + (r0 + i) * ld_src + c0));
      }
      Transpose16x16(v);
      for (int i = 0; i < 16; ++i) {
        _mm512_storeu_si512(dst + (c0 + i) * ld_dst + r0, _mm512_castps_si512(v[i]));
      }
    }
  }
}

// out[s] = (cb[s] u) v[s] for s in [0, n).
COIL_VECTORIZE void FactoredCoefficients(const float* cb, float u, const float* v, float* out,
                                         int64_t n) {
  for (int64_t s = 0; s < n; ++s) out[s] = cb[s] * u * v[s];
}

// The diagonal block's decays: out[t, s] = exp(cum[t] - cum[s]) dtv[s] for t, s < 32
// (values above the diagonal are never used).
COIL_VECTORIZE void BlockDecays(const double* cum, const float* dtv, float* out) {
  for (int64_t t = 0; t < kBf16Block; ++t) {
    const double cum_t = cum[t];
    for (int64_t s = 0; s < kBf16Block; ++s) {
      out[t * kBf16Block + s] = ExpF(static_cast<float>(cum_t - cum[s])) * dtv[s];
    }
  }
}

// out[s] = cb[s] d[s] for s <= last, 0 above, over one row of the diagonal block.
COIL_VECTORIZE void MaskedProducts(const float* cb, const float* d, int64_t last, float* out) {
  for (int64_t s = 0; s < kBf16Block; ++s) out[s] = s <= last ? cb[s] * d[s] : 0.0f;
}

// out[s] = exp(ref - cum[s]) dtv[s] for s in [0, n).
COIL_VECTORIZE void ScaledDecays(const double* cum, double ref, const float* dtv, float* out,
                                 int64_t n) {
  for (int64_t s = 0; s < n; ++s) out[s] = ExpF(static_cast<float>(ref - cum[s])) * dtv[s];
}

// Phase 1 of the bf16 form for one piece and group: cb (fp32 [Lp][Lp], each block of 32
// rows up to its diagonal block) and bv (B pair-interleaved over s, [Lp/2][N] words).
struct Bf16GroupWork {
  std::vector<uint16_t> c_rows;    // [Lp][N] bf16
  std::vector<uint32_t> b_words;   // [Lp][N/2]: B rows as bf16 pairs over n
  std::vector<uint32_t> bt_words;  // [N/2][Lp]: the same, transposed (C B^T's B operand)
};

void PrepareBf16Group(Bf16Products form, const Tensor& b, const Tensor& c, int64_t row0,
                      int64_t length, int64_t g, int64_t n_count, float* cb, uint32_t* bv,
                      Bf16GroupWork& work) {
  const int64_t lp = PaddedLength(length), half = n_count / 2;
  work.c_rows.assign(static_cast<size_t>(lp * n_count), 0);
  work.b_words.assign(static_cast<size_t>(lp * half), 0);
  work.bt_words.resize(static_cast<size_t>(half * lp));
  for (int64_t s = 0; s < length; ++s) {
    ToBf16(RowF32(c, row0 + s) + g * n_count, n_count, work.c_rows.data() + s * n_count);
    ToBf16(RowF32(b, row0 + s) + g * n_count, n_count,
           reinterpret_cast<uint16_t*>(work.b_words.data() + s * half));
  }
  TransposeWords(work.b_words.data(), half, lp, half, work.bt_words.data(), lp);
  for (int64_t m0 = 0; m0 < lp; m0 += kBf16Block) {
    Bf16Gemm(form, kBf16Block, m0 + kBf16Block, n_count, work.c_rows.data() + m0 * n_count, n_count,
             work.bt_words.data(), lp, cb + m0 * lp, lp, /*accumulate=*/false);
  }
  for (int64_t j = 0; j < lp / 2; ++j) {
    uint32_t* row = bv + j * n_count;
    if (2 * j >= length) {
      std::memset(row, 0, sizeof(uint32_t) * n_count);
      continue;
    }
    PairRows(RowF32(b, row0 + 2 * j) + g * n_count,
             2 * j + 1 < length ? RowF32(b, row0 + 2 * j + 1) + g * n_count : nullptr, n_count,
             row);
  }
}

struct Bf16HeadWork {
  std::vector<uint16_t> a;    // [Lp][N + Lp]: rows [e_t C_t | coef_t]
  std::vector<uint32_t> hx;   // [N/2 + Lp/2][P] words: h_prev then x, pair-interleaved over k
  std::vector<uint32_t> hw;   // [P][N/2]: h_prev rows as bf16 pairs over n
  std::vector<uint16_t> xwt;  // [P][Lp]: (w_s x[s, p]) transposed
  std::vector<float> y, row, v, dtv, diag;
  std::vector<double> cum;
};

// (w_s x[s, p]) for s < length (0 beyond), transposed into xwt [P][Lp] bf16.
COIL_AVX512_BF16 void ScaledTransposeToBf16(const float* x0, int64_t x_stride, const float* w,
                                            int64_t length, int64_t lp, int64_t p_count,
                                            uint16_t* xwt) {
  for (int64_t s0 = 0; s0 < lp; s0 += 16) {
    for (int64_t p0 = 0; p0 < p_count; p0 += 16) {
      __m512 v[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t s = s0 + i;
        v[i] = s < length
                   ? _mm512_mul_ps(_mm512_set1_ps(w[s]), _mm512_loadu_ps(x0 + s * x_stride + p0))
                   : _mm512_setzero_ps();
      }
      Transpose16x16(v);
      for (int i = 0; i < 16; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xwt + (p0 + i) * lp + s0),
                            (__m256i)_mm512_cvtneps_pbh(v[i]));
      }
    }
  }
}

// y[t] += d x[t] over p_count columns.
COIL_VECTORIZE void AddScaled(const float* in, float d, const float* x, float* out,
                              int64_t p_count) {
  for (int64_t p = 0; p < p_count; ++p) out[p] = in[p] + d * x[p];
}

// One SSD piece for one head in the bf16 form: writes y rows [row0, row0 + length) and
// advances h. cb and bv are the piece's group's (PrepareBf16Group).
void ChunkStepBf16(Bf16Products form, const Tensor& x, const Tensor& dt, const Tensor& c,
                   const float* cb, const uint32_t* bv, const Dims& dims, int64_t head, float a,
                   float d, float bias, const SsmScanOptions& options, int64_t row0, int64_t length,
                   float* h, const Tensor& y, Bf16HeadWork& ws) {
  const int64_t P = dims.headdim, N = dims.d_state, g = dims.GroupOf(head);
  const int64_t lp = PaddedLength(length), lda = N + lp, half = N / 2;
  ws.dtv.assign(static_cast<size_t>(lp), 0.0f);
  ws.cum.assign(static_cast<size_t>(lp), 0.0);
  double cum = 0.0;
  for (int64_t s = 0; s < length; ++s) {
    ws.dtv[s] = DtFast(RowF32(dt, row0 + s)[head], bias, options);
    cum += static_cast<double>(a * ws.dtv[s]);
    ws.cum[s] = cum;
  }
  // [h_prev ; x], pair-interleaved over k: h_prev's rows as pairs over n, transposed; x's
  // rows paired over s.
  ws.hw.resize(static_cast<size_t>(P * half));
  ws.hx.resize(static_cast<size_t>((half + lp / 2) * P));
  for (int64_t p = 0; p < P; ++p) {
    ToBf16(h + p * N, N, reinterpret_cast<uint16_t*>(ws.hw.data() + p * half));
  }
  TransposeWords(ws.hw.data(), half, P, half, ws.hx.data(), P);
  const float* x0 = RowF32(x, row0) + head * P;
  const int64_t xs = x.stride(0);
  for (int64_t j = 0; j < lp / 2; ++j) {
    uint32_t* row = ws.hx.data() + (half + j) * P;
    if (2 * j >= length) {
      std::memset(row, 0, sizeof(uint32_t) * P);
      continue;
    }
    PairRows(x0 + 2 * j * xs, 2 * j + 1 < length ? x0 + (2 * j + 1) * xs : nullptr, P, row);
  }
  // y, a block of 32 rows at a time: its rows of A, then its product over k < N + m0 + 32.
  ws.a.resize(static_cast<size_t>(lp * lda));
  ws.y.resize(static_cast<size_t>(lp * P));
  ws.row.resize(static_cast<size_t>(std::max(N, lp)));
  ws.v.resize(static_cast<size_t>(lp));
  ws.diag.resize(kBf16Block * kBf16Block);
  for (int64_t m0 = 0; m0 < lp; m0 += kBf16Block) {
    const int64_t k_block = N + m0 + kBf16Block;
    const double ref = m0 < length ? ws.cum[m0] : 0.0;
    ScaledDecays(ws.cum.data(), ref, ws.dtv.data(), ws.v.data(), std::min(m0, length));
    BlockDecays(ws.cum.data() + m0, ws.dtv.data() + m0, ws.diag.data());
    for (int64_t t = m0; t < m0 + kBf16Block; ++t) {
      uint16_t* arow = ws.a.data() + t * lda;
      if (t >= length) {
        std::memset(arow, 0, sizeof(uint16_t) * k_block);
        continue;
      }
      const float* ct = RowF32(c, row0 + t) + g * N;
      ScaledToBf16(ct, ExpF(static_cast<float>(ws.cum[t])), N, arow);
      float* coef = ws.row.data();
      const float* cbt = cb + t * lp;
      FactoredCoefficients(cbt, ExpF(static_cast<float>(ws.cum[t] - ref)), ws.v.data(), coef, m0);
      MaskedProducts(cbt + m0, ws.diag.data() + (t - m0) * kBf16Block, t - m0, coef + m0);
      ToBf16(coef, m0 + kBf16Block, arow + N);
    }
    Bf16Gemm(form, kBf16Block, P, k_block, ws.a.data() + m0 * lda, lda, ws.hx.data(), P,
             ws.y.data() + m0 * P, P, /*accumulate=*/false);
    for (int64_t t = m0; t < std::min(length, m0 + kBf16Block); ++t) {
      AddScaled(ws.y.data() + t * P, d, x0 + t * xs, RowF32(y, row0 + t) + head * P, P);
    }
  }
  // The state at the piece's end.
  const double cum_end = ws.cum[length - 1];
  ScaledDecays(ws.cum.data(), cum_end, ws.dtv.data(), ws.v.data(), length);
  ws.xwt.resize(static_cast<size_t>(P * lp));
  ScaledTransposeToBf16(x0, xs, ws.v.data(), length, lp, P, ws.xwt.data());
  ScaleInPlace(ExpF(static_cast<float>(cum_end)), h, P * N);
  Bf16Gemm(form, P, N, lp, ws.xwt.data(), lp, bv, N, h, N, /*accumulate=*/true);
}
#endif  // __x86_64__

// Calls fn(row0, length) for each chunk-aligned piece of sequence s's run.
template <typename Fn>
void ForEachPiece(const RecurrentBatch& batch, int s, int64_t chunk, Fn&& fn) {
  int64_t pos = batch.start_positions[s];
  int64_t row = batch.run_begin(s);
  const int64_t end = row + batch.run_length(s);
  while (row < end) {
    const int64_t next_boundary = (pos / chunk + 1) * chunk;
    const int64_t length = std::min(end - row, next_boundary - pos);
    fn(row, length);
    row += length;
    pos += length;
  }
}

}  // namespace

void CpuSsmScan(const CpuContext& ctx, const Tensor& x, const Tensor& dt, const Tensor& a_log,
                const Tensor& b, const Tensor& c, const Tensor& d, const Tensor& dt_bias,
                const SsmScanOptions& options, const RecurrentBatch& batch, const Tensor& ssm_state,
                const Tensor& y) {
  Dims dims;
  dims.heads = ssm_state.dim(1);
  dims.headdim = ssm_state.dim(2);
  dims.d_state = ssm_state.dim(3);
  dims.groups = b.dim(1) / dims.d_state;
  dims.heads_per_group =
      options.heads_per_group > 0 ? options.heads_per_group : dims.heads / dims.groups;
  dims.first_head = options.heads_per_group > 0 ? options.first_head_in_group : 0;
  dims.state_rows = ssm_state.dim(0) - 1;
  const int64_t P = dims.headdim, N = dims.d_state, H = dims.heads;
  const int num_seqs = batch.num_seqs();
  // The AVX-512 forms of the SSD piece need whole vectors along headdim and d_state.
  // The vector forms need whole 16-value blocks along headdim and d_state.
  const CpuFeatures& cpu = CpuFeatures::Get();
  const SsdForm vector_form = P % 16 != 0 || N % 16 != 0 ? SsdForm::kPortable
                              : cpu.avx512               ? SsdForm::kAvx512
                              : cpu.avx2_fma             ? SsdForm::kAvx2
                                                         : SsdForm::kPortable;

  // The bf16 form needs whole tiles along headdim and pairs of 16 along d_state.
  const Bf16Products form = options.bf16_products && !ctx.use_ref && P % 16 == 0 && N % 32 == 0
                                ? HostBf16Products()
                                : Bf16Products::kNone;
  const bool bf16 = form != Bf16Products::kNone;

  // Phase 1: C B^T of every SSD piece and group (shared by the group's heads).
  std::vector<Piece> pieces;
  std::vector<int64_t> first_piece(num_seqs + 1, 0);
  int64_t cb_floats = 0, bv_words = 0;
  for (int s = 0; s < num_seqs; ++s) {
    first_piece[s] = static_cast<int64_t>(pieces.size());
    if (ctx.use_ref) continue;
    ForEachPiece(batch, s, options.chunk_size, [&](int64_t row0, int64_t length) {
      if (length < 2) return;
      pieces.push_back({row0, length, cb_floats, bv_words});
#if defined(__x86_64__)
      if (bf16) {
        const int64_t lp = PaddedLength(length);
        cb_floats += dims.groups * lp * lp;
        bv_words += dims.groups * lp / 2 * N;
        return;
      }
#endif
      cb_floats += dims.groups * length * length;
    });
  }
  first_piece[num_seqs] = static_cast<int64_t>(pieces.size());
  // Kept from call to call on the calling thread: every element read is written first, and
  // fresh pages would cost each prefill their faults.
  // (The lambdas below run on the pool's threads too: they take the calling thread's
  // storage through these pointers, never by naming the thread_local.)
  thread_local std::vector<float> cb_storage;
  thread_local std::vector<uint32_t> bv_storage;
  if (cb_storage.size() < static_cast<size_t>(cb_floats)) {
    cb_storage.resize(static_cast<size_t>(cb_floats));
  }
  if (bv_storage.size() < static_cast<size_t>(bv_words)) {
    bv_storage.resize(static_cast<size_t>(bv_words));
  }
  float* const cb = cb_storage.data();
  uint32_t* const bv = bv_storage.data();
  // The offset of group g's C B^T within a piece's.
  auto cb_of = [&](const Piece& piece, int64_t g) {
#if defined(__x86_64__)
    if (bf16) {
      const int64_t lp = PaddedLength(piece.length);
      return piece.cb_offset + g * lp * lp;
    }
#endif
    return piece.cb_offset + g * piece.length * piece.length;
  };
  const int64_t cb_items = static_cast<int64_t>(pieces.size()) * dims.groups;
  ctx.pool->ParallelFor(cb_items, 1, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    if (bf16) {
      Bf16GemmScope scope(form);
      thread_local Bf16GroupWork work;  // kept: fresh pages would cost each call their faults
      for (int64_t item = begin; item < end; ++item) {
        const Piece& piece = pieces[item / dims.groups];
        const int64_t g = item % dims.groups;
        PrepareBf16Group(form, b, c, piece.row0, piece.length, g, N, cb + cb_of(piece, g),
                         bv + piece.bv_offset + g * PaddedLength(piece.length) / 2 * N, work);
      }
      return;
    }
#endif
    std::vector<float> bt;
    for (int64_t item = begin; item < end; ++item) {
      const Piece& piece = pieces[item / dims.groups];
      const int64_t g = item % dims.groups;
      ComputeCb(b, c, piece.row0, piece.length, g, N, cb + cb_of(piece, g), bt, vector_form);
    }
  });

  // Phase 2: each (sequence, head) through its pieces in order. A bf16 state is widened into
  // an fp32 copy, rounded to bf16 after every piece (at each chunk boundary and at the run's
  // end, so a prompt split at chunk multiples rounds where the whole prompt does) and
  // stored rounded; a decode token on AVX-512 updates the bf16 row in place instead, with
  // the same bits.
  const bool bf16_state = ssm_state.dtype() == DType::kBF16;
  auto state_of = [&](int64_t item) -> void* {
    const int s = static_cast<int>(item / H);
    const int32_t slot = batch.slots[s];
    if (slot == dims.state_rows) return nullptr;
    const int64_t offset = (slot * H + item % H) * P * N;
    return bf16_state ? static_cast<void*>(ssm_state.data<uint16_t>() + offset)
                      : static_cast<void*>(ssm_state.data<float>() + offset);
  };
  ctx.pool->ParallelFor(int64_t{num_seqs} * H, 1, [&](int64_t begin, int64_t end) {
    Bf16GemmScope scope(form);
    ChunkWorkspace ws;
#if defined(__x86_64__)
    thread_local Bf16HeadWork bf16_ws;  // kept: fresh pages would cost each call their faults
#endif
    std::vector<float> scratch_state;
    for (int64_t item = begin; item < end; ++item) {
      const int s = static_cast<int>(item / H);
      const int64_t head = item % H;
      const int64_t g = dims.GroupOf(head);
      void* const slot_state = state_of(item);  // null: the scratch row, never read or written
      if (slot_state != nullptr && batch.fresh[s]) {
        std::memset(slot_state, 0, (bf16_state ? 2 : 4) * P * N);
      }
      const float a = -std::exp(a_log.data<float>()[head]);
      const float dh = d.data<float>()[head];
      const float bias = dt_bias.data<float>()[head];
#if defined(__x86_64__)
      if (vector_form != SsdForm::kPortable && !ctx.use_ref && batch.run_length(s) == 1 &&
          slot_state != nullptr) {
        const int64_t t = batch.run_begin(s);
        const float dtv = DtFast(RowF32(dt, t)[head], bias, options);
        const float* xt = RowF32(x, t) + head * P;
        const float* bt = RowF32(b, t) + g * N;
        const float* ct = RowF32(c, t) + g * N;
        float* yt = RowF32(y, t) + head * P;
        const void* next = item + 1 < end ? state_of(item + 1) : nullptr;
        const float decay = ExpF(a * dtv);
        const bool avx512 = vector_form == SsdForm::kAvx512;
        if (avx512 && bf16_state) {
          auto* const state = static_cast<uint16_t*>(slot_state);
          const auto* const next_state = static_cast<const uint16_t*>(next);
          if (cpu.avx512_bf16) {
            RecurrenceStepAvx512<uint16_t, true>(state, xt, bt, ct, decay, dtv, dh, P, N, yt,
                                                 next_state);
          } else {
            RecurrenceStepAvx512(state, xt, bt, ct, decay, dtv, dh, P, N, yt, next_state);
          }
        } else if (avx512) {
          RecurrenceStepAvx512(static_cast<float*>(slot_state), xt, bt, ct, decay, dtv, dh, P, N,
                               yt, static_cast<const float*>(next));
        } else if (bf16_state) {
          RecurrenceStepAvx2(static_cast<uint16_t*>(slot_state), xt, bt, ct, decay, dtv, dh, P, N,
                             yt, static_cast<const uint16_t*>(next));
        } else {
          RecurrenceStepAvx2(static_cast<float*>(slot_state), xt, bt, ct, decay, dtv, dh, P, N, yt,
                             static_cast<const float*>(next));
        }
        continue;
      }
#endif
      float* h;
      if (slot_state == nullptr) {
        scratch_state.assign(static_cast<size_t>(P * N), 0.0f);
        h = scratch_state.data();
      } else if (bf16_state) {
        scratch_state.resize(static_cast<size_t>(P * N));
        h = scratch_state.data();
        WidenBf16(static_cast<const uint16_t*>(slot_state), h, P * N);
      } else {
        h = static_cast<float*>(slot_state);
      }
      int64_t piece_index = first_piece[s];
      // The reference mode runs the recurrence over the whole run, except where a bf16 state
      // must be rounded at the chunk boundaries.
      const int64_t piece_chunk =
          ctx.use_ref && !bf16_state ? int64_t{1} << 40 : options.chunk_size;
      // A fresh sequence (or the scratch row) starts from zeros, until its first piece.
      bool zero_state = slot_state == nullptr || batch.fresh[s] != 0;
      ForEachPiece(batch, s, piece_chunk, [&](int64_t row0, int64_t length) {
        if (!ctx.use_ref && length >= 2) {
          const Piece& piece = pieces[piece_index++];
#if defined(__x86_64__)
          if (bf16) {
            ChunkStepBf16(form, x, dt, c, cb + cb_of(piece, g),
                          bv + piece.bv_offset + g * PaddedLength(length) / 2 * N, dims, head, a,
                          dh, bias, options, row0, length, h, y, bf16_ws);
          } else {
            ChunkStep(x, dt, b, c, cb + cb_of(piece, g), dims, head, a, dh, bias, options, row0,
                      length, h, zero_state, y, ws, vector_form);
          }
#else
          ChunkStep(x, dt, b, c, cb + cb_of(piece, g), dims, head, a, dh, bias, options, row0,
                    length, h, zero_state, y, ws, vector_form);
#endif
        } else {
          for (int64_t t = row0; t < row0 + length; ++t) {
            const float* xt = RowF32(x, t) + head * P;
            const float* bt = RowF32(b, t) + g * N;
            const float* ct = RowF32(c, t) + g * N;
            float* yt = RowF32(y, t) + head * P;
            const float dtr = RowF32(dt, t)[head];
            if (ctx.use_ref) {
              const float dtv = DtRef(dtr, bias, options);
              RecurrenceStepRef(h, xt, bt, ct, std::exp(a * dtv), dtv, dh, P, N, yt);
            } else {
              const float dtv = DtFast(dtr, bias, options);
              RecurrenceStep(h, xt, bt, ct, ExpF(a * dtv), dtv, dh, P, N, yt);
            }
          }
        }
        if (bf16_state) RoundToBf16(h, P * N);
        zero_state = false;
      });
      if (bf16_state && slot_state != nullptr) {
        NarrowToBf16(h, static_cast<uint16_t*>(slot_state), P * N);
      }
    }
  });
}

}  // namespace coil
