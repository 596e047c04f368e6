// What the CUDA side of this process can see: the GPUs, the driver, and the versions of
// the cuBLASLt and NCCL libraries it loaded. coil-serve logs it at start-up, and the GPU
// tests use it to skip with a clear message where no GPU is visible.
#ifndef COIL_KERNELS_CUDA_RUNTIME_INFO_H_
#define COIL_KERNELS_CUDA_RUNTIME_INFO_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coil::cuda {

struct RuntimeInfo {
  int device_count = 0;          // 0 when there is no GPU or no driver
  std::string no_device_reason;  // why device_count is 0, for skip messages
  int runtime_version = 0;       // cudaRuntimeGetVersion, e.g. 13000
  size_t cublaslt_version = 0;   // cublasLtGetVersion, e.g. 130100
  int nccl_version = 0;          // ncclGetVersion, e.g. 22800
};

RuntimeInfo QueryRuntimeInfo();

// Free and total bytes of GPU `device`'s memory (cudaMemGetInfo on that device); the
// caller's current device is left as it was.
struct DeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device);

// Fills `count` floats at `device_data` with `value` on the default stream and waits.
// The op tests poison outputs with NaN before each run so that an element a kernel never
// writes is caught.
absl::Status FillDevice(float* device_data, size_t count, float value);

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_RUNTIME_INFO_H_
