// Placeholders for the recurrent ops whose kernels are not written yet (see
// pending_elementwise.cc).
#include <string>

#include "kernels/cuda/cuda_ops.h"

namespace coil::cuda {

absl::Status LaunchCausalConv1d(const CudaContext&, const Tensor&, const Tensor&,
                                const Tensor&, const RecurrentBatch&, const Tensor&,
                                const Tensor&) {
  return absl::UnimplementedError("CausalConv1d has no CUDA kernel yet; use --device cpu");
}
absl::Status LaunchSsmScan(const CudaContext&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const SsmScanOptions&, const RecurrentBatch&, const Tensor&,
                           const Tensor&) {
  return absl::UnimplementedError("SsmScan has no CUDA kernel yet; use --device cpu");
}

}  // namespace coil::cuda
