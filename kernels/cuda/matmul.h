// CublasLtMatmul: y = x W^T through cuBLASLt with fp32 accumulation. bf16/f16 weights take
// the activations converted to the weight type (as the CPU's bf16 kernel does); f32
// weights run in f32. The algorithm is chosen once per (M, N, K, dtype, strides) by the
// cuBLASLt heuristic and cached; the workspace is owned here and never reallocated while
// a graph may be capturing (it is sized once, at creation).
#ifndef COIL_KERNELS_CUDA_MATMUL_H_
#define COIL_KERNELS_CUDA_MATMUL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/tensor.h"

namespace coil::cuda {

class CublasLtMatmul {
 public:
  static absl::StatusOr<std::unique_ptr<CublasLtMatmul>> Create(const CudaContext& ctx);
  virtual ~CublasLtMatmul() = default;
  // x: f32 [M, K] (rows may be strided); w: f32/bf16/f16 [N, K]; y: f32 [M, N] (rows may be
  // strided). Checked by the Backend base class.
  virtual absl::Status Run(const CudaContext& ctx, const Tensor& x, const Tensor& w,
                           const Tensor& y) = 0;

 protected:
  CublasLtMatmul() = default;
};

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_MATMUL_H_
