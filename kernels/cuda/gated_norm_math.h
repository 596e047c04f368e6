// The gated grouped RMSNorm's per-thread formulas as plain __host__ __device__ C++: the CUDA
// gated-norm kernels (gated_rms_norm.cu) and the fused mixer decode (mixer_decode_block.h)
// call the same ones, which is what gives the fused op the bits of GatedRmsNorm, and the host
// emulation calls them too. The block-wide sum stays with the callers (BlockSum).
#ifndef COIL_KERNELS_CUDA_GATED_NORM_MATH_H_
#define COIL_KERNELS_CUDA_GATED_NORM_MATH_H_

#include <math.h>

#include <cstdint>

#include "kernels/cuda/ssd_chunks.h"  // COIL_HOST_DEVICE

namespace coil::cuda {

// silu(z) = z / (1 + exp(-z)), as the CPU's SiluF; expf is the full-precision exp.
COIL_HOST_DEVICE inline float GatedSilu(float z) { return z / (1.0f + expf(-z)); }

// Thread `tid` of `threads`' share of sum((y * silu(z))^2) over columns [begin, begin + width)
// of one row: columns begin + tid, begin + tid + threads, ... in that order. load_y(i) reads
// y[i]; each gated value is also written to gated[i] unless gated is null.
template <typename LoadY>
COIL_HOST_DEVICE inline float GatedPartialSumSquares(LoadY load_y, const float* zr, float* gated,
                                                     int64_t begin, int64_t width, int tid,
                                                     int threads) {
  float sum = 0.0f;
  for (int64_t i = begin + tid; i < begin + width; i += threads) {
    const float v = load_y(i) * GatedSilu(zr[i]);
    if (gated != nullptr) gated[i] = v;
    sum += v * v;
  }
  return sum;
}

// The scale of a group whose squares sum to `sum` over `group_size` columns.
COIL_HOST_DEVICE inline float GatedNormScale(float sum, float group_size, float eps) {
  return 1.0f / sqrtf(sum / group_size + eps);
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_GATED_NORM_MATH_H_
