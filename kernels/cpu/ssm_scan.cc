// The Mamba2 selective scan over varlen runs with state slots. Two forms:
//  - the recurrence, token by token (mamba_ssm selective_state_update; llama.cpp
//    ggml_ssm_scan): runs of one token, and every token in the reference mode;
//  - the chunked SSD form (mamba_ssm ssd_combined), for pieces of two or more tokens: within
//    a chunk, y = (C B^T . L) (dt x) + exp(cumsum A dt) C h_prev, then the state is carried to
//    the chunk's end. A piece never crosses a multiple of chunk_size of the absolute
//    position, so a prompt split at chunk multiples computes the same pieces as whole.
// Each (sequence, head) is computed by one thread in a fixed order; the batch and the
// thread count never change a result.
#include <algorithm>
#include <cmath>
#include <cstring>
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

struct Dims {
  int64_t heads, headdim, d_state, groups, heads_per_group, state_rows;
};

// A chunk-aligned piece of a sequence's run that takes the SSD form.
struct Piece {
  int64_t row0;       // first packed row
  int64_t length;     // >= 2
  int64_t cb_offset;  // into the C B^T workspace: [groups][length][length]
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


#if defined(__x86_64__)
#define COIL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

// The AVX-512 forms of the SSD piece's three products (used when headdim and d_state are
// multiples of 16). Each output element still sums in one fixed order (n, then s,
// ascending, with fused multiply-adds), whatever the batch.

// Rows t .. t + R - 1 of y over columns [p0, p0 + 16 NV):
// y[t] = e_t (C[t] h) + sum_{s <= t} coef_t[s] x[s] + d x[t]. Computing R rows together
// shares the loads of h and x and gives the FMA chains R times the independence; each
// element still sums over n, then s, in ascending order.
template <int R, int NV>
COIL_AVX512 void YBlock(const float* const* ct, const float* h_t, int64_t n_count, int64_t ldh,
                        const float* e_t, const float* const* coef, const float* x0,
                        int64_t x_stride, int64_t count, float d, float* const* out) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t n = 0; n < n_count; ++n) {
    const float* row = h_t + n * ldh;
    __m512 hv[NV];
    for (int v = 0; v < NV; ++v) hv[v] = _mm512_loadu_ps(row + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 cn = _mm512_set1_ps(ct[r][n]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(cn, hv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 et = _mm512_set1_ps(e_t[r]);
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_mul_ps(acc[r][v], et);
  }
  // s < count is shared by all R rows; row r also takes s = count .. count + r.
  for (int64_t s = 0; s < count + R - 1; ++s) {
    const float* xs = x0 + s * x_stride;
    __m512 xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_ps(xs + 16 * v);
    for (int r = 0; r < R; ++r) {
      if (s >= count + r) continue;
      const __m512 cs = _mm512_set1_ps(coef[r][s]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(cs, xv[v], acc[r][v]);
    }
  }
  const __m512 dv = _mm512_set1_ps(d);
  for (int r = 0; r < R; ++r) {
    const float* xt = x0 + (count - 1 + r) * x_stride;
    for (int v = 0; v < NV; ++v) {
      _mm512_storeu_ps(out[r] + 16 * v,
                       _mm512_fmadd_ps(dv, _mm512_loadu_ps(xt + 16 * v), acc[r][v]));
    }
  }
}

// Rows t .. t + R - 1 of y for one head: `count` = t + 1.
template <int R>
COIL_AVX512 void YRowsAvx512(const float* const* ct, const float* h_t, int64_t n_count,
                             int64_t p_count, const float* e_t, const float* const* coef,
                             const float* x0, int64_t x_stride, int64_t count, float d,
                             float* const* out) {
  float* shifted[R];
  for (int64_t p0 = 0; p0 < p_count;) {
    const int64_t width = p0 + 64 <= p_count ? 64 : 16;
    for (int r = 0; r < R; ++r) shifted[r] = out[r] + p0;
    if (width == 64) {
      YBlock<R, 4>(ct, h_t + p0, n_count, p_count, e_t, coef, x0 + p0, x_stride, count, d,
                   shifted);
    } else {
      YBlock<R, 1>(ct, h_t + p0, n_count, p_count, e_t, coef, x0 + p0, x_stride, count, d,
                   shifted);
    }
    p0 += width;
  }
}

// h[p + r, n0 .. n0 + 16 NV) = decay h + sum_s (w[s] x[s, p + r]) b[s] for r < R: R rows
// share the loads of b.
template <int R, int NV>
COIL_AVX512 void StateBlock(float* hp, int64_t ldh, float decay, const float* w,
                            const float* x0, int64_t x_stride, const float* b0,
                            int64_t b_stride, int64_t count) {
  __m512 acc[R][NV];
  const __m512 dv = _mm512_set1_ps(decay);
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_mul_ps(_mm512_loadu_ps(hp + r * ldh + 16 * v), dv);
  }
  for (int64_t s = 0; s < count; ++s) {
    const float* bs = b0 + s * b_stride;
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bs + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 cs = _mm512_set1_ps(w[s] * x0[s * x_stride + r]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(cs, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(hp + r * ldh + 16 * v, acc[r][v]);
  }
}

COIL_AVX512 void StateUpdateAvx512(float* h, int64_t p_count, int64_t n_count, float decay,
                                   const float* w, const float* x0, int64_t x_stride,
                                   const float* b0, int64_t b_stride, int64_t count) {
  for (int64_t p = 0; p < p_count; p += 2) {
    const bool pair = p + 1 < p_count;
    int64_t n0 = 0;
    for (; n0 + 64 <= n_count; n0 += 64) {
      if (pair) {
        StateBlock<2, 4>(h + p * n_count + n0, n_count, decay, w, x0 + p, x_stride, b0 + n0,
                         b_stride, count);
      } else {
        StateBlock<1, 4>(h + p * n_count + n0, n_count, decay, w, x0 + p, x_stride, b0 + n0,
                         b_stride, count);
      }
    }
    for (; n0 < n_count; n0 += 16) {
      if (pair) {
        StateBlock<2, 1>(h + p * n_count + n0, n_count, decay, w, x0 + p, x_stride, b0 + n0,
                         b_stride, count);
      } else {
        StateBlock<1, 1>(h + p * n_count + n0, n_count, decay, w, x0 + p, x_stride, b0 + n0,
                         b_stride, count);
      }
    }
  }
}

// cb[t, s] = C[t] . B[s] for s in [0, t] (and up to the next multiple of 16 below length),
// from bt = B transposed, rows padded to ldb (a multiple of 64).
COIL_AVX512 void CbAvx512(const float* c0, int64_t c_stride, const float* bt, int64_t ldb,
                          int64_t n_count, int64_t length, float* cb) {
  for (int64_t t = 0; t < length; ++t) {
    const float* ct = c0 + t * c_stride;
    for (int64_t s0 = 0; s0 <= t; s0 += 64) {
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
      for (int64_t n = 0; n < n_count; ++n) {
        const __m512 cn = _mm512_set1_ps(ct[n]);
        const float* row = bt + n * ldb + s0;
        for (int v = 0; v < 4; ++v) acc[v] = _mm512_fmadd_ps(cn, _mm512_loadu_ps(row + 16 * v), acc[v]);
      }
      for (int v = 0; v < 4; ++v) {
        const int64_t first = s0 + 16 * v;
        if (first >= length) break;
        const int64_t valid = std::min<int64_t>(16, length - first);
        _mm512_mask_storeu_ps(cb + t * length + first,
                              static_cast<__mmask16>((1u << valid) - 1), acc[v]);
      }
    }
  }
}
#endif  // __x86_64__

// C B^T for one piece and group, lower triangle (s <= t), as axpys over s.
void ComputeCb(const Tensor& b, const Tensor& c, int64_t row0, int64_t length, int64_t g,
               int64_t n_count, float* cb, std::vector<float>& bt, bool avx512) {
#if defined(__x86_64__)
  if (avx512) {
    const int64_t ldb = (length + 63) / 64 * 64;
    bt.assign(static_cast<size_t>(n_count * ldb), 0.0f);
    for (int64_t s = 0; s < length; ++s) {
      const float* bs = RowF32(b, row0 + s) + g * n_count;
      for (int64_t n = 0; n < n_count; ++n) bt[n * ldb + s] = bs[n];
    }
    CbAvx512(RowF32(c, row0) + g * n_count, c.stride(0), bt.data(), ldb, n_count, length, cb);
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
  std::vector<float> h_t, y, dtv, coef, coef2;
  std::vector<double> cum;
};

// One SSD piece for one head: writes y rows [row0, row0 + length) and advances h.
void ChunkStep(const Tensor& x, const Tensor& dt, const Tensor& b, const Tensor& c,
               const float* cb, const Dims& dims, int64_t head, float a, float d, float bias,
               const SsmScanOptions& options, int64_t row0, int64_t length, float* h,
               const Tensor& y, ChunkWorkspace& ws, bool avx512) {
  const int64_t P = dims.headdim, N = dims.d_state, g = head / dims.heads_per_group;
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
  // Off-chunk part: y[t] = exp(cum[t]) * (h_prev C[t]), as axpys over p with h transposed.
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t n = 0; n < N; ++n) ws.h_t[n * P + p] = h[p * N + n];
  }
#if defined(__x86_64__)
  if (avx512) {
    const float* x0 = RowF32(x, row0) + head * P;
    ws.coef2.resize(static_cast<size_t>(length));
    int64_t t = 0;
    for (; t + 2 <= length; t += 2) {
      DecayCoefficients(cb + t * length, ws.cum.data(), ws.cum[t], ws.dtv.data(), ws.coef.data(),
                        t + 1);
      DecayCoefficients(cb + (t + 1) * length, ws.cum.data(), ws.cum[t + 1], ws.dtv.data(),
                        ws.coef2.data(), t + 2);
      const float* ct[2] = {RowF32(c, row0 + t) + g * N, RowF32(c, row0 + t + 1) + g * N};
      const float e_t[2] = {ExpF(static_cast<float>(ws.cum[t])),
                            ExpF(static_cast<float>(ws.cum[t + 1]))};
      const float* coef[2] = {ws.coef.data(), ws.coef2.data()};
      float* out[2] = {RowF32(y, row0 + t) + head * P, RowF32(y, row0 + t + 1) + head * P};
      YRowsAvx512<2>(ct, ws.h_t.data(), N, P, e_t, coef, x0, x.stride(0), t + 1, d, out);
    }
    for (; t < length; ++t) {
      DecayCoefficients(cb + t * length, ws.cum.data(), ws.cum[t], ws.dtv.data(), ws.coef.data(),
                        t + 1);
      const float* ct[1] = {RowF32(c, row0 + t) + g * N};
      const float e_t[1] = {ExpF(static_cast<float>(ws.cum[t]))};
      const float* coef[1] = {ws.coef.data()};
      float* out[1] = {RowF32(y, row0 + t) + head * P};
      YRowsAvx512<1>(ct, ws.h_t.data(), N, P, e_t, coef, x0, x.stride(0), t + 1, d, out);
    }
    const double cum_end = ws.cum[length - 1];
    for (int64_t s = 0; s < length; ++s) {
      ws.coef[s] = ExpF(static_cast<float>(cum_end - ws.cum[s])) * ws.dtv[s];
    }
    StateUpdateAvx512(h, P, N, ExpF(static_cast<float>(cum_end)), ws.coef.data(), x0,
                      x.stride(0), RowF32(b, row0) + g * N, b.stride(0), length);
    return;
  }
#endif
  for (int64_t t = 0; t < length; ++t) {
    float* yt = ws.y.data() + t * P;
    std::memset(yt, 0, sizeof(float) * P);
    const float* ct = RowF32(c, row0 + t) + g * N;
    for (int64_t n = 0; n < N; ++n) Axpy(ct[n], ws.h_t.data() + n * P, yt, P);
    ScaleInPlace(ExpF(static_cast<float>(ws.cum[t])), yt, P);
    // Intra-chunk part, s = 0..t in order.
    DecayCoefficients(cb + t * length, ws.cum.data(), ws.cum[t], ws.dtv.data(), ws.coef.data(),
                      t + 1);
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
                const SsmScanOptions& options, const RecurrentBatch& batch,
                const Tensor& ssm_state, const Tensor& y) {
  Dims dims;
  dims.heads = ssm_state.dim(1);
  dims.headdim = ssm_state.dim(2);
  dims.d_state = ssm_state.dim(3);
  dims.groups = b.dim(1) / dims.d_state;
  dims.heads_per_group = dims.heads / dims.groups;
  dims.state_rows = ssm_state.dim(0) - 1;
  const int64_t P = dims.headdim, N = dims.d_state, H = dims.heads;
  const int num_seqs = batch.num_seqs();
  // The AVX-512 forms of the SSD piece need whole vectors along headdim and d_state.
  const bool avx512 = CpuFeatures::Get().avx512 && P % 16 == 0 && N % 16 == 0;

  // Phase 1: C B^T of every SSD piece and group (shared by the group's heads).
  std::vector<Piece> pieces;
  std::vector<int64_t> first_piece(num_seqs + 1, 0);
  int64_t cb_floats = 0;
  for (int s = 0; s < num_seqs; ++s) {
    first_piece[s] = static_cast<int64_t>(pieces.size());
    if (ctx.use_ref) continue;
    ForEachPiece(batch, s, options.chunk_size, [&](int64_t row0, int64_t length) {
      if (length < 2) return;
      pieces.push_back({row0, length, cb_floats});
      cb_floats += dims.groups * length * length;
    });
  }
  first_piece[num_seqs] = static_cast<int64_t>(pieces.size());
  std::vector<float> cb(static_cast<size_t>(cb_floats));
  const int64_t cb_items = static_cast<int64_t>(pieces.size()) * dims.groups;
  ctx.pool->ParallelFor(cb_items, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> bt;
    for (int64_t item = begin; item < end; ++item) {
      const Piece& piece = pieces[item / dims.groups];
      const int64_t g = item % dims.groups;
      ComputeCb(b, c, piece.row0, piece.length, g, N,
                cb.data() + piece.cb_offset + g * piece.length * piece.length, bt, avx512);
    }
  });

  // Phase 2: each (sequence, head) through its pieces in order.
  ctx.pool->ParallelFor(int64_t{num_seqs} * H, 1, [&](int64_t begin, int64_t end) {
    ChunkWorkspace ws;
    std::vector<float> scratch_state;
    for (int64_t item = begin; item < end; ++item) {
      const int s = static_cast<int>(item / H);
      const int64_t head = item % H;
      const int64_t g = head / dims.heads_per_group;
      const int32_t slot = batch.slots[s];
      float* h;
      if (slot == dims.state_rows) {  // the scratch row: never read, not written on the CPU
        scratch_state.assign(static_cast<size_t>(P * N), 0.0f);
        h = scratch_state.data();
      } else {
        h = ssm_state.data<float>() + (slot * H + head) * P * N;
        if (batch.fresh[s]) std::memset(h, 0, sizeof(float) * P * N);
      }
      const float a = -std::exp(a_log.data<float>()[head]);
      const float dh = d.data<float>()[head];
      const float bias = dt_bias.data<float>()[head];
      int64_t piece_index = first_piece[s];
      ForEachPiece(batch, s, ctx.use_ref ? int64_t{1} << 40 : options.chunk_size,
                   [&](int64_t row0, int64_t length) {
                     if (!ctx.use_ref && length >= 2) {
                       const Piece& piece = pieces[piece_index++];
                       ChunkStep(x, dt, b, c,
                                 cb.data() + piece.cb_offset + g * length * length, dims, head,
                                 a, dh, bias, options, row0, length, h, y, ws, avx512);
                       return;
                     }
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
                   });
    }
  });
}

}  // namespace coil
