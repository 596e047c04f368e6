// Whether the kernels this build runs on the current GPU carry PdlWait (pdl.cuh): it is
// compiled in only for PTX of compute_90 and newer, and a GPU runs the image closest to it
// (its own SASS, or PTX of an older architecture JIT-compiled at load). A probe kernel in a
// translation unit built like every other answers for them all.
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace coil::cuda {
namespace {

__global__ void PdlProbeKernel() {}

}  // namespace

absl::StatusOr<bool> KernelsCarryPdlWait() {
  cudaFuncAttributes attributes{};
  COIL_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, PdlProbeKernel));
  return attributes.ptxVersion >= 90;
}

}  // namespace coil::cuda
