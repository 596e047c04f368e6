// Small dense products of bf16 matrices with fp32 sums, for the chunked scan's blocks
// (C B^T, the chunk states, the outputs), on AMX tiles or AVX-512 BF16 registers:
//   C[m, n] = (accumulate ? C[m, n] : 0) + sum over j ascending of
//             (A[m, 2j] B[2j, n] + A[m, 2j+1] B[2j+1, n]).
// A is bf16, row-major [M, K]; B is pair-interleaved: the 32-bit word j * ldb + n holds
// the bf16 pair (B[2j, n], B[2j+1, n]) (low half first), the layout both tdpbf16ps and
// vdpbf16ps read. M and N are multiples of 16 and K of 32: callers pad with zeros.
// Every element sums its pairs in that one order, so its value never depends on M, N or
// which other elements are computed with it.
#ifndef COIL_KERNELS_CPU_BF16_GEMM_H_
#define COIL_KERNELS_CPU_BF16_GEMM_H_

#include <cstdint>

namespace coil {

enum class Bf16Products {
  kNone,    // neither: callers keep their fp32 form
  kAvx512,  // vdpbf16ps (AVX-512 BF16)
  kAmx,     // tdpbf16ps (AMX)
};

// The form this CPU runs (CpuFeatures, as capped by COIL_MAX_CPU_ISA).
Bf16Products HostBf16Products();

// Holds the AMX tile configuration on this thread while alive (a no-op for other forms);
// Bf16Gemm with kAmx runs only inside one.
class Bf16GemmScope {
 public:
  explicit Bf16GemmScope(Bf16Products form);
  ~Bf16GemmScope();
  Bf16GemmScope(const Bf16GemmScope&) = delete;
  Bf16GemmScope& operator=(const Bf16GemmScope&) = delete;

 private:
  const bool amx_;
};

// lda, ldb and ldc count elements (bf16, 32-bit words and floats); form is not kNone.
void Bf16Gemm(Bf16Products form, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
              const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

}  // namespace coil

#endif  // COIL_KERNELS_CPU_BF16_GEMM_H_
