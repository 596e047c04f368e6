// The chunked (SSD) scan over varlen packed runs of two or more tokens, in the four phases
// of mamba_ssm's ssd_combined, fp32 throughout:
//   0. chunk list: built on the device from the batch mirrors (ssd_chunks.h geometry);
//   1. per chunk and head: dt' and the inclusive cumulative sum of A dt' (in double);
//   2. per chunk and group: C B^T (lower triangle, shared by the group's heads), and per
//      chunk and head the chunk's own state S = sum_s exp(cum_end - cum_s) dt'_s x_s B_s^T;
//   3. per sequence and head: the states passed along the sequence's chunks, seeded from its
//      slot (zero when fresh); each chunk's S is replaced by the state entering it, and the
//      final state goes back to the slot;
//   4. per chunk, head and tile: y = exp(cum_t) C_t h_prev + sum_{s<=t} (C_t.B_s)
//      exp(cum_t - cum_s) dt'_s x_s + D x_t.
// Phases 2 and 4 are 64x64 tiles of fp32 SIMT products through shared memory (kTileK deep).
// Scratch (chunk list, dt', cumsums, C B^T, chunk states) comes from the backend workspace.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ssd_chunks.h"
#include "kernels/cuda/ssm_scan_kernels.cuh"

namespace coil::cuda {
namespace {

constexpr int kTile = 64;           // output tile edge
constexpr int kTileK = 16;          // reduction depth per shared-memory stage
constexpr int kGemmThreads = 256;   // 16 x 16 threads, 4 x 4 outputs each
constexpr int kBuildThreads = 256;  // the chunk-list builder's one block
constexpr int kCumsumWarps = 8;     // phase 1: one warp per head at a time
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

// Block per chunk; warp per head: dt' and the inclusive sum of A dt' (in double, as the CPU)
// over the chunk, 32 rows at a time with a carry.
__global__ void __launch_bounds__(kCumsumWarps * 32)
    ChunkCumsumKernel(SsmScanParams p, SsdScratch w) {
  const SsdChunk chunk = w.chunks[blockIdx.x];
  const int lane = threadIdx.x & 31;
  for (int32_t head = threadIdx.x >> 5; head < p.heads; head += kCumsumWarps) {
    const float a = SsmA(p, head);
    const int64_t base = SsdRowIndex(p, head, chunk.row0);
    double carry = 0.0;
    for (int32_t t0 = 0; t0 < chunk.length; t0 += 32) {
      const int32_t t = t0 + lane;
      float value = 0.0f;
      double step = 0.0;
      if (t < chunk.length) {
        value = SsmDt(p, static_cast<int64_t>(chunk.row0) + t, head);
        step = static_cast<double>(a * value);
      }
      const double sum = WarpInclusiveSum<double>(step) + carry;
      if (t < chunk.length) {
        w.dtv[base + t] = value;
        w.cum[base + t] = sum;
      }
      carry = __shfl_sync(0xffffffffu, sum, 31);
    }
  }
}

// ---------------------------------------------------------------- tiled products

struct GemmShared {
  // [k][m] and [k][n]; +1 keeps the transposing stores free of most bank conflicts.
  float a[kTileK][kTile + 1];
  float b[kTileK][kTile + 1];
};

// acc[i][j] += sum_k A(m, k) B(k, n) over k in [0, k_count), for m = ty + 16 i and
// n = tx + 16 j of the 64x64 tile (tx = thread % 16, ty = thread / 16). load_a(m, k) and
// load_b(k, n) return the (already scaled) operands and 0 outside the tile's valid rows;
// kAAlongK / kBAlongK say which index is contiguous in memory, so the loads coalesce.
template <bool kAAlongK, bool kBAlongK, typename LoadA, typename LoadB>
__device__ void TileProduct(int32_t k_count, LoadA load_a, LoadB load_b, GemmShared& sm,
                            float (&acc)[4][4]) {
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  constexpr int kLoads = kTile * kTileK / kGemmThreads;  // 4
  for (int32_t k0 = 0; k0 < k_count; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int e = tid + i * kGemmThreads;
      const int am = kAAlongK ? e / kTileK : e % kTile;
      const int ak = kAAlongK ? e % kTileK : e / kTile;
      sm.a[ak][am] = k0 + ak < k_count ? load_a(am, k0 + ak) : 0.0f;
      const int bn = kBAlongK ? e / kTileK : e % kTile;
      const int bk = kBAlongK ? e % kTileK : e / kTile;
      sm.b[bk][bn] = k0 + bk < k_count ? load_b(k0 + bk, bn) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileK; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = sm.a[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = sm.b[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------- phase 2: C B^T, states

// grid (chunks * pairs_per_chunk, groups): cb[t, s] = C_t . B_s over d_state.
__global__ void __launch_bounds__(kGemmThreads)
    ChunkCbKernel(SsmScanParams p, SsdScratch w, int32_t pairs_per_chunk) {
  __shared__ GemmShared sm;
  const SsdChunk chunk = w.chunks[blockIdx.x / pairs_per_chunk];
  int32_t t_tile, s_tile;
  SsdTrianglePair(static_cast<int32_t>(blockIdx.x % pairs_per_chunk), &t_tile, &s_tile);
  const int32_t len = chunk.length;
  if (t_tile * kTile >= len) return;  // the chunk is shorter than the longest one
  const int32_t group = blockIdx.y;
  const int32_t t0 = t_tile * kTile, s0 = s_tile * kTile;
  float acc[4][4] = {};
  TileProduct<true, true>(
      p.d_state,
      [&](int m, int32_t n) { return t0 + m < len ? SsdC(p, chunk, group, t0 + m, n) : 0.0f; },
      [&](int32_t n, int col) {
        return s0 + col < len ? SsdB(p, chunk, group, s0 + col, n) : 0.0f;
      },
      sm, acc);
  float* out = SsdCbBlock(w, chunk, group);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int32_t t = t0 + ty + 16 * i;
    if (t >= len) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t s = s0 + tx + 16 * j;
      if (s < len) out[static_cast<int64_t>(t) * len + s] = acc[i][j];
    }
  }
}

// grid (chunks, heads, p_tiles * n_tiles): the chunk's own state
// S[p, n] = sum_s (exp(cum_end - cum_s) dt'_s x_s[p]) B_s[n], into states[chunk][head].
__global__ void __launch_bounds__(kGemmThreads) ChunkStateKernel(SsmScanParams p, SsdScratch w) {
  __shared__ GemmShared sm;
  const SsdChunk chunk = w.chunks[blockIdx.x];
  const int32_t head = blockIdx.y, P = p.headdim, N = p.d_state;
  const int32_t n_tiles = (N + kTile - 1) / kTile;
  const int32_t p0 = (blockIdx.z / n_tiles) * kTile, n0 = (blockIdx.z % n_tiles) * kTile;
  const int32_t group = SsmGroupOf(p, head);
  float acc[4][4] = {};
  TileProduct<false, false>(
      chunk.length,
      [&](int m, int32_t s) { return p0 + m < P ? SsdStateX(p, w, chunk, head, s, p0 + m) : 0.0f; },
      [&](int32_t s, int col) { return n0 + col < N ? SsdB(p, chunk, group, s, n0 + col) : 0.0f; },
      sm, acc);
  float* out = SsdChunkState(p, w, blockIdx.x, head);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int32_t pr = p0 + ty + 16 * i;
    if (pr >= P) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t n = n0 + tx + 16 * j;
      if (n < N) out[static_cast<int64_t>(pr) * N + n] = acc[i][j];
    }
  }
}

// ---------------------------------------------------------------- phase 3: state passing

// grid (ceil(P N / kPassThreads), heads, min(num_seqs, 65535)): one thread carries one
// state element through its sequence's chunks (SsdPassState).
__global__ void __launch_bounds__(kPassThreads) StatePassingKernel(SsmScanParams p, SsdScratch w) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kPassThreads + threadIdx.x;
  if (e >= static_cast<int64_t>(p.headdim) * p.d_state) return;
  for (int32_t s = blockIdx.z; s < p.num_seqs; s += gridDim.z) {
    SsdPassState(p, w, s, static_cast<int32_t>(blockIdx.y), e);
  }
}

// ---------------------------------------------------------------- phase 4: chunk scan

// grid (chunks * t_tiles, heads, p_tiles): rows t of one 64-row tile of a chunk.
__global__ void __launch_bounds__(kGemmThreads)
    ChunkScanKernel(SsmScanParams p, SsdScratch w, int32_t t_tiles) {
  __shared__ GemmShared sm;
  const int64_t chunk_index = blockIdx.x / t_tiles;
  const SsdChunk chunk = w.chunks[chunk_index];
  const int32_t len = chunk.length;
  const int32_t t0 = (blockIdx.x % t_tiles) * kTile;
  if (t0 >= len) return;
  const int32_t head = blockIdx.y, P = p.headdim, N = p.d_state;
  const int32_t p0 = blockIdx.z * kTile;
  const int32_t group = SsmGroupOf(p, head);
  const float* h_prev = SsdChunkState(p, w, chunk_index, head);
  float acc[4][4] = {};
  // Off-chunk part: (exp(cum_t) C_t) . h_prev[p], over d_state.
  TileProduct<true, true>(
      N,
      [&](int m, int32_t n) {
        return t0 + m < len ? SsdScanC(p, w, chunk, head, group, t0 + m, n) : 0.0f;
      },
      [&](int32_t n, int col) {
        return p0 + col < P ? h_prev[static_cast<int64_t>(p0 + col) * N + n] : 0.0f;
      },
      sm, acc);
  // Intra-chunk part over s <= t: only C B^T's lower triangle is read (the rest is never
  // written), so the mask is a branch, not a multiplication.
  TileProduct<true, false>(
      min(len, t0 + kTile),
      [&](int m, int32_t s) {
        const int32_t t = t0 + m;
        return t < len && s <= t ? SsdScanCoef(p, w, chunk, head, group, t, s) : 0.0f;
      },
      [&](int32_t s, int col) { return p0 + col < P ? SsdX(p, chunk, head, s, p0 + col) : 0.0f; },
      sm, acc);
  const float dh = p.d[head];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int32_t t = t0 + ty + 16 * i;
    if (t >= len) continue;
    float* y_row = SsdY(p, chunk, head, t);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t col = p0 + tx + 16 * j;
      if (col < P) y_row[col] = acc[i][j] + dh * SsdX(p, chunk, head, t, col);
    }
  }
}

}  // namespace

absl::Status LaunchSsdChunked(const CudaContext& ctx, const SsmScanParams& p,
                              const RecurrentBatch& batch, int64_t chunk_size) {
  const SsdChunkPlan plan = BuildSsdChunkPlan(batch, chunk_size, p.groups);
  const int64_t num_chunks = static_cast<int64_t>(plan.chunks.size());
  if (num_chunks == 0) return absl::OkStatus();
  const int64_t t_tiles = (plan.max_length + kTile - 1) / kTile;
  const int64_t pairs = t_tiles * (t_tiles + 1) / 2;
  const int64_t p_tiles = (p.headdim + kTile - 1) / kTile;
  const int64_t n_tiles = (p.d_state + kTile - 1) / kTile;
  const int64_t per_head = static_cast<int64_t>(p.headdim) * p.d_state;
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

  BuildChunksKernel<<<1, kBuildThreads, 0, ctx.stream>>>(p.cu_seqlens, p.start_positions,
                                                         p.num_seqs, chunk_size, p.groups, w.chunks,
                                                         w.seq_first_chunk);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ChunkCumsumKernel<<<static_cast<unsigned>(num_chunks), kCumsumWarps * 32, 0, ctx.stream>>>(p, w);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ChunkCbKernel<<<dim3(static_cast<unsigned>(num_chunks * pairs), static_cast<unsigned>(p.groups)),
                  kGemmThreads, 0, ctx.stream>>>(p, w, static_cast<int32_t>(pairs));
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ChunkStateKernel<<<dim3(static_cast<unsigned>(num_chunks), static_cast<unsigned>(p.heads),
                          static_cast<unsigned>(p_tiles * n_tiles)),
                     kGemmThreads, 0, ctx.stream>>>(p, w);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const int64_t pass_blocks = (per_head + kPassThreads - 1) / kPassThreads;
  StatePassingKernel<<<dim3(static_cast<unsigned>(pass_blocks), static_cast<unsigned>(p.heads),
                            std::min<unsigned>(static_cast<unsigned>(p.num_seqs), kMaxGridYZ)),
                       kPassThreads, 0, ctx.stream>>>(p, w);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ChunkScanKernel<<<dim3(static_cast<unsigned>(num_chunks * t_tiles),
                         static_cast<unsigned>(p.heads), static_cast<unsigned>(p_tiles)),
                    kGemmThreads, 0, ctx.stream>>>(p, w, static_cast<int32_t>(t_tiles));
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
