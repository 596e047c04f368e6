#include "kernels/cuda/runtime_info.h"

#include "kernels/cuda/cuda_check.h"

namespace coil::cuda {

RuntimeInfo QueryRuntimeInfo() {
  RuntimeInfo info;
  cudaRuntimeGetVersion(&info.runtime_version);
  info.cublaslt_version = cublasLtGetVersion();
  ncclGetVersion(&info.nccl_version);
  const cudaError_t error = cudaGetDeviceCount(&info.device_count);
  if (error != cudaSuccess) {
    info.device_count = 0;
    info.no_device_reason = CudaStatus(error, "cudaGetDeviceCount").ToString();
    cudaGetLastError();  // clear the sticky error so later calls report their own
  } else if (info.device_count == 0) {
    info.no_device_reason = "no CUDA device is visible";
  }
  return info;
}

}  // namespace coil::cuda
