#include <algorithm>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "workers/comm/rank_order_sum.h"

namespace coil::comm {
namespace {

// Compiled with --fmad=false: each += is one rounded addition, as on the host.
__global__ void RankOrderSumKernel(const float* gathered, int ranks, size_t count, float* out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float sum = gathered[i];
    for (int r = 1; r < ranks; ++r) sum += gathered[static_cast<size_t>(r) * count + i];
    out[i] = sum;
  }
}

}  // namespace

absl::Status LaunchRankOrderSum(const float* gathered, int ranks, size_t count, float* out,
                                cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, 65535);
  RankOrderSumKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(gathered, ranks, count,
                                                                             out);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::comm
