// Error handling for CUDA, cuBLASLt and NCCL calls: every call's result becomes an
// absl::Status naming the call and the library's own error text, so no launch or API
// error goes unnoticed (issue: "every launch checked").
#ifndef COIL_KERNELS_CUDA_CUDA_CHECK_H_
#define COIL_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace coil::cuda {

absl::Status CudaStatus(cudaError_t error, const char* what);
absl::Status CublasStatus(cublasStatus_t status, const char* what);
absl::Status NcclStatus(ncclResult_t result, const char* what);

}  // namespace coil::cuda

#define COIL_CUDA_RETURN_IF_ERROR(call) \
  COIL_RETURN_IF_ERROR(::coil::cuda::CudaStatus((call), #call))
#define COIL_CUBLAS_RETURN_IF_ERROR(call) \
  COIL_RETURN_IF_ERROR(::coil::cuda::CublasStatus((call), #call))
#define COIL_NCCL_RETURN_IF_ERROR(call) \
  COIL_RETURN_IF_ERROR(::coil::cuda::NcclStatus((call), #call))

#endif  // COIL_KERNELS_CUDA_CUDA_CHECK_H_
