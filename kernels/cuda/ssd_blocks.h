// One block of each tiled phase of the chunked scan (ssd_scan.cu launches them; the host
// emulation runs them over the same grid with HostExec). A block is named by its grid
// coordinates (bx, by, bz); all its threads take the same early return, before any
// barrier. kBf16 picks the tile product form (ssd_tiles.h): the operands each product
// stages are the same fp32 values in both forms, rounded to bf16 in the second.
#ifndef COIL_KERNELS_CUDA_SSD_BLOCKS_H_
#define COIL_KERNELS_CUDA_SSD_BLOCKS_H_

#include <cstdint>

#include "kernels/cuda/ssd_chunks.h"
#include "kernels/cuda/ssd_tiles.h"
#include "kernels/cuda/ssm_scan_math.h"

namespace coil::cuda {

// Calls f(m, n, value) for every output of the tile (row m, column n within it), each from
// the thread that holds it.
template <typename Exec, typename Acc, typename F>
COIL_HOST_DEVICE void ForEachTileOutput(Exec& ex, Acc& acc, F f) {
  ex.Threads([&](int tid) {
    const TileOutputs& o = acc.Out(tid);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) f(tid / 16 + 16 * i, tid % 16 + 16 * j, o.v[i][j]);
    }
  });
}

// Phase 2a, grid (chunks * pairs_per_chunk, groups): the (t_tile, s_tile) tile of the
// chunk's C B^T, cb[t, s] = C_t . B_s over d_state (lower-triangle tiles only; entries
// above the diagonal inside a diagonal tile are written and never read).
template <bool kBf16, typename Exec>
COIL_HOST_DEVICE void ChunkCbBlock(Exec& ex, TileSmem<kBf16>& sm, const SsmScanParams& p,
                                   const SsdScratch& w, int32_t pairs_per_chunk, int64_t bx,
                                   int32_t group) {
  const SsdChunk chunk = w.chunks[bx / pairs_per_chunk];
  int32_t t_tile, s_tile;
  SsdTrianglePair(static_cast<int32_t>(bx % pairs_per_chunk), &t_tile, &s_tile);
  const int32_t len = chunk.length;
  if (t_tile * kSsdTile >= len) return;  // the chunk is shorter than the longest one
  const int32_t t0 = t_tile * kSsdTile, s0 = s_tile * kSsdTile;
  TileAccumulator<kBf16, Exec> acc(ex, sm);
  acc.template Add<true, true>(
      p.d_state,
      [&](int m, int32_t n) { return t0 + m < len ? SsdC(p, chunk, group, t0 + m, n) : 0.0f; },
      [&](int32_t n, int col) {
        return s0 + col < len ? SsdB(p, chunk, group, s0 + col, n) : 0.0f;
      });
  acc.Finish();
  float* out = SsdCbBlock(w, chunk, group);
  ForEachTileOutput(ex, acc, [&](int m, int n, float v) {
    if (t0 + m < len && s0 + n < len) out[static_cast<int64_t>(t0 + m) * len + s0 + n] = v;
  });
}

// Phase 2b, grid (chunks, heads, p_tiles * n_tiles): the chunk's own state
// S[p, n] = sum_s (exp(cum_end - cum_s) dt'_s x_s[p]) B_s[n], into states[chunk][head].
template <bool kBf16, typename Exec>
COIL_HOST_DEVICE void ChunkStateBlock(Exec& ex, TileSmem<kBf16>& sm, const SsmScanParams& p,
                                      const SsdScratch& w, int64_t chunk_index, int32_t head,
                                      int32_t bz) {
  const SsdChunk chunk = w.chunks[chunk_index];
  const int32_t P = p.headdim, N = p.d_state;
  const int32_t n_tiles = (N + kSsdTile - 1) / kSsdTile;
  const int32_t p0 = (bz / n_tiles) * kSsdTile, n0 = (bz % n_tiles) * kSsdTile;
  const int32_t group = SsmGroupOf(p, head);
  TileAccumulator<kBf16, Exec> acc(ex, sm);
  acc.template Add<false, false>(
      chunk.length,
      [&](int m, int32_t s) { return p0 + m < P ? SsdStateX(p, w, chunk, head, s, p0 + m) : 0.0f; },
      [&](int32_t s, int col) { return n0 + col < N ? SsdB(p, chunk, group, s, n0 + col) : 0.0f; });
  acc.Finish();
  float* out = SsdChunkState(p, w, chunk_index, head);
  ForEachTileOutput(ex, acc, [&](int m, int n, float v) {
    if (p0 + m < P && n0 + n < N) out[static_cast<int64_t>(p0 + m) * N + n0 + n] = v;
  });
}

// Phase 4, grid (chunks * t_tiles, heads, p_tiles): rows t of one 64-row tile of a chunk,
// y_t = (exp(cum_t) C_t) . h_prev + sum_{s <= t} coef(t, s) x_s + D x_t.
template <bool kBf16, typename Exec>
COIL_HOST_DEVICE void ChunkScanBlock(Exec& ex, TileSmem<kBf16>& sm, const SsmScanParams& p,
                                     const SsdScratch& w, int32_t t_tiles, int64_t bx,
                                     int32_t head, int32_t bz) {
  const int64_t chunk_index = bx / t_tiles;
  const SsdChunk chunk = w.chunks[chunk_index];
  const int32_t len = chunk.length;
  const int32_t t0 = static_cast<int32_t>(bx % t_tiles) * kSsdTile;
  if (t0 >= len) return;
  const int32_t P = p.headdim, N = p.d_state;
  const int32_t p0 = bz * kSsdTile;
  const int32_t group = SsmGroupOf(p, head);
  const float* h_prev = SsdChunkState(p, w, chunk_index, head);
  TileAccumulator<kBf16, Exec> acc(ex, sm);
  // Off-chunk part: (exp(cum_t) C_t) . h_prev[p], over d_state; exactly zero (the
  // accumulator's +0 plus products of zeros) for a chunk entered with a zero state, so
  // skipped there, the same for every thread of the block.
  if (!SsdEntersZero(p, w, chunk_index, chunk)) {
    acc.template Add<true, true>(
        N,
        [&](int m, int32_t n) {
          return t0 + m < len ? SsdScanC(p, w, chunk, head, group, t0 + m, n) : 0.0f;
        },
        [&](int32_t n, int col) {
          return p0 + col < P ? h_prev[static_cast<int64_t>(p0 + col) * N + n] : 0.0f;
        });
  }
  // Intra-chunk part over s <= t: only C B^T's lower triangle is read (the rest is never
  // written), so the mask is a branch, not a multiplication.
  acc.template Add<true, false>(
      t0 + kSsdTile < len ? t0 + kSsdTile : len,
      [&](int m, int32_t s) {
        const int32_t t = t0 + m;
        return t < len && s <= t ? SsdScanCoef(p, w, chunk, head, group, t, s) : 0.0f;
      },
      [&](int32_t s, int col) { return p0 + col < P ? SsdX(p, chunk, head, s, p0 + col) : 0.0f; });
  acc.Finish();
  const float dh = p.d[head];
  ForEachTileOutput(ex, acc, [&](int m, int n, float v) {
    const int32_t t = t0 + m, col = p0 + n;
    if (t < len && col < P) SsdY(p, chunk, head, t)[col] = v + dh * SsdX(p, chunk, head, t, col);
  });
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSD_BLOCKS_H_
