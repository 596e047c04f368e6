#include "kernels/cuda/cuda_check.h"

#include "absl/strings/str_cat.h"

namespace coil::cuda {

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // No device or no driver is an environment condition, not a bug in the call.
  const absl::StatusCode code =
      (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver)
          ? absl::StatusCode::kUnavailable
          : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, " failed: ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ")"));
}

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code = status == CUBLAS_STATUS_NOT_SUPPORTED
                                    ? absl::StatusCode::kUnimplemented
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, " failed: cublas status ",
                                         static_cast<int>(status)));
}

absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(result)));
}

}  // namespace coil::cuda
