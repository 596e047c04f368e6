#include "kernels/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"

namespace coil {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind,
                                                       const BackendOptions& options) {
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
    case BackendKind::kCuda:
#if COIL_WITH_CUDA
      // The CUDA backend registers here once kernels/cuda implements the ops.
#endif
      return absl::UnimplementedError(
          "the cuda backend is not implemented yet; use the cpu backend");
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

}  // namespace coil
