// Shared by the two halves of the CUDA SSM scan (ssm_scan.cu: dispatch and the one-token
// decode kernel; ssd_scan.cu: the chunked SSD path): the kernel parameters, the dt and
// warp helpers, and the chunked path's launcher. Both halves compute exactly the op of
// Backend::SsmScan; the sequences each takes are disjoint (runs of one token vs longer).
#ifndef COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_
#define COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_ops.h"

namespace coil::cuda {

// Plain pointers and row strides (in floats) of the op's tensors, and the batch's device
// mirrors. Sizes are int32 (checked by the launcher); element offsets are computed in int64.
struct SsmScanParams {
  const float* x;  // [rows, heads * headdim]
  const float* dt;  // [rows, heads]
  const float* a_log;  // [heads]
  const float* b;  // [rows, groups * d_state]
  const float* c;  // [rows, groups * d_state]
  const float* d;  // [heads]
  const float* dt_bias;  // [heads]
  float* state;  // [state_rows + 1, heads, headdim, d_state], contiguous
  float* y;  // [rows, heads * headdim]
  int64_t x_stride, dt_stride, b_stride, c_stride, y_stride;
  const int32_t* cu_seqlens;  // [num_seqs + 1]
  const int32_t* slots;  // [num_seqs]
  const uint8_t* fresh;  // [num_seqs]
  const int32_t* start_positions;  // [num_seqs]
  int32_t num_seqs, rows, heads, headdim, d_state, groups;
  // Local head h reads group (first_head + h) / heads_per_group (SsmScanOptions).
  int32_t heads_per_group, first_head;
  int32_t state_rows;  // the scratch row's index: never read, never written
  float dt_min, dt_max;
};

#if defined(__CUDACC__)
// dt' = clamp(softplus(dt + bias), dt_min, dt_max), softplus in double as the CPU
// reference computes it (one value per token and head: the cost is nil).
__device__ inline float SoftplusDt(float dt, float bias, float dt_min, float dt_max) {
  const double v = static_cast<double>(dt) + bias;
  const double sp = v > 20.0 ? v : log1p(exp(v));
  return fminf(fmaxf(static_cast<float>(sp), dt_min), dt_max);
}

__device__ inline int32_t GroupOfHead(const SsmScanParams& p, int32_t head) {
  return (p.first_head + head) / p.heads_per_group;
}

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

// The chunked SSD path for every run of two or more tokens (ssd_scan.cu).
absl::Status LaunchSsdChunked(const CudaContext& ctx, const SsmScanParams& params,
                              const RecurrentBatch& batch, int64_t chunk_size);

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSM_SCAN_KERNELS_CUH_
