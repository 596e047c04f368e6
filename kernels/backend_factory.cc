#include "kernels/backend_factory.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#if COIL_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace coil {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind,
                                                       const BackendOptions& options) {
  COIL_RETURN_IF_ERROR(CheckCudaMatmulRows(options.cuda_matmul_rows));
  switch (kind) {
    case BackendKind::kCpu: {
      if (options.threads < 1 || options.threads > 256) {
        return absl::InvalidArgumentError(
            absl::StrCat("threads is ", options.threads, "; use 1..256"));
      }
      auto backend = std::make_unique<CpuBackend>(options.threads);
      backend->set_use_ref(options.use_reference);
      return std::unique_ptr<Backend>(std::move(backend));
    }
    case BackendKind::kCuda: {
#if COIL_WITH_CUDA
      auto backend = cuda::CudaBackend::Create(options.device_index, options.cuda_matmul_rows);
      if (!backend.ok()) return backend.status();
      if (options.cuda_pdl && !(*backend)->set_pdl(true)) {
        std::fprintf(stderr,
                     "coil: programmatic dependent launch is off: it needs an sm_90 or newer GPU "
                     "and kernels built for compute_90 or newer (CMAKE_CUDA_ARCHITECTURES)\n");
      }
      return std::unique_ptr<Backend>(std::move(*backend));
#else
      return absl::UnimplementedError(
          "this build has no CUDA backend (configured without nvcc or with COIL_CUDA=OFF); "
          "rebuild with the CUDA toolkit and -DCOIL_CUDA=ON, or use --device cpu");
#endif
    }
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view text) {
  if (text == "cpu") return BackendKind::kCpu;
  if (text == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device \"", text, "\"; use cpu or cuda"));
}

}  // namespace coil
