#include "kernels/cuda/runtime_info.h"

#include "common/status_macros.h"
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

absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device) {
  int previous = 0;
  COIL_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous));
  COIL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  DeviceMemory memory;
  const cudaError_t error = cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes);
  cudaSetDevice(previous);
  COIL_CUDA_RETURN_IF_ERROR(error);
  return memory;
}

}  // namespace coil::cuda
