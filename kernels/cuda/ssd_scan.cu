// The chunked (SSD) scan over varlen packed runs of two or more tokens, in the four phases
// of mamba_ssm's ssd_combined:
//   0. chunk list: built on the device from the batch mirrors (ssd_chunks.h geometry);
//   1. per chunk and head: dt' and the inclusive cumulative sum of A dt' (in double);
//   2. per chunk and group: C B^T (lower triangle, shared by the group's heads), and per
//      chunk and head the chunk's own state S = sum_s exp(cum_end - cum_s) dt'_s x_s B_s^T;
//   3. per sequence and head: the states passed along the sequence's chunks, seeded from its
//      slot (zero when fresh); each chunk's S is replaced by the state entering it, and the
//      final state goes back to the slot;
//   4. per chunk, head and tile: y = exp(cum_t) C_t h_prev + sum_{s<=t} (C_t.B_s)
//      exp(cum_t - cum_s) dt'_s x_s + D x_t.
// Phases 2 and 4 are 64x64 tiles (ssd_blocks.h) of fp32 SIMT products, or with
// bf16_products of bf16 tensor-core products with fp32 accumulation (ssd_tiles.h); the
// cumulative sums, the state passing and every stored state stay fp32 in both.
// Scratch (chunk list, dt', cumsums, C B^T, chunk states) comes from the backend workspace.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ssd_blocks.h"
#include "kernels/cuda/ssd_chunks.h"
#include "kernels/cuda/ssm_scan_kernels.cuh"

namespace coil::cuda {
namespace {

constexpr int kTile = kSsdTile;              // output tile edge
constexpr int kGemmThreads = kSsdTileThreads;  // 16 x 16 threads, 4 x 4 outputs each
constexpr int kBuildThreads = 256;  // the chunk-list builder's one block
constexpr int kCumsumWarps = 8;     // phase 1: heads per block, a warp each
constexpr int kCumsumRounds = 8;    // phase 1: rounds of 32 rows whose loads go out together
constexpr int kPassThreads = 256;   // phase 3: one state element per thread
constexpr unsigned kMaxGridYZ = 65535;

// ---------------------------------------------------------------- phase 0: chunk list

// One block walks the sequences in tiles of kBuildThreads; a block-wide exclusive scan of
// the chunk counts and C B^T sizes gives each sequence its first chunk and offset.
__global__ void __launch_bounds__(kBuildThreads)
    BuildChunksKernel(const int32_t* cu_seqlens, const int32_t* start_positions, int32_t num_seqs,
                      int64_t chunk_size, int64_t groups, SsdChunk* chunks,
                      int32_t* seq_first_chunk) {
  constexpr int kWarps = kBuildThreads / 32;
  __shared__ int32_t warp_chunks[kWarps];
  __shared__ long long warp_cb[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t carry_chunks = 0;
  long long carry_cb = 0;
  for (int32_t base = 0; base < num_seqs; base += kBuildThreads) {
    const int32_t s = base + static_cast<int32_t>(threadIdx.x);
    SsdSequenceTotals totals{0, 0};
    int64_t begin = 0, length = 0, position = 0;
    if (s < num_seqs) {
      begin = cu_seqlens[s];
      length = cu_seqlens[s + 1] - begin;
      position = start_positions[s];
      totals = SsdTotalsOf(position, length, chunk_size);
    }
    const int32_t inc_chunks = WarpInclusiveSum<int32_t>(totals.chunks);
    const long long inc_cb = WarpInclusiveSum<long long>(totals.cb_floats);
    if (lane == 31) {
      warp_chunks[warp] = inc_chunks;
      warp_cb[warp] = inc_cb;
    }
    __syncthreads();
    if (warp == 0) {
      int32_t wc = lane < kWarps ? warp_chunks[lane] : 0;
      long long wb = lane < kWarps ? warp_cb[lane] : 0;
      wc = WarpInclusiveSum<int32_t>(wc);
      wb = WarpInclusiveSum<long long>(wb);
      if (lane < kWarps) {
        warp_chunks[lane] = wc;
        warp_cb[lane] = wb;
      }
    }
    __syncthreads();
    const int32_t before_chunks =
        (warp > 0 ? warp_chunks[warp - 1] : 0) + inc_chunks - totals.chunks;
    const long long before_cb = (warp > 0 ? warp_cb[warp - 1] : 0) + inc_cb - totals.cb_floats;
    if (s < num_seqs) {
      const int32_t first = carry_chunks + before_chunks;
      seq_first_chunk[s] = first;
      long long cb = carry_cb + before_cb;
      for (int32_t k = 0; k < totals.chunks; ++k) {
        int32_t offset, piece;
        SsdPiece(position, length, chunk_size, k, &offset, &piece);
        chunks[first + k] =
            SsdChunk{groups * cb, static_cast<int32_t>(begin) + offset, piece, s, 0};
        cb += static_cast<long long>(piece) * piece;
      }
    }
    carry_chunks += warp_chunks[kWarps - 1];
    carry_cb += warp_cb[kWarps - 1];
    __syncthreads();  // the shared totals are rewritten by the next tile
  }
  if (threadIdx.x == 0) seq_first_chunk[num_seqs] = carry_chunks;
}

// ---------------------------------------------------------------- phase 1: dt' and cumsum

// Warp per (chunk, head), grid (chunks, ceil(heads / kCumsumWarps)): dt' and the
// inclusive sum of A dt' (in double, as the CPU) over the chunk, 32 rows at a time with a
// carry, then each row's scales (SsdStoreRowScales). A lane owns row 32 r + lane of each
// pass of kCumsumRounds rounds: it loads all of a pass's dt first, so the warp waits for
// memory once per 32 kCumsumRounds rows, not once per round. When the chunk fits in one
// pass (chunk_size <= 256, mamba2's), the scales come from the sums still in registers;
// a longer chunk reads them back once every sum is written (__syncwarp orders the lanes'
// writes before the reads). Either way the values are those of one round at a time.
__global__ void __launch_bounds__(kCumsumWarps * 32)
    ChunkCumsumKernel(SsmScanParams p, SsdScratch w) {
  const int32_t head = static_cast<int32_t>(blockIdx.y) * kCumsumWarps + (threadIdx.x >> 5);
  if (head >= p.heads) return;  // the whole warp: nothing below syncs the block
  const SsdChunk chunk = w.chunks[blockIdx.x];
  const int lane = threadIdx.x & 31;
  const float a = SsmA(p, head);
  const int64_t base = SsdRowIndex(p, head, chunk.row0);
  double carry = 0.0, cum_end = 0.0;
  float value[kCumsumRounds];
  double sum[kCumsumRounds];
  for (int32_t t0 = 0; t0 < chunk.length; t0 += 32 * kCumsumRounds) {
    // The loads first, unconditionally (rows past the end read the last row, in bounds), so
    // none waits behind the previous round's softplus, whose branches need its value.
    float raw[kCumsumRounds];
#pragma unroll
    for (int r = 0; r < kCumsumRounds; ++r) {
      const int32_t t = min(t0 + 32 * r + lane, chunk.length - 1);
      raw[r] = p.dt[(static_cast<int64_t>(chunk.row0) + t) * p.dt_stride + head];
    }
#pragma unroll
    for (int r = 0; r < kCumsumRounds; ++r) {
      const int32_t t = t0 + 32 * r + lane;
      value[r] = t < chunk.length ? SsmDtOf(p, raw[r], head) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kCumsumRounds; ++r) {
      const int32_t t = t0 + 32 * r + lane;
      // Rows past the end add nothing to the rows before them (a lane's sum takes only
      // lower lanes), so they may run the same scan.
      const double step = t < chunk.length ? static_cast<double>(a * value[r]) : 0.0;
      sum[r] = WarpInclusiveSum<double>(step) + carry;
      if (t < chunk.length) {
        w.dtv[base + t] = value[r];
        w.cum[base + t] = sum[r];
      }
      carry = __shfl_sync(0xffffffffu, sum[r], 31);
      // The sum at the chunk's last row, from the round that holds it (a shuffle per round
      // rather than sum[] indexed by that round, which would put sum[] in local memory).
      const double at_end = __shfl_sync(0xffffffffu, sum[r], (chunk.length - 1) % 32);
      if (t0 + 32 * r < chunk.length && chunk.length <= t0 + 32 * (r + 1)) cum_end = at_end;
    }
  }
  if (chunk.length <= 32 * kCumsumRounds) {
#pragma unroll
    for (int r = 0; r < kCumsumRounds; ++r) {
      const int32_t t = 32 * r + lane;
      if (t < chunk.length) SsdStoreRowScales(w, base, t, sum[r], cum_end, value[r]);
    }
    return;
  }
  __syncwarp();
  for (int32_t t = lane; t < chunk.length; t += 32) SsdRowScales(p, w, chunk, head, t);
}

// ---------------------------------------------------------------- phase 2: C B^T, states

// The block bodies are ssd_blocks.h's, shared with the host emulation. The bf16 forms ask
// for 2 (C B^T) or 3 (states, scan) resident blocks per SM: their time goes into staging
// loads, and more blocks keep more of them in flight (ptxas, sm_90: 109-124 registers at
// 2, 80 at 3 with at most 16-20 bytes of spill on sm_90).
template <bool kBf16>
__global__ void __launch_bounds__(kGemmThreads, kBf16 ? 2 : 1)
    ChunkCbKernel(SsmScanParams p, SsdScratch w, int32_t pairs_per_chunk) {
  __shared__ TileSmem<kBf16> sm;
  DeviceExec ex;
  ChunkCbBlock<kBf16>(ex, sm, p, w, pairs_per_chunk, blockIdx.x, static_cast<int32_t>(blockIdx.y));
}

template <bool kBf16>
__global__ void __launch_bounds__(kGemmThreads, kBf16 ? 3 : 1) ChunkStateKernel(SsmScanParams p, SsdScratch w) {
  __shared__ TileSmem<kBf16> sm;
  DeviceExec ex;
  ChunkStateBlock<kBf16>(ex, sm, p, w, blockIdx.x, static_cast<int32_t>(blockIdx.y),
                         static_cast<int32_t>(blockIdx.z));
}

// ---------------------------------------------------------------- phase 3: state passing

// grid (ceil(P N / kPassThreads), heads, min(num_seqs, 65535)): one thread carries one
// state element through its sequence's chunks (SsdPassState).
template <typename StateT>
__global__ void __launch_bounds__(kPassThreads) StatePassingKernel(SsmScanParams p, SsdScratch w) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kPassThreads + threadIdx.x;
  if (e >= static_cast<int64_t>(p.headdim) * p.d_state) return;
  for (int32_t s = blockIdx.z; s < p.num_seqs; s += gridDim.z) {
    SsdPassState<StateT>(p, w, s, static_cast<int32_t>(blockIdx.y), e);
  }
}

// ---------------------------------------------------------------- phase 4: chunk scan

template <bool kBf16>
__global__ void __launch_bounds__(kGemmThreads, kBf16 ? 3 : 1)
    ChunkScanKernel(SsmScanParams p, SsdScratch w, int32_t t_tiles) {
  __shared__ TileSmem<kBf16> sm;
  DeviceExec ex;
  ChunkScanBlock<kBf16>(ex, sm, p, w, t_tiles, blockIdx.x, static_cast<int32_t>(blockIdx.y),
                        static_cast<int32_t>(blockIdx.z));
}

// The phases as intervals "SsmScan: <phase>" inside the op's own, while op timing is on
// and the stream is not capturing a graph.
class PhaseTimes {
 public:
  PhaseTimes(const CudaContext& ctx, bool capturing) : timer_(capturing ? nullptr : ctx.timer) {}
  // Ends the phase under way, if any, and starts `phase` (none when null). A clock that
  // fails stops this scan's phase times; the scan itself goes on.
  void Next(const char* phase) {
    if (timer_ == nullptr) return;
    if (phase_ != nullptr && !timer_->End(phase_, begin_).ok()) timer_ = nullptr;
    phase_ = phase;
    if (timer_ == nullptr || phase_ == nullptr) return;
    const absl::StatusOr<int64_t> begin = timer_->Begin();
    if (begin.ok()) {
      begin_ = *begin;
    } else {
      timer_ = nullptr;
    }
  }

 private:
  OpTimer* timer_;
  const char* phase_ = nullptr;
  int64_t begin_ = 0;
};

// The three tiled phases in one form.
template <bool kBf16>
absl::Status LaunchTiledPhases(const CudaContext& ctx, const SsmScanParams& p,
                               const SsdScratch& w, int64_t num_chunks, int64_t pairs,
                               int64_t t_tiles, int64_t p_tiles, int64_t n_tiles,
                               PhaseTimes& phases) {
  phases.Next("SsmScan: 2a C B^T");
  ChunkCbKernel<kBf16>
      <<<dim3(static_cast<unsigned>(num_chunks * pairs), static_cast<unsigned>(p.groups)),
         kGemmThreads, 0, ctx.stream>>>(p, w, static_cast<int32_t>(pairs));
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  phases.Next("SsmScan: 2b chunk states");
  ChunkStateKernel<kBf16><<<dim3(static_cast<unsigned>(num_chunks), static_cast<unsigned>(p.heads),
                                 static_cast<unsigned>(p_tiles * n_tiles)),
                            kGemmThreads, 0, ctx.stream>>>(p, w);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const int64_t per_head = static_cast<int64_t>(p.headdim) * p.d_state;
  const int64_t pass_blocks = (per_head + kPassThreads - 1) / kPassThreads;
  phases.Next("SsmScan: 3 state passing");
  const dim3 pass_grid(static_cast<unsigned>(pass_blocks), static_cast<unsigned>(p.heads),
                       std::min<unsigned>(static_cast<unsigned>(p.num_seqs), kMaxGridYZ));
  if (p.state_bf16) {
    StatePassingKernel<uint16_t><<<pass_grid, kPassThreads, 0, ctx.stream>>>(p, w);
  } else {
    StatePassingKernel<float><<<pass_grid, kPassThreads, 0, ctx.stream>>>(p, w);
  }
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  phases.Next("SsmScan: 4 chunk scan");
  ChunkScanKernel<kBf16><<<dim3(static_cast<unsigned>(num_chunks * t_tiles),
                                static_cast<unsigned>(p.heads), static_cast<unsigned>(p_tiles)),
                           kGemmThreads, 0, ctx.stream>>>(p, w, static_cast<int32_t>(t_tiles));
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  phases.Next(nullptr);
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchSsdChunked(const CudaContext& ctx, const SsmScanParams& p,
                              const RecurrentBatch& batch, int64_t chunk_size,
                              bool bf16_products) {
  const SsdChunkPlan& plan = ctx.ssd_plans->PlanFor(batch, chunk_size, p.groups);
  const int64_t num_chunks = static_cast<int64_t>(plan.chunks.size());
  if (num_chunks == 0) return absl::OkStatus();
  const int64_t t_tiles = (plan.max_length + kTile - 1) / kTile;
  const int64_t pairs = t_tiles * (t_tiles + 1) / 2;
  const int64_t p_tiles = (p.headdim + kTile - 1) / kTile;
  const int64_t n_tiles = (p.d_state + kTile - 1) / kTile;
  constexpr int64_t kGridXMax = 0x7fffffff;
  if (num_chunks * pairs > kGridXMax || num_chunks * t_tiles > kGridXMax ||
      p.heads > static_cast<int64_t>(kMaxGridYZ) || p.groups > static_cast<int64_t>(kMaxGridYZ) ||
      p_tiles * n_tiles > static_cast<int64_t>(kMaxGridYZ)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the chunked scan's grid is too large (", num_chunks, " chunks of up to ", plan.max_length,
        " tokens, ", p.heads, " heads); lower chunk_size or the batch"));
  }

  const SsdScratchLayout layout = LayoutSsdScratch(plan, p);
  COIL_ASSIGN_OR_RETURN(void* scratch, ctx.workspace->Get(layout.total, ctx.stream));
  const SsdScratch w = SsdScratchAt(scratch, layout);

  // The chunk list, unless this step's previous layer left it in place. Recorded into a
  // capture it is not built yet, so it is never taken as built then.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(ctx.stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  PhaseTimes phases(ctx, capturing);
  if (capturing || !ctx.ssd_plans->HasDeviceList(scratch, ctx.workspace->generation())) {
    phases.Next("SsmScan: 0 chunk list");
    BuildChunksKernel<<<1, kBuildThreads, 0, ctx.stream>>>(p.cu_seqlens, p.start_positions,
                                                           p.num_seqs, chunk_size, p.groups,
                                                           w.chunks, w.seq_first_chunk);
    COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    if (capturing) {
      ctx.ssd_plans->ForgetDeviceList();
    } else {
      ctx.ssd_plans->SetDeviceList(scratch, ctx.workspace->generation());
    }
  }
  phases.Next("SsmScan: 1 dt and cumsum");
  ChunkCumsumKernel<<<dim3(static_cast<unsigned>(num_chunks),
                          static_cast<unsigned>((p.heads + kCumsumWarps - 1) / kCumsumWarps)),
                     kCumsumWarps * 32, 0, ctx.stream>>>(p, w);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (bf16_products && ctx.compute_capability >= 80) {
    return LaunchTiledPhases<true>(ctx, p, w, num_chunks, pairs, t_tiles, p_tiles, n_tiles,
                                   phases);
  }
  return LaunchTiledPhases<false>(ctx, p, w, num_chunks, pairs, t_tiles, p_tiles, n_tiles,
                                  phases);
}

}  // namespace coil::cuda
