// The paged-attention kernels' block bodies (paged_attention.cu), written once for the GPU
// and for a host emulation (tests/unit/kernels/cuda/attention_emulation_test.cc), in the
// Exec style of ssd_tiles.h: a block's work between two barriers is a function of the
// thread (or warp) index, AttnDeviceExec runs it on every thread and Sync() is
// __syncthreads(), AttnHostExec calls it for every index in turn.
//
// The CUDA backend's fixed order over keys, the same for a decode row and for that row in a
// prefill chunk (which is what makes the two kernels agree bit for bit):
//   - keys come in tiles of kAttnKeyTile (64) positions aligned to absolute positions, and
//     tiles in splits of kAttnSplitKeys (256) positions, also aligned;
//   - within a split, from a fresh state, per tile: S = q K^T (bf16 tensor-core products
//     with fp32 accumulation for a bf16 cache, q rounded to bf16; fp32 products for an f32
//     cache), s = S * scale * log2(e), -inf past the row's position; m' = max(m, max s);
//     P = 2^(s - m') (rounded to bf16 for the bf16 products); l = l 2^(m - m') + sum P
//     (of the weights as P V takes them); acc = acc 2^(m - m') + P V (the split's first
//     tile starts from m = -inf, l = 0, acc = 0: its factor is 0); the two halves of a
//     row's 64 keys are summed apart, 32 keys each in order, then added;
//   - splits merge in order: the first is copied, each next one
//     M' = max(M, m), L = L 2^(M - M') + l 2^(m - M'), O = O 2^(M - M') + acc 2^(m - M');
//   - out = O / L.
// The decode kernel computes a row's splits in parallel blocks and merges them in a second
// kernel; the prefill kernel walks them in order within one block. Both take the same steps
// per row; a prefill block's rows that a tile or a split does not reach skip it, as the
// decode kernel never sees it. Rows of a block are (query row, query head) pairs of one KV
// head, 16 per warp; the two threads 2r and 2r + 1 own row r's softmax and, for the output,
// its columns 2j and 2j + 1.
#ifndef COIL_KERNELS_CUDA_PAGED_ATTENTION_TILES_H_
#define COIL_KERNELS_CUDA_PAGED_ATTENTION_TILES_H_

#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/ssd_chunks.h"  // COIL_HOST_DEVICE
#include "kernels/cuda/ssd_tiles.h"   // Bf16BitsOf, FloatOfBf16Bits

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <mma.h>
#endif

namespace coil::cuda {

// Loops over a thread's kD / 2 output columns unroll on the GPU, so that they stay in
// registers.
#if defined(__CUDA_ARCH__)
#define COIL_ATTN_UNROLL _Pragma("unroll")
#else
#define COIL_ATTN_UNROLL
#endif

constexpr int kAttnKeyTile = 64;     // keys per tile, aligned to multiples of 64 positions
constexpr int kAttnSplitKeys = 256;  // keys per split, aligned to multiples of 256 positions
constexpr int kAttnTilesPerSplit = kAttnSplitKeys / kAttnKeyTile;
constexpr int kAttnPrefillWarps = 4;  // a prefill block: 64 rows, 128 threads
constexpr int kAttnMaxDecodeWarps = 4;
static_assert(kAttnSplitKeys % kAttnKeyTile == 0);

// The head dims the kernels are built for (the CPU takes any).
COIL_HOST_DEVICE constexpr bool AttnHeadDimSupported(int64_t d) {
  return d == 16 || d == 32 || d == 64 || d == 128;
}

// The splits a context of `context` positions has (a row at position p has context p + 1).
COIL_HOST_DEVICE inline int32_t AttnSplits(int64_t context) {
  return static_cast<int32_t>((context + kAttnSplitKeys - 1) / kAttnSplitKeys);
}

// Everything the blocks read and write, device pointers on the GPU (host pointers in the
// emulation). Rows are addressed through their strides; the caches are contiguous
// [pages + 1, block_size, kv_heads, head_dim].
struct AttnParams {
  const float* q;
  int64_t q_stride;
  void* out;  // f32 or bf16 (out_bf16)
  int64_t out_stride;
  bool out_bf16;
  const void* k_cache;
  const void* v_cache;
  bool bf16;  // the caches' dtype: bf16 (tensor-core products) or f32
  int32_t heads, kv_heads, head_dim, block_size;
  float scale_log2;  // scale * log2(e)
  int32_t num_seqs;
  const int32_t* cu_seqlens;
  const int32_t* start_positions;
  const int32_t* cu_blocks;
  const int32_t* block_table;
  // Decode: the splits' partial results, [num_seqs, heads, max_splits] records of
  // (m, l, acc[head_dim]) (AttnPartialFloats each).
  float* partials;
  int32_t max_splits;
  // Prefill: the blocks' (sequence, first row pair) items.
  const int32_t* items;
};

COIL_HOST_DEVICE inline int64_t AttnPartialFloats(int32_t head_dim) { return head_dim + 2; }

// One row of a block: query row t (a row of q and out), head h, position p; valid false for
// the padding rows of a block.
struct AttnRow {
  int32_t t, h, p;
  bool valid;
};

// Which rows a block computes: a prefill block's 64 (query row, head) pairs from pair k0 of
// sequence s's run (pair k: row k / G, head g G + k % G), or a decode block's G heads of
// sequence s's one row.
struct AttnBlockRows {
  int32_t s, g, group, run, row0, start;  // group = G; row0 = cu_seqlens[s]
  int32_t k0;                             // prefill: the first pair; decode: -1
  COIL_HOST_DEVICE AttnRow Row(int r) const {
    if (k0 < 0) return {row0, g * group + r, start, r < group};
    const int32_t k = k0 + r, i = k / group;
    return {row0 + i, g * group + k % group, start + i, i < run};
  }
  // The block's last position: its keys are [0, last + 1).
  COIL_HOST_DEVICE int32_t LastPosition(int rows) const {
    if (k0 < 0) return start;
    const int32_t i = (k0 + rows - 1) / group;
    return start + (i < run - 1 ? i : run - 1);
  }
};

COIL_HOST_DEVICE inline AttnBlockRows AttnRowsOf(const AttnParams& a, int s, int g, int32_t k0) {
  AttnBlockRows b;
  b.s = s;
  b.g = g;
  b.group = a.heads / a.kv_heads;
  b.row0 = a.cu_seqlens[s];
  b.run = a.cu_seqlens[s + 1] - b.row0;
  b.start = a.start_positions[s];
  b.k0 = k0;
  return b;
}

// ---------------------------------------------------------------- shared memory
// Pitches (in elements) keep wmma's rules (bf16: a multiple of 8; fp32: of 4) and every row
// start 16-byte aligned (the cache rows are copied in 16-byte pieces), and skew consecutive
// rows across banks.
struct AttnSmemLayout {
  int32_t rows;  // 16 per warp
  int32_t head_dim;
  bool bf16;
  int32_t elem;       // bytes of a q/k/v element: 2 (bf16) or 4 (f32)
  int32_t qkv_pitch;  // q, k and v rows
  int32_t s_pitch;    // scores, fp32 [rows][64]
  int32_t p_pitch;    // weights [rows][64], bf16 or f32
  int32_t pv_pitch;   // P V, fp32 [rows][head_dim] (shares the scores' bytes)
  int64_t q_offset, k_offset, v_offset, s_offset, p_offset, row_offset, bytes;
};

COIL_HOST_DEVICE inline AttnSmemLayout AttnLayout(int32_t rows, int32_t head_dim, bool bf16) {
  AttnSmemLayout l;
  l.rows = rows;
  l.head_dim = head_dim;
  l.bf16 = bf16;
  l.elem = bf16 ? 2 : 4;
  l.qkv_pitch = head_dim + (bf16 ? 8 : 4);
  l.s_pitch = kAttnKeyTile + 4;
  l.p_pitch = kAttnKeyTile + (bf16 ? 8 : 4);
  l.pv_pitch = head_dim + 4;
  auto align = [](int64_t x) { return (x + 127) / 128 * 128; };
  l.q_offset = 0;
  l.k_offset = align(l.q_offset + int64_t{rows} * l.qkv_pitch * l.elem);
  l.v_offset = align(l.k_offset + int64_t{kAttnKeyTile} * l.qkv_pitch * l.elem);
  l.s_offset = align(l.v_offset + int64_t{kAttnKeyTile} * l.qkv_pitch * l.elem);
  const int64_t s_bytes = int64_t{rows} * l.s_pitch * 4, pv_bytes = int64_t{rows} * l.pv_pitch * 4;
  l.p_offset = align(l.s_offset + (s_bytes > pv_bytes ? s_bytes : pv_bytes));
  // Per row: the two halves' partial max and sum, then m, l, alpha and (prefill) M, L and
  // the split's merge factors.
  l.row_offset = align(l.p_offset + int64_t{rows} * l.p_pitch * l.elem);
  l.bytes = align(l.row_offset + int64_t{rows} * 12 * 4);
  return l;
}

// Views of one block's shared memory.
struct AttnSmem {
  AttnSmemLayout l;
  unsigned char* base;
  COIL_HOST_DEVICE unsigned char* q() const { return base + l.q_offset; }
  COIL_HOST_DEVICE unsigned char* k() const { return base + l.k_offset; }
  COIL_HOST_DEVICE unsigned char* v() const { return base + l.v_offset; }
  COIL_HOST_DEVICE float* s() const { return reinterpret_cast<float*>(base + l.s_offset); }
  COIL_HOST_DEVICE float* pv() const { return reinterpret_cast<float*>(base + l.s_offset); }
  COIL_HOST_DEVICE unsigned char* p() const { return base + l.p_offset; }
  // Row r's scalars: [0, 1] the halves' max, [2, 3] the halves' sum, 4 m, 5 l, 6 alpha,
  // 7 M, 8 L, 9 and 10 the merge factors, 11 whether the tile (or the split) reaches it.
  COIL_HOST_DEVICE float* row(int r) const {
    return reinterpret_cast<float*>(base + l.row_offset) + 12 * r;
  }
};

// ---------------------------------------------------------------- execution

// The host's stand-in for a block of kThreads threads (ssd_tiles.h's HostExec, with the
// attention kernels' thread counts and both wmma operand layouts).
template <int kThreads>
struct AttnHostExec {
  template <typename T>
  struct PerThread {
    T v[kThreads];
    T& operator()(int tid) { return v[tid]; }
  };
  template <typename F>
  void Threads(F f) {
    for (int tid = 0; tid < kThreads; ++tid) f(tid);
  }
  template <typename F>
  void Warps(F f) {
    for (int warp = 0; warp < kThreads / 32; ++warp) f(warp);
  }
  void Sync() {}
  // A cache row's 16 bytes into shared memory (cp.async on the GPU); Wait() completes them.
  static void CopyAsync(void* dst, const void* src) { std::memcpy(dst, src, 16); }
  void Wait() {}

  struct Acc {
    float v[16][16];
  };
  static void Zero(Acc& acc) {
    for (auto& row : acc.v) {
      for (float& e : row) e = 0.0f;
    }
  }
  // acc += A B with A 16x16 row-major at `a` (element (m, k) at a[m * lda + k]) and B
  // 16x16 at `b`, column-major (element (k, n) at b[n * ldb + k]) or row-major (at
  // b[k * ldb + n]); bf16 bits. The tensor core's order of the 16 products is unspecified;
  // fp32 sums in k order stand in for it.
  template <bool kBColMajor>
  static void Mma(Acc& acc, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) {
        float sum = acc.v[m][n];
        for (int k = 0; k < 16; ++k) {
          const uint16_t bv = kBColMajor ? b[n * ldb + k] : b[k * ldb + n];
          sum += FloatOfBf16Bits(a[m * lda + k]) * FloatOfBf16Bits(bv);
        }
        acc.v[m][n] = sum;
      }
    }
  }
  static void Store(float* out, const Acc& acc, int ld) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) out[m * ld + n] = acc.v[m][n];
    }
  }
};

#if defined(__CUDACC__)
struct AttnDeviceExec {
  template <typename T>
  struct PerThread {
    T v;
    __device__ T& operator()(int /*tid*/) { return v; }
  };
  template <typename F>
  __device__ void Threads(F f) {
    f(static_cast<int>(threadIdx.x));
  }
  template <typename F>
  __device__ void Warps(F f) {
    f(static_cast<int>(threadIdx.x >> 5));
  }
  __device__ void Sync() { __syncthreads(); }
  __device__ static void CopyAsync(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned smem = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(src));
#else
    *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
  }
  // Completes this thread's copies; the Sync() after it publishes them to the block.
  __device__ void Wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::);
#endif
  }

  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  __device__ static void Zero(Acc& acc) { nvcuda::wmma::fill_fragment(acc, 0.0f); }
  template <bool kBColMajor>
  __device__ static void Mma(Acc& acc, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    namespace wmma = nvcuda::wmma;
    using BLayout = typename std::conditional<kBColMajor, wmma::col_major, wmma::row_major>::type;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, BLayout> fb;
    wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16*>(a), lda);
    wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16*>(b), ldb);
    wmma::mma_sync(acc, fa, fb, acc);
#else
    __trap();  // bf16 tensor cores need sm_80 or newer; the launcher checks
#endif
  }
  __device__ static void Store(float* out, const Acc& acc, int ld) {
    nvcuda::wmma::store_matrix_sync(out, acc, ld, nvcuda::wmma::mem_row_major);
  }
};
#endif  // __CUDACC__

COIL_HOST_DEVICE inline float AttnExp2(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}

COIL_HOST_DEVICE inline float AttnNegInf() { return -INFINITY; }

// ---------------------------------------------------------------- the steps

// Row r's q (head_dim values of row t, head h) into shared memory as the products take it
// (bf16 bits or f32); zeros for a padding row.
template <typename Exec>
COIL_HOST_DEVICE void AttnLoadQ(Exec& ex, const AttnParams& a, const AttnSmem& sm,
                                const AttnBlockRows& br, int threads) {
  const int d = a.head_dim;
  ex.Threads([&](int tid) {
    for (int e = tid; e < sm.l.rows * d; e += threads) {
      const int r = e / d, i = e % d;
      const AttnRow row = br.Row(r);
      const float v = row.valid ? a.q[int64_t{row.t} * a.q_stride + int64_t{row.h} * d + i] : 0.0f;
      if (a.bf16) {
        reinterpret_cast<uint16_t*>(sm.q())[r * sm.l.qkv_pitch + i] = Bf16BitsOf(v);
      } else {
        reinterpret_cast<float*>(sm.q())[r * sm.l.qkv_pitch + i] = v;
      }
    }
  });
}

// Starts copying the keys (`values` false) or values of positions [key0, key0 + count) of
// sequence s, KV head g, into shared memory rows 0..count-1 (zeros in rows count..63): each
// cache row in 16-byte pieces, page by page as the block table says. Completed by Wait().
template <typename Exec>
COIL_HOST_DEVICE void AttnLoadKv(Exec& ex, const AttnParams& a, const AttnSmem& sm, int s, int g,
                                 int64_t key0, int count, bool values, int threads) {
  const int pieces = a.head_dim * sm.l.elem / 16;  // 16-byte pieces per row
  const unsigned char* cache = static_cast<const unsigned char*>(values ? a.v_cache : a.k_cache);
  unsigned char* dst = values ? sm.v() : sm.k();
  const int32_t* table = a.block_table + a.cu_blocks[s];
  const int64_t row_bytes = int64_t{a.head_dim} * sm.l.elem;
  ex.Threads([&](int tid) {
    for (int e = tid; e < kAttnKeyTile * pieces; e += threads) {
      const int j = e / pieces, c = e % pieces;
      unsigned char* to = dst + (int64_t{j} * sm.l.qkv_pitch * sm.l.elem) + 16 * c;
      if (j < count) {
        const int64_t p = key0 + j;
        const int64_t slot = int64_t{table[p / a.block_size]} * a.block_size + p % a.block_size;
        Exec::CopyAsync(to, cache + (slot * a.kv_heads + g) * row_bytes + 16 * c);
      } else {
        for (int b = 0; b < 16; ++b) to[b] = 0;
      }
    }
  });
}

// S = q K^T for the block's rows and the tile's 64 keys, into sm.s() (fp32 [rows][64]).
template <typename Exec>
COIL_HOST_DEVICE void AttnScores(Exec& ex, const AttnParams& a, const AttnSmem& sm, int threads) {
  const int d = a.head_dim;
  if (a.bf16) {
    ex.Warps([&](int warp) {
      const uint16_t* q = reinterpret_cast<const uint16_t*>(sm.q()) + 16 * warp * sm.l.qkv_pitch;
      const uint16_t* k = reinterpret_cast<const uint16_t*>(sm.k());
      for (int nb = 0; nb < kAttnKeyTile / 16; ++nb) {
        typename Exec::Acc acc;
        Exec::Zero(acc);
        for (int kk = 0; kk < d; kk += 16) {
          Exec::template Mma<true>(acc, q + kk, sm.l.qkv_pitch, k + 16 * nb * sm.l.qkv_pitch + kk,
                                   sm.l.qkv_pitch);
        }
        Exec::Store(sm.s() + 16 * warp * sm.l.s_pitch + 16 * nb, acc, sm.l.s_pitch);
      }
    });
    return;
  }
  ex.Threads([&](int tid) {
    const float* q = reinterpret_cast<const float*>(sm.q());
    const float* k = reinterpret_cast<const float*>(sm.k());
    for (int e = tid; e < sm.l.rows * kAttnKeyTile; e += threads) {
      const int r = e / kAttnKeyTile, j = e % kAttnKeyTile;
      float sum = 0.0f;
      for (int i = 0; i < d; ++i)
        sum = fmaf(q[r * sm.l.qkv_pitch + i], k[j * sm.l.qkv_pitch + i], sum);
      sm.s()[r * sm.l.s_pitch + j] = sum;
    }
  });
}

// P V for the block's rows, into sm.pv() (fp32 [rows][head_dim], over the scores' bytes).
template <typename Exec>
COIL_HOST_DEVICE void AttnValues(Exec& ex, const AttnParams& a, const AttnSmem& sm, int threads) {
  const int d = a.head_dim;
  if (a.bf16) {
    ex.Warps([&](int warp) {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(sm.p()) + 16 * warp * sm.l.p_pitch;
      const uint16_t* v = reinterpret_cast<const uint16_t*>(sm.v());
      for (int nb = 0; nb < d / 16; ++nb) {
        typename Exec::Acc acc;
        Exec::Zero(acc);
        for (int kk = 0; kk < kAttnKeyTile; kk += 16) {
          Exec::template Mma<false>(acc, p + kk, sm.l.p_pitch, v + kk * sm.l.qkv_pitch + 16 * nb,
                                    sm.l.qkv_pitch);
        }
        Exec::Store(sm.pv() + 16 * warp * sm.l.pv_pitch + 16 * nb, acc, sm.l.pv_pitch);
      }
    });
    return;
  }
  ex.Threads([&](int tid) {
    const float* p = reinterpret_cast<const float*>(sm.p());
    const float* v = reinterpret_cast<const float*>(sm.v());
    for (int e = tid; e < sm.l.rows * d; e += threads) {
      const int r = e / d, i = e % d;
      float sum = 0.0f;
      for (int j = 0; j < kAttnKeyTile; ++j)
        sum = fmaf(p[r * sm.l.p_pitch + j], v[j * sm.l.qkv_pitch + i], sum);
      sm.pv()[r * sm.l.pv_pitch + i] = sum;
    }
  });
}

// Tile [key0, key0 + 64)'s weights for each row it reaches (key0 <= the row's position):
// each half's max of the scaled scores (keys past the row's position masked), then, after
// a barrier, the weights 2^(s - m') into sm.p() (rounded to bf16 for the bf16 products)
// and each half's sum of them, 32 keys in order. Threads 2r and 2r + 1 own row r.
template <typename Exec>
COIL_HOST_DEVICE void AttnSoftmaxHalves(Exec& ex, const AttnParams& a, const AttnSmem& sm,
                                        const AttnBlockRows& br, int64_t key0) {
  ex.Threads([&](int tid) {
    const int r = tid >> 1, half = tid & 1;
    float* rs = sm.row(r);
    const AttnRow row = br.Row(r);
    const bool active = row.valid && key0 <= row.p;
    if (half == 0) rs[11] = active ? 1.0f : 0.0f;
    float mx = AttnNegInf();
    for (int j = 32 * half; active && j < 32 * half + 32 && key0 + j <= row.p; ++j) {
      mx = fmaxf(mx, sm.s()[r * sm.l.s_pitch + j] * a.scale_log2);
    }
    rs[half] = mx;
  });
  ex.Sync();
  ex.Threads([&](int tid) {
    const int r = tid >> 1, half = tid & 1;
    float* rs = sm.row(r);
    const AttnRow row = br.Row(r);
    const bool active = rs[11] != 0.0f;
    const float m_new = fmaxf(rs[4], fmaxf(rs[0], rs[1]));
    float sum = 0.0f;
    for (int j = 32 * half; j < 32 * half + 32; ++j) {
      float w = 0.0f;
      if (active && key0 + j <= row.p)
        w = AttnExp2(sm.s()[r * sm.l.s_pitch + j] * a.scale_log2 - m_new);
      if (a.bf16) {
        const uint16_t bits = Bf16BitsOf(w);
        reinterpret_cast<uint16_t*>(sm.p())[r * sm.l.p_pitch + j] = bits;
        sum += FloatOfBf16Bits(bits);
      } else {
        reinterpret_cast<float*>(sm.p())[r * sm.l.p_pitch + j] = w;
        sum += w;
      }
    }
    rs[2 + half] = sum;
  });
}

// After AttnSoftmaxHalves and a barrier: each active row's m, l and alpha = 2^(m - m')
// (0 for the split's first tile, whose m is -inf), by thread 2r.
template <typename Exec>
COIL_HOST_DEVICE void AttnRowStep(Exec& ex, const AttnSmem& sm) {
  ex.Threads([&](int tid) {
    if (tid & 1) return;
    float* rs = sm.row(tid >> 1);
    if (rs[11] == 0.0f) return;
    const float m_new = fmaxf(rs[4], fmaxf(rs[0], rs[1]));
    const float alpha = AttnExp2(rs[4] - m_new);
    rs[6] = alpha;
    rs[5] = rs[5] * alpha + (rs[2] + rs[3]);
    rs[4] = m_new;
  });
}

// Per-thread output state: thread 2r + h holds columns 2j + h (j < kD / 2) of row r's acc
// for the split and, in a prefill block, of the merged O.
template <int kD>
struct AttnThreadAcc {
  float acc[kD / 2];
  float o[kD / 2];
};

template <int kD, typename Exec>
using AttnAccs = typename Exec::template PerThread<AttnThreadAcc<kD>>;

// acc = acc * alpha + P V for each row the tile reached.
template <int kD, typename Exec>
COIL_HOST_DEVICE void AttnUpdateAcc(Exec& ex, const AttnSmem& sm, AttnAccs<kD, Exec>& st) {
  ex.Threads([&](int tid) {
    const int r = tid >> 1, half = tid & 1;
    const float* rs = sm.row(r);
    if (rs[11] == 0.0f) return;
    const float alpha = rs[6];
    const float* pv = sm.pv() + r * sm.l.pv_pitch + half;
    AttnThreadAcc<kD>& t = st(tid);
    COIL_ATTN_UNROLL
    for (int j = 0; j < kD / 2; ++j) t.acc[j] = t.acc[j] * alpha + pv[2 * j];
  });
}

// One split's tiles, keys [split_begin, key_end) with key_end <= split_begin + 256, for the
// block's rows, from a fresh state (m -inf, l 0, acc 0). Leaves each row's m and l in
// sm.row(r)[4], [5] and its acc in st.
template <int kD, typename Exec>
COIL_HOST_DEVICE void AttnSplit(Exec& ex, const AttnParams& a, const AttnSmem& sm,
                                const AttnBlockRows& br, int64_t split_begin, int64_t key_end,
                                AttnAccs<kD, Exec>& st, int threads) {
  ex.Threads([&](int tid) {
    if ((tid & 1) == 0) {
      sm.row(tid >> 1)[4] = AttnNegInf();
      sm.row(tid >> 1)[5] = 0.0f;
    }
    COIL_ATTN_UNROLL
    for (int j = 0; j < kD / 2; ++j) st(tid).acc[j] = 0.0f;
  });
  for (int64_t key0 = split_begin; key0 < key_end; key0 += kAttnKeyTile) {
    const int count =
        static_cast<int>(key_end - key0 < kAttnKeyTile ? key_end - key0 : kAttnKeyTile);
    AttnLoadKv(ex, a, sm, br.s, br.g, key0, count, /*values=*/false, threads);
    AttnLoadKv(ex, a, sm, br.s, br.g, key0, count, /*values=*/true, threads);
    ex.Wait();
    ex.Sync();
    AttnScores(ex, a, sm, threads);
    ex.Sync();
    AttnSoftmaxHalves(ex, a, sm, br, key0);
    ex.Sync();
    AttnRowStep(ex, sm);
    AttnValues(ex, a, sm, threads);  // P V over the scores' bytes: read by nobody any more
    ex.Sync();
    AttnUpdateAcc<kD>(ex, sm, st);
    ex.Sync();  // before the next tile's scores overwrite P V and its loads k and v
  }
}

// Writes row r's columns (this thread's: 2j + half) of value(j) to out, f32 or bf16.
template <int kD, typename Value>
COIL_HOST_DEVICE void AttnStoreOut(const AttnParams& a, const AttnRow& row, int half, Value value) {
  const int64_t base = int64_t{row.t} * a.out_stride + int64_t{row.h} * a.head_dim + half;
  COIL_ATTN_UNROLL
  for (int j = 0; j < kD / 2; ++j) {
    const float v = value(j);
    if (a.out_bf16) {
      static_cast<uint16_t*>(a.out)[base + 2 * j] = Bf16BitsOf(v);
    } else {
      static_cast<float*>(a.out)[base + 2 * j] = v;
    }
  }
}

// A split's (m, l, acc) merged into the running (M, L, O), in split order: the first one
// copied, each next one scaled to the new maximum. Returns the factors for O and acc
// (f_old < 0 means copy). The same arithmetic in the prefill block and the decode combine.
struct AttnMergeFactors {
  float f_old, f_new;
};
COIL_HOST_DEVICE inline AttnMergeFactors AttnMerge(float& M, float& L, float m, float l) {
  if (L == 0.0f) {
    M = m;
    L = l;
    return {-1.0f, 1.0f};
  }
  const float m_new = fmaxf(M, m);
  const AttnMergeFactors f{AttnExp2(M - m_new), AttnExp2(m - m_new)};
  L = L * f.f_old + l * f.f_new;
  M = m_new;
  return f;
}
COIL_HOST_DEVICE inline float AttnMerged(float o, float acc, AttnMergeFactors f) {
  return f.f_old < 0.0f ? acc : o * f.f_old + acc * f.f_new;
}

// ---------------------------------------------------------------- the blocks

// A prefill block: item (s, k0), KV head g; kAttnPrefillWarps warps, 64 rows. Walks the
// splits of keys [0, last + 1) in order, merging each into the rows it reaches.
template <int kD, typename Exec>
COIL_HOST_DEVICE void AttnPrefillBlock(Exec& ex, const AttnParams& a, const AttnSmem& sm, int s,
                                       int g, int32_t k0) {
  constexpr int kThreads = 32 * kAttnPrefillWarps;
  const AttnBlockRows br = AttnRowsOf(a, s, g, k0);
  const int64_t keys = int64_t{br.LastPosition(sm.l.rows)} + 1;
  AttnAccs<kD, Exec> st;
  ex.Threads([&](int tid) {
    if ((tid & 1) == 0) sm.row(tid >> 1)[8] = 0.0f;  // L
    COIL_ATTN_UNROLL
    for (int j = 0; j < kD / 2; ++j) st(tid).o[j] = 0.0f;
  });
  AttnLoadQ(ex, a, sm, br, kThreads);
  for (int64_t split = 0; split < keys; split += kAttnSplitKeys) {
    const int64_t end = keys < split + kAttnSplitKeys ? keys : split + kAttnSplitKeys;
    AttnSplit<kD>(ex, a, sm, br, split, end, st, kThreads);
    ex.Threads([&](int tid) {  // the merge factors of each row the split reached
      if (tid & 1) return;
      float* rs = sm.row(tid >> 1);
      const AttnRow row = br.Row(tid >> 1);
      rs[11] = row.valid && row.p >= split ? 1.0f : 0.0f;
      if (rs[11] == 0.0f) return;
      const AttnMergeFactors f = AttnMerge(rs[7], rs[8], rs[4], rs[5]);
      rs[9] = f.f_old;
      rs[10] = f.f_new;
    });
    ex.Sync();
    ex.Threads([&](int tid) {
      const float* rs = sm.row(tid >> 1);
      if (rs[11] == 0.0f) return;
      const AttnMergeFactors f{rs[9], rs[10]};
      AttnThreadAcc<kD>& t = st(tid);
      COIL_ATTN_UNROLL
      for (int j = 0; j < kD / 2; ++j) t.o[j] = AttnMerged(t.o[j], t.acc[j], f);
    });
    ex.Sync();
  }
  ex.Threads([&](int tid) {
    const AttnRow row = br.Row(tid >> 1);
    if (!row.valid) return;
    const float L = sm.row(tid >> 1)[8];
    const AttnThreadAcc<kD>& t = st(tid);
    AttnStoreOut<kD>(a, row, tid & 1, [&](int j) { return t.o[j] / L; });
  });
}

// Whether the decode grid's block (split, s) has work: sequence s is a run of one row and
// the split lies within its context. Both are read from the batch's device arrays, never
// from the launch: the grid spans max_splits (a graph's capacity), so one captured launch
// serves any context up to it, the blocks past a sequence's own context returning at once.
COIL_HOST_DEVICE inline bool AttnDecodeBlockHasWork(const AttnParams& a, int s, int32_t split) {
  if (a.cu_seqlens[s + 1] - a.cu_seqlens[s] != 1) return false;  // a prefill run
  return split < AttnSplits(int64_t{a.start_positions[s]} + 1);
}

// A decode block: split `split` of sequence s's one row (a run of one), KV head g; rows are
// the G query heads. A row of one split writes out = acc / l (the merge of one split is
// that copy); otherwise the split's (m, l, acc) go to the partials for AttnCombineRow.
template <int kD, typename Exec>
COIL_HOST_DEVICE void AttnDecodeBlock(Exec& ex, const AttnParams& a, const AttnSmem& sm, int s,
                                      int g, int32_t split, int threads) {
  const AttnBlockRows br = AttnRowsOf(a, s, g, -1);
  const int64_t context = int64_t{br.start} + 1;
  const int32_t splits = AttnSplits(context);
  const int64_t begin = int64_t{split} * kAttnSplitKeys;
  const int64_t end = context < begin + kAttnSplitKeys ? context : begin + kAttnSplitKeys;
  AttnAccs<kD, Exec> st;
  AttnLoadQ(ex, a, sm, br, threads);
  AttnSplit<kD>(ex, a, sm, br, begin, end, st, threads);
  ex.Threads([&](int tid) {
    const AttnRow row = br.Row(tid >> 1);
    if (!row.valid) return;
    const float* rs = sm.row(tid >> 1);
    const AttnThreadAcc<kD>& t = st(tid);
    if (splits == 1) {
      AttnStoreOut<kD>(a, row, tid & 1, [&](int j) { return t.acc[j] / rs[5]; });
      return;
    }
    float* rec = a.partials + ((int64_t{s} * a.heads + row.h) * a.max_splits + split) *
                                  AttnPartialFloats(a.head_dim);
    if ((tid & 1) == 0) {
      rec[0] = rs[4];
      rec[1] = rs[5];
    }
    COIL_ATTN_UNROLL
    for (int j = 0; j < kD / 2; ++j) rec[2 + 2 * j + (tid & 1)] = t.acc[j];
  });
}

// The decode merge for (sequence s, head h), column `col` (one thread each): its splits'
// partials in order, as AttnPrefillBlock merges them, then out = O / L. Nothing for a
// sequence that is not a decode row or has one split (AttnDecodeBlock wrote it).
COIL_HOST_DEVICE inline void AttnCombineColumn(const AttnParams& a, int s, int h, int col) {
  const int32_t row0 = a.cu_seqlens[s];
  if (a.cu_seqlens[s + 1] - row0 != 1) return;
  const int32_t splits = AttnSplits(int64_t{a.start_positions[s]} + 1);
  if (splits == 1) return;
  const int64_t floats = AttnPartialFloats(a.head_dim);
  const float* rec = a.partials + (int64_t{s} * a.heads + h) * a.max_splits * floats;
  float M = 0.0f, L = 0.0f, o = 0.0f;
  for (int32_t i = 0; i < splits; ++i, rec += floats) {
    const AttnMergeFactors f = AttnMerge(M, L, rec[0], rec[1]);
    o = AttnMerged(o, rec[2 + col], f);
  }
  const float v = o / L;
  const int64_t at = int64_t{row0} * a.out_stride + int64_t{h} * a.head_dim + col;
  if (a.out_bf16) {
    static_cast<uint16_t*>(a.out)[at] = Bf16BitsOf(v);
  } else {
    static_cast<float*>(a.out)[at] = v;
  }
}

// KvCacheWrite's element i (of kv_heads * head_dim) of row t of sequence s: k and v rows
// into page block_table[cu_blocks[s] + p / block_size], slot p % block_size.
struct KvWriteParams {
  const float* k;
  int64_t k_stride;
  const float* v;
  int64_t v_stride;
  void* k_cache;
  void* v_cache;
  bool bf16;
  int32_t width, block_size;
  const int32_t* start_positions;
  const int32_t* cu_blocks;
  const int32_t* block_table;
};

COIL_HOST_DEVICE inline void KvWriteElement(const KvWriteParams& w, int s, int32_t row0, int32_t t,
                                            int32_t i) {
  const int64_t p = int64_t{w.start_positions[s]} + (t - row0);
  const int64_t slot =
      int64_t{w.block_table[w.cu_blocks[s] + p / w.block_size]} * w.block_size + p % w.block_size;
  const int64_t at = slot * w.width + i;
  const float kv = w.k[int64_t{t} * w.k_stride + i], vv = w.v[int64_t{t} * w.v_stride + i];
  if (w.bf16) {
    static_cast<uint16_t*>(w.k_cache)[at] = Bf16BitsOf(kv);
    static_cast<uint16_t*>(w.v_cache)[at] = Bf16BitsOf(vv);
  } else {
    static_cast<float*>(w.k_cache)[at] = kv;
    static_cast<float*>(w.v_cache)[at] = vv;
  }
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_PAGED_ATTENTION_TILES_H_
