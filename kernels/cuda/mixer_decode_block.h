// One block of the fused mixer decode (Backend::MixerDecode on CUDA: mixer_decode.cu launches
// it, and tests/unit/kernels/cuda/mixer_emulation_test.cc runs the same body on the host).
// A block is one (sequence, head, tile of kMixerRows headdim rows) of a decode step, where
// every run is one token:
//  1. the causal conv outputs it needs: the group's B and C channels (their history only
//     read: every block of the group reads it) and the tile's x channels (history shifted in
//     place: no other block owns them), into shared memory;
//  2. the one-token state update of the tile's rows (SsmDecodeLane, a warp per kMixerRowsPerWarp
//     rows), y = state . c + D x into y;
//  3. a ticket per (sequence, group): the last of the group's blocks to take one shifts the
//     group's B/C conv histories (every block has read them by then) and, over the group's
//     columns of y (every block has written them), either applies the gated RMSNorm into out
//     as GatedRmsNorm takes it (MixerDecode), or writes the gated values over y and their sum
//     of squares into sumsq as GatedSumSquares takes it (MixerDecodeSumSquares: heads that
//     share their group with another rank's, whose sums the caller all-reduces). The ticket
//     counts modulo the group's block count (atomicInc), so the last draw leaves it at zero
//     for the next launch, and a stale value heals in one launch.
// A group's blocks are those of its heads on this rank: all hpg of them when groups are
// whole, fewer for the first and last group when a rank's heads start or end inside one.
// Every formula is the unfused kernels' own (ConvDecodeValue, SsmDecodeLane with the same
// lane mapping and warp sum, GatedPartialSumSquares with the same block size and BlockSum),
// so the fused op has the bits of the unfused ops run in turn.
#ifndef COIL_KERNELS_CUDA_MIXER_DECODE_BLOCK_H_
#define COIL_KERNELS_CUDA_MIXER_DECODE_BLOCK_H_

#include <cstdint>

#include "kernels/cuda/causal_conv1d_math.h"
#include "kernels/cuda/gated_norm_math.h"
#include "kernels/cuda/ssm_scan_math.h"

namespace coil::cuda {

// The block size equals the row kernels' (kRowThreads, checked in mixer_decode.cu): the
// norm's per-thread columns and BlockSum order then match GatedRmsNormKernel's.
inline constexpr int kMixerThreads = 256;
inline constexpr int kMixerWarps = kMixerThreads / 32;
// Four rows per warp (as SsmDecodeKernel): 32 headdim rows per block, so that the B/C conv
// each block recomputes for its group is spread over twice the state of 16-row tiles.
inline constexpr int kMixerRowsPerWarp = 4;
inline constexpr int kMixerRows = kMixerWarps * kMixerRowsPerWarp;  // headdim rows per block

struct MixerDecodeParams {
  ConvParams conv;     // x = xbc_in, weight, bias, state = conv_state, the batch; out unused
  SsmScanParams scan;  // dt, a_log, d, dt_bias, state = ssm_state, y, the batch; x, b, c unused
  const float* z;      // [rows, E], row stride z_stride
  int64_t z_stride;
  const float* norm_weight;  // [E]
  float norm_eps;
  int64_t out_stride;
  // Null: normalise into out. Otherwise [rows, groups] (row stride sumsq_stride): each
  // group's sum of squares, the gated values written over y, and out unused.
  float* sumsq;
  int64_t sumsq_stride;
  int32_t* tickets;  // [num_seqs * groups], zero before and after every launch
  int32_t p_tiles;   // ceil(headdim / kMixerRows)
};

// The block's shared memory: [b (N) | c (N)], the tile's x values, BlockSum's scratch and
// the last-block flag, carved from 2 N + kMixerRows + 33 floats.
struct MixerSmem {
  float* bc;
  float* x;
  float* sums;
  int32_t* last;
};

COIL_HOST_DEVICE inline int64_t MixerSmemFloats(int32_t d_state) {
  return 2 * static_cast<int64_t>(d_state) + kMixerRows + 32 + 1;
}

COIL_HOST_DEVICE inline MixerSmem MixerSmemAt(float* base, int32_t d_state) {
  float* x = base + 2 * static_cast<int64_t>(d_state);
  return {base, x, x + kMixerRows, reinterpret_cast<int32_t*>(x + kMixerRows + 32)};
}

// xbc_in's channel of entry n of the group's [b | c] shared row.
COIL_HOST_DEVICE inline int32_t MixerBcChannel(const SsmScanParams& s, int32_t group, int32_t n) {
  const int32_t e = s.heads * s.headdim, gn = s.groups * s.d_state;
  return n < s.d_state ? e + group * s.d_state + n : e + gn + group * s.d_state + (n - s.d_state);
}

// StateT: the SSM state's element type (float, or uint16_t for bf16; SsmDecodeLane).
template <int kVec, int kSteps, typename StateT, typename Exec, typename Store>
COIL_HOST_DEVICE void MixerDecodeBlock(Exec& ex, const MixerSmem& sm, const MixerDecodeParams& p,
                                       int64_t block, Store store) {
  constexpr int R = kMixerRowsPerWarp;
  const SsmScanParams& s = p.scan;
  const int32_t tile = static_cast<int32_t>(block % p.p_tiles);
  const int32_t head = static_cast<int32_t>((block / p.p_tiles) % s.heads);
  const int32_t seq = static_cast<int32_t>(block / p.p_tiles / s.heads);
  const int32_t N = s.d_state, P = s.headdim;
  const int32_t group = SsmGroupOf(s, head);
  const int64_t row = s.cu_seqlens[seq];  // every run is one token (checked by the Backend)
  const int32_t p0 = tile * kMixerRows;

  // 1. Conv outputs.
  ex.Threads([&](int tid) {
    for (int32_t n = tid; n < 2 * N; n += kMixerThreads) {
      sm.bc[n] = ConvDecodeValue(p.conv, seq, MixerBcChannel(s, group, n), false);
    }
    if (tid < kMixerRows && p0 + tid < P) {
      sm.x[tid] = ConvDecodeValue(p.conv, seq, head * P + p0 + tid, true);
    }
  });
  ex.Sync();

  // 2. The state update and y.
  const float dtv = SsmDt(s, row, head);
  const float decay = expf(SsmA(s, head) * dtv);
  const int32_t slot = s.slots[seq];
  const bool scratch = slot == s.state_rows;
  const bool zero = scratch || s.fresh[seq] != 0;
  StateT* state = SsmStateOf<StateT>(s, slot, head);
  typename Exec::template PerThread<float> acc[R];
  ex.Threads([&](int tid) {
    const int warp = tid >> 5, lane = tid & 31;
    const int32_t p_base = p0 + warp * R;
    float xdt[R], a[R];
    for (int r = 0; r < R; ++r) {
      xdt[r] = p_base + r < P ? sm.x[warp * R + r] * dtv : 0.0f;
      a[r] = 0.0f;
    }
    SsmDecodeLane<kVec, kSteps, R>(s, sm.bc, sm.bc + N, state, zero, scratch, decay, xdt, p_base,
                                   lane, a);
    for (int r = 0; r < R; ++r) acc[r](tid) = a[r];
  });
  const float dh = s.d[head];
  float* y_row = s.y + row * s.y_stride;
  ex.Threads([&](int tid) {
    const int warp = tid >> 5, lane = tid & 31;
    for (int r = 0; r < R; ++r) {
      const float sum = ex.WarpSum(acc[r], tid);
      const int32_t pr = p0 + warp * R + r;
      if (lane == 0 && pr < P) y_row[head * P + pr] = sum + dh * sm.x[warp * R + r];
    }
  });

  // 3. The group's ticket; only its last block goes on.
  ex.FenceSync();  // every y write of this block is visible before its ticket
  int32_t* ticket = p.tickets + static_cast<int64_t>(seq) * s.groups + group;
  // The group's heads on this rank, [head_begin, head_end) (GroupHeads in kernels/backend.h):
  // its first head's local index (negative when the group starts on an earlier rank) clamped.
  const int32_t group_first = group * s.heads_per_group - s.first_head;
  const int32_t head_begin = group_first > 0 ? group_first : 0;
  const int32_t head_end =
      group_first + s.heads_per_group < s.heads ? group_first + s.heads_per_group : s.heads;
  const int32_t blocks_in_group = (head_end - head_begin) * p.p_tiles;
  ex.Threads([&](int tid) {
    if (tid == 0) {
      *sm.last = ex.TakeTicket(ticket, blocks_in_group - 1) == blocks_in_group - 1 ? 1 : 0;
    }
  });
  ex.Sync();
  if (*sm.last == 0) return;  // the same answer in every thread of the block
  ex.Acquire();               // the other blocks' y and their reads come before what follows

  ex.Threads([&](int tid) {
    for (int32_t n = tid; n < 2 * N; n += kMixerThreads) {
      ConvDecodeValue(p.conv, seq, MixerBcChannel(s, group, n), true);
    }
  });
  const int64_t width = static_cast<int64_t>(head_end - head_begin) * P;
  const int64_t begin = static_cast<int64_t>(head_begin) * P;
  const float* zr = p.z + row * p.z_stride;
  typename Exec::template PerThread<float> part;
  if (p.sumsq != nullptr) {  // GatedSumSquares over the group's columns, gated over y
    ex.Threads([&](int tid) {
      part(tid) = GatedPartialSumSquares([&](int64_t i) { return ex.LoadY(y_row + i); }, zr, y_row,
                                         begin, width, tid, kMixerThreads);
    });
    const float sum = ex.BlockSum(part, sm.sums);
    ex.Threads([&](int tid) {
      if (tid == 0) p.sumsq[row * p.sumsq_stride + group] = sum;
    });
    return;
  }
  ex.Threads([&](int tid) {
    part(tid) = GatedPartialSumSquares([&](int64_t i) { return ex.LoadY(y_row + i); }, zr,
                                       nullptr, begin, width, tid, kMixerThreads);
  });
  const float scale = GatedNormScale(ex.BlockSum(part, sm.sums), static_cast<float>(width),
                                     p.norm_eps);
  ex.Threads([&](int tid) {
    for (int64_t i = begin + tid; i < begin + width; i += kMixerThreads) {
      const float v = ex.LoadY(y_row + i) * GatedSilu(zr[i]);
      store(row * p.out_stride + i, v * scale * p.norm_weight[i]);
    }
  });
}

// The host's stand-in for a block: each Threads() step runs for every thread in turn (the
// steps are what the barriers delimit), warp and block sums in the GPU's butterfly order.
struct MixerHostExec {
  template <typename T>
  struct PerThread {
    T v[kMixerThreads];
    T& operator()(int tid) { return v[tid]; }
  };
  template <typename F>
  void Threads(F f) {
    for (int tid = 0; tid < kMixerThreads; ++tid) f(tid);
  }
  void Sync() {}
  void FenceSync() {}
  void Acquire() {}
  static float Butterfly(const float* lanes, int lane) {
    float v[32];
    for (int l = 0; l < 32; ++l) v[l] = lanes[l];
    for (int offset = 16; offset > 0; offset >>= 1) {
      float next[32];
      for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ offset];
      for (int l = 0; l < 32; ++l) v[l] = next[l];
    }
    return v[lane];
  }
  float WarpSum(PerThread<float>& v, int tid) { return Butterfly(&v.v[tid & ~31], tid & 31); }
  float BlockSum(PerThread<float>& v, float* /*scratch*/) {
    float total = 0.0f;
    for (int w = 0; w < kMixerWarps; ++w) total += Butterfly(&v.v[w * 32], 0);
    return total;
  }
  float LoadY(const float* y) { return *y; }
  // atomicInc: the old value, and old + 1 stored, or 0 once old reaches `last`.
  int32_t TakeTicket(int32_t* ticket, int32_t last) {
    const int32_t old = *ticket;
    *ticket = old >= last ? 0 : old + 1;
    return old;
  }
};

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_MIXER_DECODE_BLOCK_H_
