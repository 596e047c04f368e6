// Bf16Gemm (kernels/cpu/bf16_gemm.h) in each form this CPU has (AMX, AVX-512 BF16):
//  - against sums of the exact products in double (bf16 values and their products are
//    exact there), within the rounding of fp32 sums: |error| <= 1e-6 * sum |a b| per element;
//  - accumulating onto C's values;
//  - each element's bits the same whatever block of rows or columns it is computed in.
// Skipped where the CPU has neither form.
#include "kernels/cpu/bf16_gemm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

struct Operands {
  int64_t m, n, k;
  std::vector<uint16_t> a;  // [m][k]
  std::vector<uint32_t> b;  // [k / 2][n] pairs
  std::vector<float> c0;    // initial C [m][n]

  float A(int64_t i, int64_t kk) const { return Bf16ToFloat(a[i * k + kk]); }
  float B(int64_t kk, int64_t j) const {
    const uint32_t word = b[(kk / 2) * n + j];
    return Bf16ToFloat(static_cast<uint16_t>(kk % 2 == 0 ? word & 0xffffu : word >> 16));
  }
};

Operands Random(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Operands o{m, n, k, {}, {}, {}};
  for (int64_t i = 0; i < m * k; ++i) o.a.push_back(FloatToBf16(normal(rng)));
  for (int64_t i = 0; i < k / 2 * n; ++i) {
    o.b.push_back(FloatToBf16(normal(rng)) | static_cast<uint32_t>(FloatToBf16(normal(rng))) << 16);
  }
  for (int64_t i = 0; i < m * n; ++i) o.c0.push_back(normal(rng));
  return o;
}

std::vector<Bf16Products> Forms() {
  std::vector<Bf16Products> forms;
  if (CpuFeatures::Get().avx512_bf16) forms.push_back(Bf16Products::kAvx512);
  if (CpuFeatures::Get().amx_bf16) forms.push_back(Bf16Products::kAmx);
  return forms;
}

std::vector<float> Multiply(Bf16Products form, const Operands& o, bool accumulate) {
  std::vector<float> c = o.c0;
  Bf16GemmScope scope(form);
  Bf16Gemm(form, o.m, o.n, o.k, o.a.data(), o.k, o.b.data(), o.n, c.data(), o.n, accumulate);
  return c;
}

TEST(Bf16GemmTest, MatchesExactProductsWithinFp32Rounding) {
  if (Forms().empty()) GTEST_SKIP() << "this CPU has neither AMX nor AVX-512 BF16";
  for (Bf16Products form : Forms()) {
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {16, 16, 32}, {48, 80, 96}, {32, 64, 416}, {64, 144, 64}}) {
      const Operands o = Random(m, n, k, m * 7919 + n * 31 + k);
      for (bool accumulate : {false, true}) {
        const std::vector<float> c = Multiply(form, o, accumulate);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double exact = accumulate ? o.c0[i * n + j] : 0.0, magnitude = std::fabs(exact);
            for (int64_t kk = 0; kk < k; ++kk) {
              const double p = static_cast<double>(o.A(i, kk)) * o.B(kk, j);
              exact += p;
              magnitude += std::fabs(p);
            }
            ASSERT_LE(std::fabs(c[i * n + j] - exact), 1e-6 * magnitude + 1e-30)
                << "form " << static_cast<int>(form) << " shape " << m << "x" << n << "x" << k
                << " element " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(Bf16GemmTest, AnElementDoesNotDependOnItsBlock) {
  if (Forms().empty()) GTEST_SKIP() << "this CPU has neither AMX nor AVX-512 BF16";
  const Operands o = Random(48, 96, 128, 5);
  for (Bf16Products form : Forms()) {
    const std::vector<float> whole = Multiply(form, o, true);
    // Rows 16..31 alone, and columns 48..63 of every row alone.
    std::vector<float> rows(o.c0.begin() + 16 * o.n, o.c0.begin() + 32 * o.n);
    std::vector<float> cols(o.c0);
    {
      Bf16GemmScope scope(form);
      Bf16Gemm(form, 16, o.n, o.k, o.a.data() + 16 * o.k, o.k, o.b.data(), o.n, rows.data(), o.n,
               true);
      Bf16Gemm(form, o.m, 16, o.k, o.a.data(), o.k, o.b.data() + 48, o.n, cols.data() + 48, o.n,
               true);
    }
    EXPECT_EQ(std::memcmp(rows.data(), whole.data() + 16 * o.n, rows.size() * sizeof(float)), 0);
    for (int64_t i = 0; i < o.m; ++i) {
      EXPECT_EQ(
          std::memcmp(cols.data() + i * o.n + 48, whole.data() + i * o.n + 48, 16 * sizeof(float)),
          0)
          << "row " << i;
    }
  }
}

}  // namespace
}  // namespace coil
