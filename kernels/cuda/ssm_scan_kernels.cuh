// Shared by the two halves of the CUDA SSM scan (ssm_scan.cu: dispatch and the one-token
// decode kernel; ssd_scan.cu: the chunked SSD path): the warp helpers and the chunked
// path's launcher (parameters and formulas: ssm_scan_math.h). The two halves take disjoint
// sequences (runs of one token vs longer), so together they compute Backend::SsmScan.
#ifndef COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_
#define COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ssm_scan_math.h"

namespace coil::cuda {

#if defined(__CUDACC__)
__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ inline T WarpInclusiveSum(T v) {
  const int lane = threadIdx.x & 31;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}
#endif  // __CUDACC__

// The chunked SSD path for every run of two or more tokens (ssd_scan.cu); bf16_products
// takes tensor-core products on sm_80 and newer (SsmScanOptions::bf16_products).
absl::Status LaunchSsdChunked(const CudaContext& ctx, const SsmScanParams& params,
                              const RecurrentBatch& batch, int64_t chunk_size,
                              bool bf16_products);

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_
