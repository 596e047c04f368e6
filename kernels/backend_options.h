// BackendOptions: what a backend is created with (kernels/backend_factory.h's CreateBackend),
// and the range of its CUDA matmul rows. Its own header, so that a backend's code (the CUDA
// backend's included) reads its options without the factory, which sits above it.
#ifndef COIL_KERNELS_BACKEND_OPTIONS_H_
#define COIL_KERNELS_BACKEND_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace coil {

// The range of BackendOptions::cuda_matmul_rows (--cuda-matmul-rows).
inline constexpr int64_t kDefaultCudaMatmulRows = 64;
inline constexpr int64_t kMaxCudaMatmulRows = 65536;

// INVALID_ARGUMENT, saying what to pass, unless 1 <= rows <= kMaxCudaMatmulRows.
inline absl::Status CheckCudaMatmulRows(int64_t rows) {
  if (rows >= 1 && rows <= kMaxCudaMatmulRows) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the matmul heuristic rows (--cuda-matmul-rows) are ", rows, "; use 1..", kMaxCudaMatmulRows,
      ", the batch size cuBLASLt tunes each matmul shape's one algorithm for"));
}

struct BackendOptions {
  // CPU: worker threads, the calling thread included (--threads).
  int threads = 1;
  // CPU: run every op through the reference kernels (the token-by-token recurrence for
  // the scan, scalar loops elsewhere): the oracle the tests compare against.
  bool use_reference = false;
  // CUDA: the GPU to use, as numbered by CUDA_VISIBLE_DEVICES (a rank uses its local rank).
  int device_index = 0;
  // CUDA: launch the decode path's own kernels (AddRmsNorm, MixerDecode) with programmatic
  // dependent launch on sm_90 and newer, so each is scheduled while the kernel before it
  // finishes (--cuda-pdl). Off by default until measured.
  bool cuda_pdl = false;
  // CUDA: the batch size cuBLASLt's heuristic tunes each matmul shape's one algorithm for
  // (--cuda-matmul-rows). Every M runs that algorithm, so rows stay batch-invariant whatever
  // the value: small values give decode more blocks over N, large ones suit long prefills.
  // Checked whatever the device: a bad value is refused, not ignored.
  int64_t cuda_matmul_rows = kDefaultCudaMatmulRows;
};

}  // namespace coil

#endif  // COIL_KERNELS_BACKEND_OPTIONS_H_
