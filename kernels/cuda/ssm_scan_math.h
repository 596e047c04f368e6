// The CUDA SSM scan's parameters, the chunked path's scratch layout and its per-element
// formulas, as plain __host__ __device__ C++ (no CUDA types): the kernels call these
// functions for every operand they load and every state they carry, and a host emulation
// (tests/unit/kernels/cuda/ssm_scan_emulation_test.cc) calls the same ones in plain loops and
// checks them against the CPU reference. Only the tiling and the warp scans stay GPU-only.
// Sizes are int32 (checked by the launcher); element offsets are formed in int64.
#ifndef COIL_KERNELS_CUDA_SSM_SCAN_MATH_H_
#define COIL_KERNELS_CUDA_SSM_SCAN_MATH_H_

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/bf16_bits.h"
#include "kernels/cuda/ssd_chunks.h"

namespace coil::cuda {

// Plain pointers and row strides (in floats) of the op's tensors, and the batch's device
// mirrors (host arrays in the emulation).
struct SsmScanParams {
  const float* x;        // [rows, heads * headdim]
  const float* dt;       // [rows, heads]
  const float* a_log;    // [heads]
  const float* b;        // [rows, groups * d_state]
  const float* c;        // [rows, groups * d_state]
  const float* d;        // [heads]
  const float* dt_bias;  // [heads]
  // [state_rows + 1, heads, headdim, d_state], contiguous: float, or bf16 bits (uint16_t)
  // when state_bf16. The kernels that touch it are instantiated for each (SsmStateT).
  void* state;
  float* y;              // [rows, heads * headdim]
  int64_t x_stride, dt_stride, b_stride, c_stride, y_stride;
  const int32_t* cu_seqlens;       // [num_seqs + 1]
  const int32_t* slots;            // [num_seqs]
  const uint8_t* fresh;            // [num_seqs]
  const int32_t* start_positions;  // [num_seqs]
  int32_t num_seqs, rows, heads, headdim, d_state, groups;
  // Local head h reads group (first_head + h) / heads_per_group (SsmScanOptions).
  int32_t heads_per_group, first_head;
  int32_t state_rows;  // the scratch row's index: never read, never written
  float dt_min, dt_max;
  // The state is stored bf16 between steps (computed fp32 within one): rounded to nearest
  // even after every chunk, as the CPU rounds after every piece.
  bool state_bf16;
};

// The state of (slot, head) as its element type: float, or uint16_t (bf16 bits).
template <typename StateT>
COIL_HOST_DEVICE inline StateT* SsmStateOf(const SsmScanParams& p, int32_t slot, int32_t head) {
  return static_cast<StateT*>(p.state) +
         (static_cast<int64_t>(slot) * p.heads + head) * p.headdim * p.d_state;
}

// A state value widened to fp32 (exactly), a fp32 value as the state stores it, and a fp32
// value rounded to what the state can hold.
COIL_HOST_DEVICE inline float SsmStateValue(float v) { return v; }
COIL_HOST_DEVICE inline float SsmStateValue(uint16_t v) { return FloatOfBf16Bits(v); }
template <typename StateT>
COIL_HOST_DEVICE inline StateT SsmStateStored(float v) {
  if constexpr (sizeof(StateT) == 4) {
    return v;
  } else {
    return Bf16BitsOf(v);
  }
}
template <typename StateT>
COIL_HOST_DEVICE inline float SsmStateRounded(float v) {
  return SsmStateValue(SsmStateStored<StateT>(v));
}

// The chunked path's scratch, carved from one workspace allocation.
struct SsdScratch {
  SsdChunk* chunks;          // [chunks]
  int32_t* seq_first_chunk;  // [num_seqs + 1]
  float* dtv;                // [heads][rows]: dt'
  double* cum;               // [heads][rows]: cumulative A dt' within the row's chunk
  float* exp_cum;            // [heads][rows]: exp(cum_t)
  float* state_scale;        // [heads][rows]: exp(cum_end - cum_t) dt'_t (SsdRowScales)
  float* cb;                 // per chunk and group, [length][length] C B^T (lower triangle)
  float* states;             // [chunks][heads][headdim][d_state]
};

// Byte offsets of each part (256-byte aligned) and the total.
struct SsdScratchLayout {
  size_t chunks, seq_first_chunk, dtv, cum, exp_cum, state_scale, cb, states, total;
};

inline size_t SsdAlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline SsdScratchLayout LayoutSsdScratch(const SsdChunkPlan& plan, const SsmScanParams& p) {
  const size_t chunks = plan.chunks.size();
  const size_t per_row = static_cast<size_t>(p.heads) * static_cast<size_t>(p.rows);
  const size_t sizes[] = {
      sizeof(SsdChunk) * chunks,
      sizeof(int32_t) * plan.seq_first_chunk.size(),
      sizeof(float) * per_row,
      sizeof(double) * per_row,
      sizeof(float) * per_row,
      sizeof(float) * per_row,
      sizeof(float) * static_cast<size_t>(p.groups) * static_cast<size_t>(plan.cb_floats_per_group),
      sizeof(float) * chunks * static_cast<size_t>(p.heads) * static_cast<size_t>(p.headdim) *
          static_cast<size_t>(p.d_state)};
  constexpr int kParts = sizeof(sizes) / sizeof(sizes[0]);
  size_t offsets[kParts];
  size_t at = 0;
  for (int i = 0; i < kParts; ++i) {
    offsets[i] = at;
    at += SsdAlignUp(sizes[i]);
  }
  return {offsets[0], offsets[1], offsets[2], offsets[3], offsets[4],
          offsets[5], offsets[6], offsets[7], at};
}

inline SsdScratch SsdScratchAt(void* base, const SsdScratchLayout& layout) {
  char* bytes = static_cast<char*>(base);
  return {reinterpret_cast<SsdChunk*>(bytes + layout.chunks),
          reinterpret_cast<int32_t*>(bytes + layout.seq_first_chunk),
          reinterpret_cast<float*>(bytes + layout.dtv),
          reinterpret_cast<double*>(bytes + layout.cum),
          reinterpret_cast<float*>(bytes + layout.exp_cum),
          reinterpret_cast<float*>(bytes + layout.state_scale),
          reinterpret_cast<float*>(bytes + layout.cb),
          reinterpret_cast<float*>(bytes + layout.states)};
}

// dt' = clamp(softplus(dt + bias), dt_min, dt_max), softplus in double as the CPU
// reference computes it (one value per token and head: the cost is nil).
// SsmDtOf takes dt[row, head] already loaded (so that a kernel can load several first).
COIL_HOST_DEVICE inline float SsmDtOf(const SsmScanParams& p, float dt, int32_t head) {
  const double v = static_cast<double>(dt) + p.dt_bias[head];
  const double sp = v > 20.0 ? v : log1p(exp(v));
  return fminf(fmaxf(static_cast<float>(sp), p.dt_min), p.dt_max);
}

COIL_HOST_DEVICE inline float SsmDt(const SsmScanParams& p, int64_t row, int32_t head) {
  return SsmDtOf(p, p.dt[row * p.dt_stride + head], head);
}

// A = -exp(a_log), as the CPU computes it.
COIL_HOST_DEVICE inline float SsmA(const SsmScanParams& p, int32_t head) {
  return -expf(p.a_log[head]);
}

COIL_HOST_DEVICE inline int32_t SsmGroupOf(const SsmScanParams& p, int32_t head) {
  return (p.first_head + head) / p.heads_per_group;
}

// ---- decode: the one-token update of runs of one token.

// kVec consecutive floats; one 16-byte access on the GPU when kVec == 4 (the caller
// guarantees the alignment).
template <int kVec>
COIL_HOST_DEVICE inline void SsmLoadVec(const float* src, float* dst) {
#if defined(__CUDA_ARCH__)
  if constexpr (kVec == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
  } else {
    for (int v = 0; v < kVec; ++v) dst[v] = src[v];
  }
#else
  for (int v = 0; v < kVec; ++v) dst[v] = src[v];
#endif
}

template <int kVec>
COIL_HOST_DEVICE inline void SsmStoreVec(const float* src, float* dst) {
#if defined(__CUDA_ARCH__)
  if constexpr (kVec == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
  } else {
    for (int v = 0; v < kVec; ++v) dst[v] = src[v];
  }
#else
  for (int v = 0; v < kVec; ++v) dst[v] = src[v];
#endif
}

// kVec state values widened to fp32, and fp32 values stored as the state's type (bf16:
// rounded to nearest even); one 8-byte access on the GPU for four bf16 values.
template <int kVec>
COIL_HOST_DEVICE inline void SsmLoadState(const float* src, float* dst) {
  SsmLoadVec<kVec>(src, dst);
}
template <int kVec>
COIL_HOST_DEVICE inline void SsmLoadState(const uint16_t* src, float* dst) {
#if defined(__CUDA_ARCH__)
  if constexpr (kVec == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    dst[0] = __uint_as_float(v.x << 16);
    dst[1] = __uint_as_float(v.x & 0xffff0000u);
    dst[2] = __uint_as_float(v.y << 16);
    dst[3] = __uint_as_float(v.y & 0xffff0000u);
  } else {
    for (int v = 0; v < kVec; ++v) dst[v] = FloatOfBf16Bits(src[v]);
  }
#else
  for (int v = 0; v < kVec; ++v) dst[v] = FloatOfBf16Bits(src[v]);
#endif
}
template <int kVec>
COIL_HOST_DEVICE inline void SsmStoreState(const float* src, float* dst) {
  SsmStoreVec<kVec>(src, dst);
}
template <int kVec>
COIL_HOST_DEVICE inline void SsmStoreState(const float* src, uint16_t* dst) {
#if defined(__CUDA_ARCH__)
  if constexpr (kVec == 4) {
    uint2 v;
    v.x = Bf16BitsOf(src[0]) | static_cast<uint32_t>(Bf16BitsOf(src[1])) << 16;
    v.y = Bf16BitsOf(src[2]) | static_cast<uint32_t>(Bf16BitsOf(src[3])) << 16;
    *reinterpret_cast<uint2*>(dst) = v;
  } else {
    for (int v = 0; v < kVec; ++v) dst[v] = Bf16BitsOf(src[v]);
  }
#else
  for (int v = 0; v < kVec; ++v) dst[v] = Bf16BitsOf(src[v]);
#endif
}

// One lane's share (lane in [0, 32)) of the update of state rows p_base .. p_base + kRows - 1
// of one (sequence, head): the columns n0 + (j * 32 + lane) * kVec + v of each span n0 of
// 32 kVec kSteps columns. Loads all of a span's values first (kRows * kSteps independent
// loads in flight), then h = h * decay + xdt[r] b[n], acc[r] += h c[n], and stores h back
// unless the row is the scratch row. `state` is the (slot, head) block [headdim][d_state];
// `zero` starts from zeros instead of reading it (fresh, or the scratch row). With kVec 4,
// d_state % 4 == 0 and `state` is aligned to 4 values, so a vector starting below d_state
// ends inside the row. StateT: float, or uint16_t for a bf16 state (widened on the load,
// rounded on the store; the update itself is fp32).
template <int kVec, int kSteps, int kRows, typename StateT>
COIL_HOST_DEVICE inline void SsmDecodeLane(const SsmScanParams& p, const float* b_row,
                                           const float* c_row, StateT* state, bool zero,
                                           bool scratch, float decay, const float* xdt,
                                           int32_t p_base, int lane, float* acc) {
  constexpr int kPerLane = kVec * kSteps;
  constexpr int kSpan = 32 * kPerLane;
  const int32_t N = p.d_state, P = p.headdim;
  for (int32_t n0 = 0; n0 < N; n0 += kSpan) {
    float h[kRows][kPerLane];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int r = 0; r < kRows; ++r) {
      const int32_t pr = p_base + r;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int j = 0; j < kSteps; ++j) {
        const int32_t n = n0 + (j * 32 + lane) * kVec;
        if (!zero && pr < P && n < N) {
          SsmLoadState<kVec>(state + static_cast<int64_t>(pr) * N + n, &h[r][j * kVec]);
        } else {
          for (int v = 0; v < kVec; ++v) h[r][j * kVec + v] = 0.0f;
        }
      }
    }
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int r = 0; r < kRows; ++r) {
      const int32_t pr = p_base + r;
      if (pr >= P) continue;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int j = 0; j < kSteps; ++j) {
        const int32_t n = n0 + (j * 32 + lane) * kVec;
        if (n >= N) continue;
        float* hv = &h[r][j * kVec];
        for (int v = 0; v < kVec; ++v) {
          hv[v] = hv[v] * decay + xdt[r] * b_row[n + v];
          acc[r] = acc[r] + hv[v] * c_row[n + v];
        }
        if (!scratch) SsmStoreState<kVec>(hv, state + static_cast<int64_t>(pr) * N + n);
      }
    }
  }
}

// ---- chunked path; t and s are token indices within the chunk.

// Index of (head, packed row) in the dtv and cum arrays.
COIL_HOST_DEVICE inline int64_t SsdRowIndex(const SsmScanParams& p, int32_t head, int64_t row) {
  return static_cast<int64_t>(head) * p.rows + row;
}

COIL_HOST_DEVICE inline float SsdB(const SsmScanParams& p, const SsdChunk& chunk, int32_t group,
                                   int32_t s, int32_t n) {
  return p.b[(static_cast<int64_t>(chunk.row0) + s) * p.b_stride +
             static_cast<int64_t>(group) * p.d_state + n];
}

COIL_HOST_DEVICE inline float SsdC(const SsmScanParams& p, const SsdChunk& chunk, int32_t group,
                                   int32_t t, int32_t n) {
  return p.c[(static_cast<int64_t>(chunk.row0) + t) * p.c_stride +
             static_cast<int64_t>(group) * p.d_state + n];
}

COIL_HOST_DEVICE inline float SsdX(const SsmScanParams& p, const SsdChunk& chunk, int32_t head,
                                   int32_t s, int32_t col) {
  return p.x[(static_cast<int64_t>(chunk.row0) + s) * p.x_stride +
             static_cast<int64_t>(head) * p.headdim + col];
}

// The chunk's C B^T block of one group: [length][length], row t, column s.
COIL_HOST_DEVICE inline float* SsdCbBlock(const SsdScratch& w, const SsdChunk& chunk,
                                          int32_t group) {
  return w.cb + chunk.cb_offset + static_cast<int64_t>(group) * chunk.length * chunk.length;
}

// States of chunk `k` and `head`: [headdim][d_state].
COIL_HOST_DEVICE inline float* SsdChunkState(const SsmScanParams& p, const SsdScratch& w, int64_t k,
                                             int32_t head) {
  return w.states + (k * p.heads + head) * static_cast<int64_t>(p.headdim) * p.d_state;
}

// Phase 1's last step, per row t of a chunk once its sums are known: the two per-row
// factors the tiled phases multiply their operands by, computed once here rather than in
// every tile that loads the row (the same float operations either way). `base` is the
// chunk's SsdRowIndex, cum_t and cum_end the sums at t and at the chunk's last row, dtv_t
// the row's dt'.
COIL_HOST_DEVICE inline void SsdStoreRowScales(const SsdScratch& w, int64_t base, int32_t t,
                                               double cum_t, double cum_end, float dtv_t) {
  w.exp_cum[base + t] = expf(static_cast<float>(cum_t));
  w.state_scale[base + t] = expf(static_cast<float>(cum_end - cum_t)) * dtv_t;
}

// The same, reading the sums and dt' back from the scratch once they are all written.
COIL_HOST_DEVICE inline void SsdRowScales(const SsmScanParams& p, const SsdScratch& w,
                                          const SsdChunk& chunk, int32_t head, int32_t t) {
  const int64_t base = SsdRowIndex(p, head, chunk.row0);
  SsdStoreRowScales(w, base, t, w.cum[base + t], w.cum[base + chunk.length - 1],
                    w.dtv[base + t]);
}

// The chunk-state operand exp(cum_end - cum_s) dt'_s x_s[col]: the chunk's own state is
// sum_s of it times B_s[n].
COIL_HOST_DEVICE inline float SsdStateX(const SsmScanParams& p, const SsdScratch& w,
                                        const SsdChunk& chunk, int32_t head, int32_t s,
                                        int32_t col) {
  return w.state_scale[SsdRowIndex(p, head, chunk.row0) + s] * SsdX(p, chunk, head, s, col);
}

// Phase 3 for one state element `e` (= row * d_state + column) of one sequence and head:
// the slot (zero when fresh; the scratch row is never read) is carried through the
// sequence's chunks; each chunk's own state is replaced by the state entering it, and the
// final state goes back to the slot. Reading the slot first and writing it last in the same
// thread is what makes the in-place update safe.
//
// The carry h = h * decay + own is a chain through every chunk of the sequence (64 at 16k
// tokens), but its loads are not: they are issued kSsdPassAhead chunks at a time, before
// any of those chunks' stores, so the chain waits for memory once per batch rather than
// once per chunk (a store between two loads would keep the compiler from moving the second
// load up: it cannot prove that they do not alias). The arithmetic and its order are those
// of a plain loop. A bf16 state (StateT uint16_t) is rounded after every chunk: each chunk
// is entered with, and the slot gets, a value the state can hold, as on the CPU.
inline constexpr int kSsdPassAhead = 8;

template <typename StateT>
COIL_HOST_DEVICE inline void SsdPassState(const SsmScanParams& p, const SsdScratch& w, int32_t seq,
                                          int32_t head, int64_t e) {
  const int32_t first = w.seq_first_chunk[seq], last = w.seq_first_chunk[seq + 1];
  if (first == last) return;  // a run of one token: the decode kernel's
  const int32_t slot = p.slots[seq];
  const bool scratch = slot == p.state_rows;
  StateT* slot_state = SsmStateOf<StateT>(p, slot, head) + e;
  float h = scratch || p.fresh[seq] != 0 ? 0.0f : SsmStateValue(*slot_state);
  for (int32_t k0 = first; k0 < last; k0 += kSsdPassAhead) {
    float own[kSsdPassAhead], decay[kSsdPassAhead];
    COIL_UNROLL
    for (int i = 0; i < kSsdPassAhead; ++i) {
      own[i] = decay[i] = 0.0f;
      if (k0 + i < last) {
        const SsdChunk chunk = w.chunks[k0 + i];
        own[i] = SsdChunkState(p, w, k0 + i, head)[e];
        decay[i] = w.exp_cum[SsdRowIndex(p, head, chunk.row0) + chunk.length - 1];
      }
    }
    COIL_UNROLL
    for (int i = 0; i < kSsdPassAhead; ++i) {
      if (k0 + i < last) {
        SsdChunkState(p, w, k0 + i, head)[e] = h;
        h = SsmStateRounded<StateT>(h * decay[i] + own[i]);
      }
    }
  }
  if (!scratch) *slot_state = SsmStateStored<StateT>(h);
}

// Whether chunk k is entered with a zero state: the first chunk of a fresh sequence or of
// one on the scratch row (SsdPassState hands it h = 0, exactly), whose off-chunk product
// is then exactly zero and is skipped.
COIL_HOST_DEVICE inline bool SsdEntersZero(const SsmScanParams& p, const SsdScratch& w, int64_t k,
                                           const SsdChunk& chunk) {
  return k == w.seq_first_chunk[chunk.seq] &&
         (p.slots[chunk.seq] == p.state_rows || p.fresh[chunk.seq] != 0);
}

// The chunk scan's operands: y_t[col] = sum_n (exp(cum_t) C_t[n]) h_prev[col][n]
//   + sum_{s <= t} coef(t, s) x_s[col] + D x_t[col].
COIL_HOST_DEVICE inline float SsdScanC(const SsmScanParams& p, const SsdScratch& w,
                                       const SsdChunk& chunk, int32_t head, int32_t group,
                                       int32_t t, int32_t n) {
  return SsdC(p, chunk, group, t, n) * w.exp_cum[SsdRowIndex(p, head, chunk.row0) + t];
}

// coef(t, s) = (C_t . B_s) exp(cum_t - cum_s) dt'_s, for s <= t only (C B^T's upper
// triangle is never written: the caller masks with a branch).
COIL_HOST_DEVICE inline float SsdScanCoef(const SsmScanParams& p, const SsdScratch& w,
                                          const SsdChunk& chunk, int32_t head, int32_t group,
                                          int32_t t, int32_t s) {
  const int64_t base = SsdRowIndex(p, head, chunk.row0);
  const float cb = SsdCbBlock(w, chunk, group)[static_cast<int64_t>(t) * chunk.length + s];
  return cb * expf(static_cast<float>(w.cum[base + t] - w.cum[base + s])) * w.dtv[base + s];
}

COIL_HOST_DEVICE inline float* SsdY(const SsmScanParams& p, const SsdChunk& chunk, int32_t head,
                                    int32_t t) {
  return p.y + (static_cast<int64_t>(chunk.row0) + t) * p.y_stride +
         static_cast<int64_t>(head) * p.headdim;
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSM_SCAN_MATH_H_
