#include "workers/backend_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/backend_factory.h"

ABSL_FLAG(std::string, device, "cpu",
          "cpu or cuda (cuda needs a build with COIL_CUDA; rank r uses its node's GPU r, and "
          "several ranks' collectives go through NCCL)");
ABSL_FLAG(int32_t, threads, 0, "CPU threads per rank (0: the allowed cores divided among the ranks)");
ABSL_FLAG(bool, cuda_pdl, false,
          "with --device cuda on sm_90+: launch the decode path's own kernels with programmatic "
          "dependent launch (each scheduled while the previous one finishes)");
ABSL_FLAG(int64_t, cuda_matmul_rows, coil::kDefaultCudaMatmulRows,
          "with --device cuda: the batch size cuBLASLt tunes each matmul shape's one algorithm "
          "for (1..65536; every batch size runs it, so outputs do not depend on the batch): "
          "small values favour decode latency, large ones long prefills");

namespace coil {

absl::StatusOr<BackendFlags> BackendFlagsFromCommandLine() {
  BackendFlags flags;
  absl::StatusOr<BackendKind> device = ParseBackendKind(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message()));
  }
  flags.device = *device;
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads is ", threads, "; give a count, or 0 to use the allowed cores"));
  }
  flags.options.threads = threads;
  flags.options.cuda_pdl = absl::GetFlag(FLAGS_cuda_pdl);
  flags.options.cuda_matmul_rows = absl::GetFlag(FLAGS_cuda_matmul_rows);
  COIL_RETURN_IF_ERROR(CheckCudaMatmulRows(flags.options.cuda_matmul_rows));
  return flags;
}

}  // namespace coil
