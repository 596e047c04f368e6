// Programmatic dependent launch (PDL, sm_90 and newer): a kernel launched with it may be
// scheduled before the kernel ahead of it on the stream has finished (as soon as that one
// signals, or exits), and waits inside (PdlWait) until it has finished and its writes are
// visible. What it hides is launch latency between two dependent kernels: on a decode step
// of small kernels that is a large part of the time. Only kernels that call PdlWait before touching memory may be
// launched with LaunchMaybePdl; both device calls are no-ops without a programmatic
// dependency and below sm_90, so those kernels may be launched either way.
#ifndef COIL_KERNELS_CUDA_PDL_CUH_
#define COIL_KERNELS_CUDA_PDL_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_ops.h"

namespace coil::cuda {

// Waits until the preceding kernel has completed and its memory is visible. Call first,
// before reading or writing anything a preceding kernel may touch.
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel, if launched with PDL, be scheduled now (it still waits in PdlWait
// for this one to finish).
__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Launches `kernel` on ctx's stream, with programmatic stream serialization when ctx.pdl.
template <typename... Params, typename... Args>
cudaError_t LaunchMaybePdl(const CudaContext& ctx, void (*kernel)(Params...), dim3 grid,
                           dim3 block, size_t shared_bytes, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = ctx.stream;
  config.attrs = &attribute;
  config.numAttrs = ctx.pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_PDL_CUH_
