// Shared by the two halves of the CUDA SSM scan (ssm_scan.cu: dispatch and the one-token
// decode kernel; ssd_scan.cu: the chunked SSD path): the warp helpers and the chunked
// path's launcher (parameters and formulas: ssm_scan_math.h). The two halves take disjoint
// sequences (runs of one token vs longer), so together they compute Backend::SsmScan.
#ifndef COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_
#define COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_kernels.cuh"  // WarpSum
#include "kernels/cuda/ssm_scan_math.h"

namespace coil::cuda {

#if defined(__CUDACC__)
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

// Calls launch(kVec, kSteps) (as std::integral_constant values) with the decode update's
// lane shape for this state: 4-wide loads when d_state and the state allow (16 bytes of an
// f32 state, 8 of a bf16 one), and the fewest loads per lane that cover d_state in one span
// (at most 4; larger d_state loops over spans).
template <typename Launch>
absl::Status DispatchDecodeLanes(const SsmScanParams& p, Launch launch) {
  using std::integral_constant;
  const uintptr_t vec_bytes = p.state_bf16 ? 8 : 16;
  const bool vec4 = p.d_state % 4 == 0 && reinterpret_cast<uintptr_t>(p.state) % vec_bytes == 0;
  const int32_t per_lane = (p.d_state + 31) / 32;
  if (vec4) {
    const int32_t steps = (per_lane + 3) / 4;
    if (steps <= 1) return launch(integral_constant<int, 4>{}, integral_constant<int, 1>{});
    if (steps <= 2) return launch(integral_constant<int, 4>{}, integral_constant<int, 2>{});
    return launch(integral_constant<int, 4>{}, integral_constant<int, 4>{});
  }
  if (per_lane <= 1) return launch(integral_constant<int, 1>{}, integral_constant<int, 1>{});
  if (per_lane <= 2) return launch(integral_constant<int, 1>{}, integral_constant<int, 2>{});
  return launch(integral_constant<int, 1>{}, integral_constant<int, 4>{});
}

// The largest d_state the decode update takes: its B and C rows (2 d_state floats, 32 KiB
// here) stay in shared memory under the 48 KiB a launch may take without
// cudaFuncSetAttribute.
inline constexpr int32_t kMaxDecodeDState = 4096;

// The chunked SSD path for every run of two or more tokens (ssd_scan.cu); bf16_products
// takes tensor-core products on sm_80 and newer (SsmScanOptions::bf16_products).
absl::Status LaunchSsdChunked(const CudaContext& ctx, const SsmScanParams& params,
                              const RecurrentBatch& batch, int64_t chunk_size,
                              bool bf16_products);

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_
