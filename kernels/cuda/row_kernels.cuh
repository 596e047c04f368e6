// Helpers shared by the row kernels (one thread block per row, rows strided over the grid):
// the grid size and a block-wide sum whose order depends only on the block size, which is
// fixed per kernel, so a row's result never depends on how many rows run with it.
#ifndef COIL_KERNELS_CUDA_ROW_KERNELS_CUH_
#define COIL_KERNELS_CUDA_ROW_KERNELS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/tensor.h"

namespace coil::cuda {

// A row kernel's output element: f32, or rounded to bf16 (a bf16 matmul's input rows).
__device__ __forceinline__ void StoreOut(float* out, float v) { *out = v; }
__device__ __forceinline__ void StoreOut(__nv_bfloat16* out, float v) {
  *out = __float2bfloat16_rn(v);
}

// Calls launch(p) with `out`'s data as the pointer type its dtype (f32 or bf16) names, so
// one launch expression serves both instantiations of a kernel templated on StoreOut's type.
template <typename Launch>
void WithOutPointer(const Tensor& out, Launch launch) {
  if (out.dtype() == DType::kBF16) {
    launch(static_cast<__nv_bfloat16*>(out.raw()));
  } else {
    launch(out.data<float>());
  }
}

// Threads per block of the row kernels: a multiple of the warp size, at most 32 warps.
inline constexpr int kRowThreads = 256;
static_assert(kRowThreads % 32 == 0 && kRowThreads <= 1024);

// Blocks for `rows` rows: one per row up to gridDim.x's limit (2^31 - 1); the kernels loop
// `row += gridDim.x`, so more rows than that still run, several per block.
inline unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, int64_t{0x7fffffff}));
}

// A butterfly sum: every lane ends with the same bits (each step adds the same two
// partials in either order, and float addition is commutative).
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of `v` over the block, returned to every thread. `scratch` holds 32 floats of
// shared memory; every thread of the block must call this (it synchronizes twice; the first
// barrier lets it reuse `scratch` right after a previous call).
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  v = WarpSum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
  const int warps = static_cast<int>(blockDim.x >> 5);
  for (int w = 0; w < warps; ++w) total += scratch[w];  // the same order in every thread
  return total;
}

// The best of every thread's candidate by `better`, a total order, so the result does not
// depend on the merge tree. Thread 0 gets the block's best (the others their warp's).
// `shuffle_xor(pair, offset)` exchanges a pair across lanes; `partial` is one Pair per warp
// of shared memory. Every thread must call this (it synchronizes twice; the first barrier
// lets it reuse `partial` right after a previous call).
template <typename Pair, typename ShuffleXor, typename Better>
__device__ __forceinline__ Pair BlockBest(Pair best, Pair* partial, ShuffleXor shuffle_xor,
                                          Better better) {
  for (int offset = 16; offset > 0; offset >>= 1) best = better(best, shuffle_xor(best, offset));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = static_cast<int>(blockDim.x >> 5);
    for (int w = 1; w < warps; ++w) best = better(best, partial[w]);
  }
  return best;
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_ROW_KERNELS_CUH_
