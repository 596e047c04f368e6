// CublasLtMatmul: y = x W^T through cuBLASLt with fp32 accumulation. bf16 weights take the
// activations rounded to bf16 (as the CPU's bf16 kernel does); f16 weights take them split
// into an f16 high part and an f16 remainder (two products, so x keeps about 22 bits, as
// close to the CPU's f32 x as f16 inputs allow); f32 weights run in f32 (no TF32).
// Row invariance (docs/ARCHITECTURE.md §6): the algorithm is chosen once per (N, K, dtype, leading
// dimensions, alignments), never per M, with split-K off, so element (m, n) is one dot
// product in one order whatever M is. The cuBLASLt workspace is allocated once, at
// creation; the 16-bit copy of x grows only outside CUDA graph capture (Reserve), and a
// grown-out copy stays allocated until destruction, since a captured graph may read it.
#ifndef COIL_KERNELS_CUDA_MATMUL_H_
#define COIL_KERNELS_CUDA_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend_options.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/tensor.h"

namespace coil::cuda {

class CublasLtMatmul {
 public:
  // The cuBLASLt workspace, allocated once here and never reallocated (graph capture
  // records its address).
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // heuristic_rows: the M each shape's algorithm is chosen for (1..kMaxCudaMatmulRows;
  // INVALID_ARGUMENT otherwise). Small values favour decode (more blocks over N at small
  // M), large ones prefill; every M runs the chosen algorithm either way.
  static absl::StatusOr<std::unique_ptr<CublasLtMatmul>> Create(
      const CudaContext& ctx, int64_t heuristic_rows = kDefaultCudaMatmulRows);
  virtual ~CublasLtMatmul() = default;
  // x: f32 [M, K] (rows may be strided); w: f32/bf16/f16 [N, K]; y: f32 [M, N] (rows may be
  // strided). Checked by the Backend base class. Fails with FAILED_PRECONDITION when a
  // 16-bit weight needs a larger x copy while ctx.stream is capturing a graph.
  virtual absl::Status Run(const CudaContext& ctx, const Tensor& x, const Tensor& w,
                           const Tensor& y) = 0;
  // Sizes the 16-bit copy of x for any matmul of up to `max_rows` rows of up to `max_k`
  // columns, so that later calls never allocate. Call it before capturing a CUDA graph.
  virtual absl::Status Reserve(const CudaContext& ctx, int64_t max_rows, int64_t max_k) = 0;
  // One line per shape pinned so far: its key and the algorithm's configuration (algorithm,
  // tile, stages, cluster shape and swizzle: cuBLASLt's ids, as numbered in cublasLt.h).
  virtual std::vector<std::string> DescribePlans() const = 0;

 protected:
  CublasLtMatmul() = default;
};

// ---- internals shared by matmul.cc and matmul_convert.cu

// The leading dimension (in elements) of the 16-bit copy of x: K rounded up to 128, so
// every row, and the remainder plane of the f16 split, starts 256-byte aligned.
inline int64_t HalfRowsLd(int64_t k) { return (k + 127) / 128 * 128; }

// Converts the M rows of f32 `x` to `to` (kBF16 or kF16), round to nearest even, into `hi`
// with leading dimension `ld` (bf16 `x`, with `to` kBF16, is copied as it is). For kF16, `lo` (not null) receives f16(x - float(hi)), the
// part of x that f16 lost; for kBF16 `lo` must be null.
absl::Status LaunchRowsToHalf(const CudaContext& ctx, const Tensor& x, DType to, void* hi, void* lo,
                              int64_t ld);

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_MATMUL_H_
