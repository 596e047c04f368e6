// Gumbel-max sampling per row on the GPU: one block of kGumbelThreads per row. Each thread
// scores its strided columns (gumbel_score.h: the host sampler's double-precision formula
// and kernels/philox.h's draws, which use no libm, so the bits match the CPU), scans them
// left to right, and the block merges the per-thread candidates by BetterOf, a total order,
// so the result does not depend on the merge tree.
#include <cmath>
#include <cstdint>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_kernels.cuh"
#include "kernels/gumbel_score.h"

namespace coil::cuda {
namespace {

using gumbel::ScorePair;

// Each column costs a Philox call and two double-precision logs: 512 threads leave the
// compiler 128 registers per thread for them.
constexpr int kGumbelThreads = 512;
constexpr int kGumbelWarps = kGumbelThreads / 32;

__global__ void __launch_bounds__(kGumbelThreads)
    GumbelArgmaxKernel(const float* __restrict__ logits, int64_t logits_stride, int64_t rows,
                       int64_t vocab, const float* __restrict__ temperatures,
                       const int32_t* __restrict__ seeds, int64_t seeds_stride,
                       const int32_t* __restrict__ steps, int64_t vocab_offset,
                       int32_t* __restrict__ ids, int32_t* __restrict__ scores,
                       int64_t scores_stride) {
  __shared__ ScorePair partial[kGumbelWarps];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* v = logits + t * logits_stride;
    const float temperature = temperatures[t];
    const uint64_t seed = gumbel::SeedOf(seeds[t * seeds_stride], seeds[t * seeds_stride + 1]);
    const uint32_t step = static_cast<uint32_t>(steps[t]);
    ScorePair best{-INFINITY, -1};
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      gumbel::ScanStep(best,
                       gumbel::Score(v[j], temperature, seed, step,
                                     static_cast<uint32_t>(vocab_offset + j)),
                       static_cast<int32_t>(j));
    }
    best = BlockBest(
        best, partial,
        [](ScorePair p, int offset) {
          return ScorePair{__shfl_xor_sync(0xffffffffu, p.score, offset),
                           __shfl_xor_sync(0xffffffffu, p.index, offset)};
        },
        [](ScorePair a, ScorePair b) { return gumbel::BetterOf(a, b); });
    if (threadIdx.x == 0) {
      ids[t] = best.index < 0 ? 0 : best.index;
      const long long bits = __double_as_longlong(best.score);
      scores[t * scores_stride] = static_cast<int32_t>(static_cast<uint32_t>(bits));
      scores[t * scores_stride + 1] =
          static_cast<int32_t>(static_cast<uint32_t>(static_cast<unsigned long long>(bits) >> 32));
    }
  }
}

}  // namespace

absl::Status LaunchGumbelArgmax(const CudaContext& ctx, const Tensor& logits,
                                const Tensor& temperatures, const Tensor& seeds,
                                const Tensor& steps, int64_t vocab_offset, const Tensor& ids,
                                const Tensor& scores) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return absl::OkStatus();
  // Rank-1 tensors passed the shared checks with unit stride; ids and scores are indexed so.
  GumbelArgmaxKernel<<<RowGrid(rows), kGumbelThreads, 0, ctx.stream>>>(
      logits.data<float>(), logits.stride(0), rows, vocab, temperatures.data<float>(),
      seeds.data<int32_t>(), seeds.stride(0), steps.data<int32_t>(), vocab_offset,
      ids.data<int32_t>(), scores.data<int32_t>(), scores.stride(0));
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
