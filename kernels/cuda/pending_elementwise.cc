// Placeholders for the ops whose kernels are not written yet: each fails with
// UNIMPLEMENTED, so the op harness and the model report the op by name.
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/matmul.h"

namespace coil::cuda {
namespace {
absl::Status Pending(const char* op) {
  return absl::UnimplementedError(std::string(op) + " has no CUDA kernel yet; use --device cpu");
}

class PendingMatmul final : public CublasLtMatmul {
 public:
  absl::Status Run(const CudaContext&, const Tensor&, const Tensor&, const Tensor&) override {
    return Pending("Matmul");
  }
};
}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtMatmul>> CublasLtMatmul::Create(const CudaContext&) {
  return std::unique_ptr<CublasLtMatmul>(new PendingMatmul());
}
absl::Status LaunchEmbedding(const CudaContext&, const Tensor&, const Tensor&, int64_t,
                             const Tensor&) {
  return Pending("Embedding");
}
absl::Status LaunchAddRmsNorm(const CudaContext&, const Tensor&, const Tensor&, float,
                              const Tensor&, const Tensor&) {
  return Pending("AddRmsNorm");
}
absl::Status LaunchGatedSumSquares(const CudaContext&, const Tensor&, const Tensor&, int64_t,
                                   const Tensor&, const Tensor&) {
  return Pending("GatedSumSquares");
}
absl::Status LaunchGatedNormApply(const CudaContext&, const Tensor&, const Tensor&,
                                  const Tensor&, int64_t, float, const Tensor&) {
  return Pending("GatedNormApply");
}
absl::Status LaunchArgmax(const CudaContext&, const Tensor&, const Tensor&, const Tensor&) {
  return Pending("Argmax");
}

}  // namespace coil::cuda
