// The device flags of every program that creates a backend (coil-serve, coil-run,
// model_bench, op_bench), defined once: --device, --threads, --cuda-pdl, --cuda-matmul-rows.
// A program links coil_backend_flags and reads them with BackendFlagsFromCommandLine().
#ifndef COIL_WORKERS_BACKEND_FLAGS_H_
#define COIL_WORKERS_BACKEND_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"

ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(bool, cuda_pdl);
ABSL_DECLARE_FLAG(int64_t, cuda_matmul_rows);

namespace coil {

struct BackendFlags {
  BackendKind device = BackendKind::kCpu;
  // threads as given (0: RankRuntime::OpenDevice divides the allowed CPUs among the ranks).
  BackendOptions options;
};

// The parsed flags; INVALID_ARGUMENT naming the flag and what to give when one is wrong.
absl::StatusOr<BackendFlags> BackendFlagsFromCommandLine();

}  // namespace coil

#endif  // COIL_WORKERS_BACKEND_FLAGS_H_
