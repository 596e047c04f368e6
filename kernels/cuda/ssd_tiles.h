// The chunked scan's 64x64 tile products (ssd_scan.cu), written once for the GPU and for a
// host emulation (tests/unit/kernels/cuda/ssm_scan_emulation_test.cc).
//
// A block's work between two barriers is a function of the thread index or of the warp
// index, and an Exec runs it: DeviceExec gives each thread its own index (each warp its
// own, all lanes together) and Sync() is __syncthreads(); HostExec calls the function for
// every index in turn and Sync() does nothing, which is all a barrier promises. Values one
// thread (warp) keeps across barriers live in Exec::PerThread<T> (PerWarp<T>): a register
// value on the GPU, one per index on the host.
//
// TileAccumulator sums products A (64 x K) B (K x 64) into a 64x64 fp32 tile, in one of two
// forms that hand every thread the same outputs, rows ty + 16 i and columns tx + 16 j
// (tx = thread % 16, ty = thread / 16), so the kernels' epilogues are common:
//   - fp32: SIMT, 4 x 4 outputs per thread, operands staged through shared memory 16 deep;
//   - bf16: operands rounded to bf16 (round to nearest even) as they are staged 32 deep,
//     then 16x16x16 tensor-core products with fp32 accumulation (wmma), each warp owning
//     two 16x16 accumulators (rows 16 (w / 2), columns 32 (w % 2) and 32 (w % 2) + 16);
//     Finish() moves them through shared memory into the per-thread layout.
// The loaders load_a(m, k) and load_b(k, n) return the operand as fp32 (0 outside the
// tile's valid rows and columns); kAAlongK (kBAlongK) says k is the index contiguous in
// memory, so that consecutive threads load consecutive addresses.
#ifndef COIL_KERNELS_CUDA_SSD_TILES_H_
#define COIL_KERNELS_CUDA_SSD_TILES_H_

#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/bf16_bits.h"   // Bf16BitsOf, FloatOfBf16Bits
#include "kernels/cuda/ssd_chunks.h"  // COIL_HOST_DEVICE

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <mma.h>
#endif

namespace coil::cuda {

constexpr int kSsdTile = 64;           // output tile edge
constexpr int kSsdTileThreads = 256;   // 16 x 16 threads, 4 x 4 outputs each
constexpr int kSsdTileWarps = kSsdTileThreads / 32;

// The 4 x 4 outputs of one thread.
struct TileOutputs {
  float v[4][4];
};

// Shared memory of one form. The bf16 form's staged operands and its fp32 output tile
// share the same bytes (the output is written after the last product has read them).
template <bool kBf16>
struct TileSmem;

template <>
struct TileSmem<false> {
  static constexpr int kDepth = 16;
  // [k][m] and [k][n]; +1 keeps the transposing stores free of most bank conflicts.
  float a[kDepth][kSsdTile + 1];
  float b[kDepth][kSsdTile + 1];
};

template <>
struct TileSmem<true> {
  static constexpr int kDepth = 32;
  // Row pitch of the staged bf16 operands, in elements: a multiple of 8 (wmma) whose 144
  // bytes put 8 consecutive rows on distinct 16-byte bank groups.
  static constexpr int kLd = kSsdTile + 8;
  static constexpr int kOutLd = kSsdTile + 4;  // fp32 output tile pitch (a multiple of 4)
  static constexpr int kStageBytes = 2 * kDepth * kLd * 2;
  static constexpr int kOutBytes = kSsdTile * kOutLd * 4;
  alignas(128) unsigned char raw[kStageBytes > kOutBytes ? kStageBytes : kOutBytes];
  // A stored [k][m] (column-major for wmma), B stored [k][n] (row-major), as bf16 bits.
  COIL_HOST_DEVICE uint16_t* a() { return reinterpret_cast<uint16_t*>(raw); }
  COIL_HOST_DEVICE uint16_t* b() { return reinterpret_cast<uint16_t*>(raw) + kDepth * kLd; }
  COIL_HOST_DEVICE float* out() { return reinterpret_cast<float*>(raw); }
};
// wmma's rules: ldm a multiple of 8 (16-bit) or 4 (fp32) elements, and every fragment
// pointer 32-byte aligned (row blocks of 16, column offsets of 16, the B plane's start).
static_assert(TileSmem<true>::kLd % 8 == 0 && TileSmem<true>::kOutLd % 4 == 0);
static_assert((16 * TileSmem<true>::kLd * 2) % 32 == 0 && (16 * 2) % 32 == 0);
static_assert((TileSmem<true>::kDepth * TileSmem<true>::kLd * 2) % 32 == 0);
static_assert((16 * TileSmem<true>::kOutLd * 4) % 32 == 0);
static_assert(TileSmem<true>::kDepth % 16 == 0 && kSsdTileThreads == 256);

// ---------------------------------------------------------------- host emulation

struct HostExec {
  template <typename T>
  struct PerThread {
    T v[kSsdTileThreads];
    T& operator()(int tid) { return v[tid]; }
  };
  template <typename T>
  struct PerWarp {
    T v[kSsdTileWarps];
    T& operator()(int warp) { return v[warp]; }
  };
  template <typename F>
  void Threads(F f) {
    for (int tid = 0; tid < kSsdTileThreads; ++tid) f(tid);
  }
  template <typename F>
  void Warps(F f) {
    for (int warp = 0; warp < kSsdTileWarps; ++warp) f(warp);
  }
  void Sync() {}

  // One 16x16 fp32 accumulator and the three wmma operations on it.
  struct Acc {
    float v[16][16];
  };
  static void Zero(Acc& acc) {
    for (auto& row : acc.v) {
      for (float& e : row) e = 0.0f;
    }
  }
  // acc += A B, A 16x16 column-major at `a` (element (m, k) at a[k * lda + m]), B 16x16
  // row-major at `b` (element (k, n) at b[k * ldb + n]), both bf16 bits. The tensor core's
  // order of the 16 products is unspecified; fp32 sums in k order stand in for it.
  static void Mma(Acc& acc, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) {
        float sum = acc.v[m][n];
        for (int k = 0; k < 16; ++k) {
          sum += FloatOfBf16Bits(a[k * lda + m]) * FloatOfBf16Bits(b[k * ldb + n]);
        }
        acc.v[m][n] = sum;
      }
    }
  }
  // Row-major store: element (m, n) to out[m * ld + n].
  static void Store(float* out, const Acc& acc, int ld) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) out[m * ld + n] = acc.v[m][n];
    }
  }
};

// ---------------------------------------------------------------- the GPU

#if defined(__CUDACC__)
struct DeviceExec {
  template <typename T>
  struct PerThread {
    T v;
    __device__ T& operator()(int /*tid*/) { return v; }
  };
  template <typename T>
  struct PerWarp {
    T v;
    __device__ T& operator()(int /*warp*/) { return v; }
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

  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  __device__ static void Zero(Acc& acc) { nvcuda::wmma::fill_fragment(acc, 0.0f); }
  __device__ static void Mma(Acc& acc, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    namespace wmma = nvcuda::wmma;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
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

// ---------------------------------------------------------------- the accumulator

// Thread tid's share of one stage: kSsdTile x kDepth elements of each operand, k from k0
// (0 past k_count), handed to put_a(k, m, value) and put_b(k, n, value). Consecutive
// threads take consecutive addresses along the operand's contiguous index.
template <int kDepth, bool kAAlongK, bool kBAlongK, typename LoadA, typename LoadB,
          typename PutA, typename PutB>
COIL_HOST_DEVICE inline void StageOperands(int tid, int32_t k0, int32_t k_count, LoadA& load_a,
                                           LoadB& load_b, PutA put_a, PutB put_b) {
  constexpr int kLoads = kSsdTile * kDepth / kSsdTileThreads;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < kLoads; ++i) {
    const int e = tid + i * kSsdTileThreads;
    const int am = kAAlongK ? e / kDepth : e % kSsdTile;
    const int ak = kAAlongK ? e % kDepth : e / kSsdTile;
    put_a(ak, am, k0 + ak < k_count ? load_a(am, k0 + ak) : 0.0f);
    const int bn = kBAlongK ? e / kDepth : e % kSsdTile;
    const int bk = kBAlongK ? e % kDepth : e / kSsdTile;
    put_b(bk, bn, k0 + bk < k_count ? load_b(k0 + bk, bn) : 0.0f);
  }
}

template <bool kBf16, typename Exec>
class TileAccumulator;

template <typename Exec>
class TileAccumulator<false, Exec> {
 public:
  COIL_HOST_DEVICE TileAccumulator(Exec& ex, TileSmem<false>& sm) : ex_(ex), sm_(sm) {
    ex_.Threads([&](int tid) {
      for (auto& row : out_(tid).v) {
        for (float& e : row) e = 0.0f;
      }
    });
  }

  template <bool kAAlongK, bool kBAlongK, typename LoadA, typename LoadB>
  COIL_HOST_DEVICE void Add(int32_t k_count, LoadA load_a, LoadB load_b) {
    constexpr int kDepth = TileSmem<false>::kDepth;
    for (int32_t k0 = 0; k0 < k_count; k0 += kDepth) {
      ex_.Threads([&](int tid) {
        StageOperands<kDepth, kAAlongK, kBAlongK>(
            tid, k0, k_count, load_a, load_b, [&](int k, int m, float v) { sm_.a[k][m] = v; },
            [&](int k, int n, float v) { sm_.b[k][n] = v; });
      });
      ex_.Sync();
      ex_.Threads([&](int tid) {
        const int tx = tid % 16, ty = tid / 16;
        float(&acc)[4][4] = out_(tid).v;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int k = 0; k < kDepth; ++k) {
          float av[4], bv[4];
          for (int i = 0; i < 4; ++i) av[i] = sm_.a[k][ty + 16 * i];
          for (int j = 0; j < 4; ++j) bv[j] = sm_.b[k][tx + 16 * j];
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
          }
        }
      });
      ex_.Sync();
    }
  }

  COIL_HOST_DEVICE void Finish() {}
  COIL_HOST_DEVICE const TileOutputs& Out(int tid) { return out_(tid); }

 private:
  Exec& ex_;
  TileSmem<false>& sm_;
  typename Exec::template PerThread<TileOutputs> out_;
};

template <typename Exec>
class TileAccumulator<true, Exec> {
 public:
  using Smem = TileSmem<true>;

  COIL_HOST_DEVICE TileAccumulator(Exec& ex, Smem& sm) : ex_(ex), sm_(sm) {
    ex_.Warps([&](int warp) {
      Exec::Zero(acc_(warp).part[0]);
      Exec::Zero(acc_(warp).part[1]);
    });
  }

  template <bool kAAlongK, bool kBAlongK, typename LoadA, typename LoadB>
  COIL_HOST_DEVICE void Add(int32_t k_count, LoadA load_a, LoadB load_b) {
    constexpr int kDepth = Smem::kDepth, kLd = Smem::kLd;
    for (int32_t k0 = 0; k0 < k_count; k0 += kDepth) {
      ex_.Threads([&](int tid) {
        uint16_t* a = sm_.a();
        uint16_t* b = sm_.b();
        StageOperands<kDepth, kAAlongK, kBAlongK>(
            tid, k0, k_count, load_a, load_b,
            [&](int k, int m, float v) { a[k * kLd + m] = Bf16BitsOf(v); },
            [&](int k, int n, float v) { b[k * kLd + n] = Bf16BitsOf(v); });
      });
      ex_.Sync();
      ex_.Warps([&](int warp) {
        const int m0 = 16 * (warp / 2), n0 = 32 * (warp % 2);
        for (int kk = 0; kk < kDepth; kk += 16) {
          const uint16_t* a = sm_.a() + kk * kLd + m0;
          const uint16_t* b = sm_.b() + kk * kLd + n0;
          Exec::Mma(acc_(warp).part[0], a, kLd, b, kLd);
          Exec::Mma(acc_(warp).part[1], a, kLd, b + 16, kLd);
        }
      });
      ex_.Sync();
    }
  }

  // The accumulators into the per-thread layout, through the (now unused) staging bytes.
  COIL_HOST_DEVICE void Finish() {
    constexpr int kOutLd = Smem::kOutLd;
    ex_.Warps([&](int warp) {
      float* out = sm_.out() + 16 * (warp / 2) * kOutLd + 32 * (warp % 2);
      Exec::Store(out, acc_(warp).part[0], kOutLd);
      Exec::Store(out + 16, acc_(warp).part[1], kOutLd);
    });
    ex_.Sync();
    ex_.Threads([&](int tid) {
      const int tx = tid % 16, ty = tid / 16;
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          out_(tid).v[i][j] = sm_.out()[(ty + 16 * i) * kOutLd + tx + 16 * j];
        }
      }
    });
    ex_.Sync();  // the bytes are staging space again for a next tile
  }

  COIL_HOST_DEVICE const TileOutputs& Out(int tid) { return out_(tid); }

 private:
  struct WarpAcc {
    typename Exec::Acc part[2];
  };
  Exec& ex_;
  Smem& sm_;
  typename Exec::template PerWarp<WarpAcc> acc_;
  typename Exec::template PerThread<TileOutputs> out_;
};

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSD_TILES_H_
