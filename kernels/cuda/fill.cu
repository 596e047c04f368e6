// A grid-stride fill: the smallest useful kernel, used to poison device outputs in tests.
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/runtime_info.h"

namespace coil::cuda {
namespace {

__global__ void FillKernel(float* data, size_t count, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
}

}  // namespace

absl::Status FillDevice(float* device_data, size_t count, float value) {
  if (count == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const size_t wanted = (count + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 4096 ? wanted : 4096);
  FillKernel<<<blocks, kThreads>>>(device_data, count, value);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  COIL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

}  // namespace coil::cuda
