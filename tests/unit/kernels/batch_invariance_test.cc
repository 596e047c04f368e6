// Batch invariance of the stateless ops (docs/ARCHITECTURE.md §6): a row's result is the same bits
// whether it is computed alone or inside a batch of 2..300 rows. The invariant is checked
// directly, each batched row against its solo run, on every backend of the build: the CPU
// (batched on two threads, solo on one) and, where a GPU is visible, CUDA (whose matmul
// pins one cuBLASLt algorithm per shape so that M never changes a row's reduction order).
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil {
namespace {

struct Target {
  std::string name;
  BackendKind kind;
  int batched_threads, solo_threads;
  int64_t cuda_matmul_rows = 64;  // the M each cuBLASLt algorithm is pinned for
};

std::vector<Target> Targets() {
  std::vector<Target> t = {{"cpu", BackendKind::kCpu, 2, 1}};
#if COIL_WITH_CUDA
  t.push_back({"cuda", BackendKind::kCuda, 1, 1});
  // Pinned for single rows and for long prefills: other algorithms, still one for every M.
  t.push_back({"cuda_matmul_rows1", BackendKind::kCuda, 1, 1, 1});
  t.push_back({"cuda_matmul_rows4096", BackendKind::kCuda, 1, 1, 4096});
#endif
  return t;
}

// An array in a backend's memory, filled from and read back to the host.
class Mem {
 public:
  Mem(Backend& backend, const void* host, size_t bytes) : backend_(&backend), bytes_(bytes) {
    auto buffer = backend.Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return;
    buffer_ = std::move(*buffer);
    const absl::Status s = backend.CopyFromHost(buffer_.data(), host, bytes);
    EXPECT_TRUE(s.ok()) << s;
  }
  template <typename T>
  explicit Mem(Backend& backend, const std::vector<T>& host)
      : Mem(backend, host.data(), host.size() * sizeof(T)) {}

  void* data() const { return buffer_.data(); }
  Tensor F32(std::initializer_list<int64_t> shape) const {
    return Tensor(data(), DType::kF32, shape, backend_->device());
  }
  template <typename T>
  std::vector<T> Read() const {
    std::vector<T> host(bytes_ / sizeof(T));
    const absl::Status s = backend_->CopyToHost(host.data(), data(), bytes_);
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

 private:
  Backend* backend_;
  size_t bytes_;
  Buffer buffer_;
};

class BatchInvarianceTest : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    const Target& t = GetParam();
    auto batched =
        CreateBackend(t.kind, {.threads = t.batched_threads, .cuda_matmul_rows = t.cuda_matmul_rows});
    // A build without CUDA (UNIMPLEMENTED) or a machine without a GPU (UNAVAILABLE) skips.
    if (absl::IsUnimplemented(batched.status()) || absl::IsUnavailable(batched.status())) {
      GTEST_SKIP() << batched.status();
    }
    ASSERT_TRUE(batched.ok()) << batched.status();
    auto solo =
        CreateBackend(t.kind, {.threads = t.solo_threads, .cuda_matmul_rows = t.cuda_matmul_rows});
    ASSERT_TRUE(solo.ok()) << solo.status();
    batched_ = std::move(*batched);
    solo_ = std::move(*solo);
  }

  // Runs `op(backend, rows, in)` -> out rows on all rows (the batched backend) and on
  // every third row alone (the solo backend); every row must agree bit for bit.
  template <typename Op>
  void ExpectRowsInvariant(int64_t in_width, int64_t out_width, Op op) {
    for (int64_t rows : {2, 7, 37, 200, 300}) {
      std::mt19937_64 rng(rows);
      const std::vector<float> in = testing::RandomFloats(rng, rows * in_width, -3.0f, 3.0f);
      const std::vector<float> out = op(*batched_, rows, in);
      ASSERT_EQ(out.size(), static_cast<size_t>(rows * out_width));
      for (int64_t r = 0; r < rows; r += 3) {
        const std::vector<float> row_in(in.begin() + r * in_width, in.begin() + (r + 1) * in_width);
        const std::vector<float> row_out = op(*solo_, 1, row_in);
        ASSERT_EQ(row_out.size(), static_cast<size_t>(out_width));
        ASSERT_EQ(std::memcmp(out.data() + r * out_width, row_out.data(), out_width * 4), 0)
            << "row " << r << " of " << rows;
      }
    }
  }

  std::unique_ptr<Backend> batched_, solo_;
};

TEST_P(BatchInvarianceTest, Matmul) {
  // Tails in both tile dimensions and in k; then, on the CPU, rows long enough for its
  // lane-major form (K from 1024 on AVX2).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{203, 190}, {37, 1100}}) {
    if (k > 1024 && GetParam().kind != BackendKind::kCpu) continue;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " N=", n, " K=", k));
      std::mt19937_64 rng(1);
      const std::vector<uint8_t> w = testing::Encode(testing::RandomFloats(rng, n * k), dtype);
      ExpectRowsInvariant(k, n, [&](Backend& b, int64_t rows, const std::vector<float>& in) {
        Mem x(b, in), wm(b, w), y(b, std::vector<float>(rows * n));
        const absl::Status s = b.Matmul(
            x.F32({rows, k}), Tensor(wm.data(), dtype, {n, k}, b.device()), y.F32({rows, n}));
        EXPECT_TRUE(s.ok()) << s;
        return y.Read<float>();
      });
    }
  }
  // On CUDA each of the three shapes reports the algorithm pinned for it, tuned for the
  // target's M; the CPU has nothing to report.
  const std::vector<std::string> notes = batched_->Diagnostics();
  if (GetParam().kind == BackendKind::kCuda) {
    ASSERT_EQ(notes.size(), 3u);
    for (const std::string& note : notes) {
      EXPECT_NE(note.find("N=203 K=190"), std::string::npos) << note;
      EXPECT_NE(note.find(absl::StrCat("pinned for M=", GetParam().cuda_matmul_rows)),
                std::string::npos) << note;
    }
  } else {
    EXPECT_TRUE(notes.empty());
  }
}

TEST_P(BatchInvarianceTest, AddRmsNorm) {
  const int64_t d = 77;
  const std::vector<float> w(d, 1.25f);
  ExpectRowsInvariant(2 * d, d, [&](Backend& b, int64_t rows, const std::vector<float>& in) {
    // Input row = [x | residual]: x and the residual are column views of it (the op writes
    // the residual in place, on this copy).
    Mem packed(b, in), wm(b, w), out(b, std::vector<float>(rows * d));
    const Tensor p = packed.F32({rows, 2 * d});
    const absl::Status s =
        b.AddRmsNorm(p.Columns(0, d), wm.F32({d}), 1e-5f, p.Columns(d, d), out.F32({rows, d}));
    EXPECT_TRUE(s.ok()) << s;
    return out.Read<float>();
  });
}

TEST_P(BatchInvarianceTest, GatedNorm) {
  const int64_t e = 96, groups = 2;
  const std::vector<float> w(e, 0.75f);
  ExpectRowsInvariant(2 * e, e, [&](Backend& b, int64_t rows, const std::vector<float>& in) {
    Mem packed(b, in), wm(b, w), out(b, std::vector<float>(rows * e)),
        sumsq(b, std::vector<float>(rows * groups));
    const Tensor p = packed.F32({rows, 2 * e});
    absl::Status s = b.GatedSumSquares(p.Columns(0, e), p.Columns(e, e), groups, out.F32({rows, e}),
                                       sumsq.F32({rows, groups}));
    EXPECT_TRUE(s.ok()) << s;
    s = b.GatedNormApply(out.F32({rows, e}), sumsq.F32({rows, groups}), wm.F32({e}), e / groups,
                         1e-5f, out.F32({rows, e}));
    EXPECT_TRUE(s.ok()) << s;
    return out.Read<float>();
  });
}

TEST_P(BatchInvarianceTest, ArgmaxAndEmbedding) {
  const int64_t vocab = 300, d = 24;
  std::mt19937_64 rng(2);
  const std::vector<float> table = testing::RandomFloats(rng, vocab * d);
  ExpectRowsInvariant(vocab, 2 + d, [&](Backend& b, int64_t rows, const std::vector<float>& in) {
    Mem logits(b, in), tm(b, table), ids(b, std::vector<int32_t>(rows)),
        values(b, std::vector<float>(rows)), emb(b, std::vector<float>(rows * d));
    const Tensor id_tensor(ids.data(), DType::kI32, {rows}, b.device());
    absl::Status s = b.Argmax(logits.F32({rows, vocab}), id_tensor, values.F32({rows}));
    EXPECT_TRUE(s.ok()) << s;
    s = b.Embedding(id_tensor, tm.F32({vocab, d}), 0, emb.F32({rows, d}));
    EXPECT_TRUE(s.ok()) << s;
    const std::vector<int32_t> id_host = ids.Read<int32_t>();
    const std::vector<float> v = values.Read<float>(), e = emb.Read<float>();
    std::vector<float> out(rows * (2 + d));
    for (int64_t i = 0; i < rows; ++i) {
      out[i * (2 + d)] = static_cast<float>(id_host[i]);
      out[i * (2 + d) + 1] = v[i];
      std::memcpy(&out[i * (2 + d) + 2], &e[i * d], d * 4);
    }
    return out;
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, BatchInvarianceTest, ::testing::ValuesIn(Targets()),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace coil
