// Batch invariance of the stateless ops (DESIGN §6): a row's result is the same bits
// whether it is computed alone on one thread or inside a batch of 2..200 rows on two
// threads. The invariant is checked directly: each batched row against its solo run.
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil {
namespace {

std::unique_ptr<Backend> Cpu(int threads) {
  auto b = CreateBackend(BackendKind::kCpu, {.threads = threads});
  EXPECT_TRUE(b.ok());
  return std::move(*b);
}

Tensor F(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}

bool SameRow(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Runs `op(backend, rows, in, out)` on all rows (2 threads) and on each row alone
// (1 thread); every row must agree bit for bit.
template <typename Op>
void ExpectRowsInvariant(int64_t in_width, int64_t out_width, Op op) {
  for (int64_t rows : {2, 7, 37, 200}) {
    std::mt19937_64 rng(rows);
    std::vector<float> in = testing::RandomFloats(rng, rows * in_width, -3.0f, 3.0f);
    std::vector<float> out(rows * out_width);
    auto batched = Cpu(2), solo = Cpu(1);
    op(*batched, rows, in.data(), out.data());
    for (int64_t r = 0; r < rows; r += 3) {
      std::vector<float> row_in(in.begin() + r * in_width, in.begin() + (r + 1) * in_width);
      std::vector<float> row_out(out_width);
      op(*solo, 1, row_in.data(), row_out.data());
      ASSERT_TRUE(SameRow(out.data() + r * out_width, row_out.data(), out_width))
          << "row " << r << " of " << rows;
    }
  }
}

TEST(BatchInvarianceTest, Matmul) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t n = 203, k = 190;  // tails in both tile dimensions and in k
    std::mt19937_64 rng(1);
    std::vector<uint8_t> w = testing::Encode(testing::RandomFloats(rng, n * k), dtype);
    ExpectRowsInvariant(k, n, [&](Backend& b, int64_t rows, float* in, float* out) {
      ASSERT_TRUE(b.Matmul(Tensor(in, DType::kF32, {rows, k}), Tensor(w.data(), dtype, {n, k}),
                           Tensor(out, DType::kF32, {rows, n}))
                      .ok());
    });
  }
}

TEST(BatchInvarianceTest, AddRmsNorm) {
  const int64_t d = 77;
  std::vector<float> w(d, 1.25f);
  ExpectRowsInvariant(2 * d, d, [&](Backend& b, int64_t rows, float* in, float* out) {
    // Input row = [x | residual]; the op writes the residual in place, so work on a copy.
    std::vector<float> x(rows * d), r(rows * d);
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(&x[i * d], in + i * 2 * d, d * 4);
      std::memcpy(&r[i * d], in + i * 2 * d + d, d * 4);
    }
    ASSERT_TRUE(b.AddRmsNorm(F(x, {rows, d}), F(w, {d}), 1e-5f, F(r, {rows, d}),
                             Tensor(out, DType::kF32, {rows, d}))
                    .ok());
  });
}

TEST(BatchInvarianceTest, GatedNorm) {
  const int64_t e = 96, groups = 2;
  std::vector<float> w(e, 0.75f);
  ExpectRowsInvariant(2 * e, e, [&](Backend& b, int64_t rows, float* in, float* out) {
    const Tensor packed(in, DType::kF32, {rows, 2 * e});
    std::vector<float> sumsq(rows * groups);
    ASSERT_TRUE(b.GatedSumSquares(packed.Columns(0, e), packed.Columns(e, e), groups,
                                  Tensor(out, DType::kF32, {rows, e}), F(sumsq, {rows, groups}))
                    .ok());
    ASSERT_TRUE(b.GatedNormApply(Tensor(out, DType::kF32, {rows, e}), F(sumsq, {rows, groups}),
                                 F(w, {e}), e / groups, 1e-5f, Tensor(out, DType::kF32, {rows, e}))
                    .ok());
  });
}

TEST(BatchInvarianceTest, ArgmaxAndEmbedding) {
  const int64_t vocab = 300, d = 24;
  std::mt19937_64 rng(2);
  std::vector<float> table = testing::RandomFloats(rng, vocab * d);
  ExpectRowsInvariant(vocab, 2 + d, [&](Backend& b, int64_t rows, float* in, float* out) {
    std::vector<int32_t> ids(rows);
    std::vector<float> values(rows), emb(rows * d);
    ASSERT_TRUE(b.Argmax(Tensor(in, DType::kF32, {rows, vocab}),
                         Tensor(ids.data(), DType::kI32, {rows}), F(values, {rows}))
                    .ok());
    ASSERT_TRUE(b.Embedding(Tensor(ids.data(), DType::kI32, {rows}), F(table, {vocab, d}), 0,
                            F(emb, {rows, d}))
                    .ok());
    for (int64_t i = 0; i < rows; ++i) {
      out[i * (2 + d)] = static_cast<float>(ids[i]);
      out[i * (2 + d) + 1] = values[i];
      std::memcpy(out + i * (2 + d) + 2, &emb[i * d], d * 4);
    }
  });
}

}  // namespace
}  // namespace coil
