// Each CPU op against values worked out by hand (in the comments), in both the fast and
// the reference mode, and the malformed inputs every backend rejects before touching
// memory (the checks live in the Backend base class).
#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/state_pool.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil {
namespace {

using ::testing::HasSubstr;

double Silu(double v) { return v / (1.0 + std::exp(-v)); }

class CpuOpsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto b = CreateBackend(BackendKind::kCpu, {.threads = 2, .use_reference = GetParam()});
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
  }
  std::unique_ptr<Backend> backend_;
};

Tensor T(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
Tensor T(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI32, shape);
}

TEST_P(CpuOpsTest, EmbeddingPicksRowsOfItsShard) {
  // Table rows 0..2 = [1 2], [3 4], [5 6] (exact in bf16 and f16). The shard holds ids
  // 1..3: id 2 -> row 1 = [3 4], id 1 -> row 0, id 0 and id 9 are outside -> zeros.
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> bytes = testing::Encode(table, dtype);
    std::vector<int32_t> ids = {2, 1, 0, 9};
    std::vector<float> out(8, -1.0f);
    ASSERT_TRUE(backend_->Embedding(T(ids, {4}), Tensor(bytes.data(), dtype, {3, 2}), 1,
                                    T(out, {4, 2})).ok());
    EXPECT_EQ(out, (std::vector<float>{3, 4, 1, 2, 0, 0, 0, 0})) << DTypeName(dtype);
  }
}

TEST_P(CpuOpsTest, AddRmsNormAddsThenNormalizes) {
  // residual [0 1 2 3] + x [1 1 1 1] = [1 2 3 4]; mean square 30/4 = 7.5;
  // out = r / sqrt(7.5 + 1e-5) * w with w = [1 2 1 0.5].
  std::vector<float> x = {1, 1, 1, 1}, r = {0, 1, 2, 3}, w = {1, 2, 1, 0.5f}, out(4);
  ASSERT_TRUE(backend_->AddRmsNorm(T(x, {1, 4}), T(w, {4}), 1e-5f, T(r, {1, 4}), T(out, {1, 4}))
                  .ok());
  EXPECT_EQ(r, (std::vector<float>{1, 2, 3, 4}));
  const double s = 1.0 / std::sqrt(7.5 + 1e-5);
  const double want[4] = {1 * s, 2 * s * 2, 3 * s, 4 * s * 0.5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
  // Without x (the first layer) the residual is normalized as it is.
  std::vector<float> r2 = {3, 4}, w2 = {1, 1}, out2(2);
  ASSERT_TRUE(
      backend_->AddRmsNorm(Tensor(), T(w2, {2}), 1e-5f, T(r2, {1, 2}), T(out2, {1, 2})).ok());
  // mean square (9 + 16) / 2 = 12.5
  EXPECT_NEAR(out2[0], 3 / std::sqrt(12.5 + 1e-5), 1e-6);
  EXPECT_NEAR(out2[1], 4 / std::sqrt(12.5 + 1e-5), 1e-6);
}

TEST_P(CpuOpsTest, MatmulIsXTimesWTransposed) {
  // x = [[1 2], [3 4]], W = [[1 0], [0 1], [1 1]] -> y = [[1 2 3], [3 4 7]] (exact in
  // every dtype).
  std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 0, 0, 1, 1, 1};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> wb = testing::Encode(w, dtype);
    std::vector<float> y(6);
    ASSERT_TRUE(backend_->Matmul(T(x, {2, 2}), Tensor(wb.data(), dtype, {3, 2}), T(y, {2, 3})).ok());
    EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 3, 4, 7})) << DTypeName(dtype);
  }
}

TEST_P(CpuOpsTest, CausalConvCarriesItsHistory) {
  // One channel, taps [1 2 3], bias 0.5, fresh. x = 1, 2, 3:
  //   out0 = silu(0.5 + 3*1) = silu(3.5); out1 = silu(0.5 + 2*1 + 3*2) = silu(8.5);
  //   out2 = silu(0.5 + 1*1 + 2*2 + 3*3) = silu(14.5); the state keeps [2 3].
  // Resuming with x = 4: silu(0.5 + 1*2 + 2*3 + 3*4) = silu(20.5); the state keeps [3 4].
  std::vector<float> w = {1, 2, 3}, bias = {0.5f}, state(2 * 2, 9.0f);  // 1 row + scratch
  std::vector<float> x = {1, 2, 3}, out(3);
  RecurrentBatch batch;
  batch.Add(3, 0, /*is_fresh=*/true);
  ASSERT_TRUE(backend_->CausalConv1d(T(x, {3, 1}), T(w, {1, 3}), T(bias, {1}), batch,
                                     T(state, {2, 2, 1}), T(out, {3, 1}))
                  .ok());
  EXPECT_NEAR(out[0], Silu(3.5), 1e-6);
  EXPECT_NEAR(out[1], Silu(8.5), 1e-6);
  EXPECT_NEAR(out[2], Silu(14.5), 1e-6);
  EXPECT_EQ(state[0], 2.0f);
  EXPECT_EQ(state[1], 3.0f);
  EXPECT_EQ(state[2], 9.0f);  // the scratch row is untouched
  std::vector<float> x2 = {4}, out2(1);
  RecurrentBatch next;
  next.Add(1, 0, false, 3);
  ASSERT_TRUE(backend_->CausalConv1d(T(x2, {1, 1}), T(w, {1, 3}), T(bias, {1}), next,
                                     T(state, {2, 2, 1}), T(out2, {1, 1}))
                  .ok());
  EXPECT_NEAR(out2[0], Silu(20.5), 1e-5);
  EXPECT_EQ(state[0], 3.0f);
  EXPECT_EQ(state[1], 4.0f);
}

TEST_P(CpuOpsTest, SsmScanFollowsTheRecurrence) {
  // One head, headdim 1, d_state 2, one group. A = -exp(log 0.5) = -0.5; dt raw
  // log(e - 1) so softplus(dt) = 1, dA = exp(-0.5); D = 0.25.
  // t0 (fresh): x 2, B [1 -1], C [0.5 2]: h = 2 [1 -1] = [2 -2];
  //   y = 0.5*2 + 2*(-2) + 0.25*2 = -2.5.
  // t1: x 1, B [0 1], C [1 1]: h = [2 -2] e^-0.5 + [0 1]; y = (2 - 2) e^-0.5 + 1 + 0.25 = 1.25.
  const float dt_raw = static_cast<float>(std::log(std::exp(1.0) - 1.0));
  std::vector<float> x = {2, 1}, dt = {dt_raw, dt_raw}, b = {1, -1, 0, 1}, c = {0.5f, 2, 1, 1};
  std::vector<float> a_log = {static_cast<float>(std::log(0.5))}, d = {0.25f}, bias = {0};
  for (int split : {0, 1}) {
    std::vector<float> state(2 * 2, 7.0f), y(2, 0.0f);
    SsmScanOptions options;
    options.chunk_size = 4;
    RecurrentBatch whole;
    if (split == 0) {
      whole.Add(2, 0, true, 0);
      ASSERT_TRUE(backend_->SsmScan(T(x, {2, 1}), T(dt, {2, 1}), T(a_log, {1}), T(b, {2, 2}),
                                    T(c, {2, 2}), T(d, {1}), T(bias, {1}), options, whole,
                                    T(state, {2, 1, 1, 2}), T(y, {2, 1}))
                      .ok());
    } else {  // two decode steps
      for (int t = 0; t < 2; ++t) {
        RecurrentBatch step;
        step.Add(1, 0, t == 0, t);
        ASSERT_TRUE(backend_->SsmScan(
                        Tensor(&x[t], DType::kF32, {1, 1}), Tensor(&dt[t], DType::kF32, {1, 1}),
                        T(a_log, {1}), Tensor(&b[2 * t], DType::kF32, {1, 2}),
                        Tensor(&c[2 * t], DType::kF32, {1, 2}), T(d, {1}), T(bias, {1}),
                        options, step, T(state, {2, 1, 1, 2}), Tensor(&y[t], DType::kF32, {1, 1}))
                        .ok());
      }
    }
    EXPECT_NEAR(y[0], -2.5, 1e-5) << "split " << split;
    EXPECT_NEAR(y[1], 1.25, 1e-5) << "split " << split;
    EXPECT_NEAR(state[0], 2 * std::exp(-0.5), 1e-5);
    EXPECT_NEAR(state[1], -2 * std::exp(-0.5) + 1, 1e-5);
    EXPECT_EQ(state[2], 7.0f);  // scratch row
  }
}

TEST_P(CpuOpsTest, SsmScanClampsDtToTheTimeStepLimit) {
  // dt raw 10 -> softplus ~ 10, clamped to 0.5. Fresh, x 1, B [1], C [1], D 0, A = -1:
  // h = 0.5 * 1 * 1 = 0.5, y = 0.5.
  std::vector<float> x = {1}, dt = {10}, b = {1}, c = {1}, a_log = {0}, d = {0}, bias = {0};
  std::vector<float> state(2, 0.0f), y(1);
  SsmScanOptions options;
  options.dt_min = 0.1f;
  options.dt_max = 0.5f;
  RecurrentBatch batch;
  batch.Add(1, 0, true);
  ASSERT_TRUE(backend_->SsmScan(T(x, {1, 1}), T(dt, {1, 1}), T(a_log, {1}), T(b, {1, 1}),
                                T(c, {1, 1}), T(d, {1}), T(bias, {1}), options, batch,
                                T(state, {2, 1, 1, 1}), T(y, {1, 1}))
                  .ok());
  EXPECT_NEAR(y[0], 0.5, 1e-6);
}

TEST_P(CpuOpsTest, GatedNormGatesThenNormalizesPerGroup) {
  // y = [1 2 | 3 4], z = [0 20 | 1 -1], two groups of 2. gated = y * silu(z):
  // [0, 2 silu(20), 3 silu(1), 4 silu(-1)]; sums of squares per group; out = gated /
  // sqrt(sumsq / 2 + 1e-5) * w with w = [1 1 2 1].
  std::vector<float> y = {1, 2, 3, 4}, z = {0, 20, 1, -1}, w = {1, 1, 2, 1};
  std::vector<float> gated(4), sumsq(2), out(4);
  ASSERT_TRUE(backend_->GatedSumSquares(T(y, {1, 4}), T(z, {1, 4}), 2, T(gated, {1, 4}),
                                        T(sumsq, {1, 2}))
                  .ok());
  const double g[4] = {0, 2 * Silu(20), 3 * Silu(1), 4 * Silu(-1)};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(gated[i], g[i], 1e-5) << i;
  const double s0 = g[0] * g[0] + g[1] * g[1], s1 = g[2] * g[2] + g[3] * g[3];
  EXPECT_NEAR(sumsq[0], s0, 1e-4);
  EXPECT_NEAR(sumsq[1], s1, 1e-4);
  ASSERT_TRUE(backend_->GatedNormApply(T(gated, {1, 4}), T(sumsq, {1, 2}), T(w, {4}), 2, 1e-5f,
                                       T(out, {1, 4}))
                  .ok());
  const double r0 = 1 / std::sqrt(s0 / 2 + 1e-5), r1 = 1 / std::sqrt(s1 / 2 + 1e-5);
  const double want[4] = {g[0] * r0, g[1] * r0, g[2] * r1 * 2, g[3] * r1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
  // A group split over two ranks: each rank holds half the group, sums its squares, the
  // sums are added (the all-reduce), and group_size is the whole group's width, 4.
  std::vector<float> sum_all = {static_cast<float>(s0 + s1)}, out_all(4);
  ASSERT_TRUE(backend_->GatedNormApply(T(gated, {1, 4}), T(sum_all, {1, 1}), T(w, {4}), 4, 1e-5f,
                                       T(out_all, {1, 4}))
                  .ok());
  const double r = 1 / std::sqrt((s0 + s1) / 4 + 1e-5);
  EXPECT_NEAR(out_all[2], g[2] * r * 2, 1e-5);
}

TEST_P(CpuOpsTest, ArgmaxTakesTheFirstMaximum) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Row 0: max 3 at 1 and 2 -> 1. Row 1: NaN never wins -> -5 at 2. Row 2: all -inf -> 0.
  // Row 3: 40 values, the max 7 at 33 (past the first 32 lanes) and 39 -> 33.
  std::vector<float> logits(4 * 40, -1.0f);
  const float r0[4] = {1, 3, 3, 2}, r1[3] = {-inf, nan, -5};
  for (int i = 0; i < 4; ++i) logits[i] = r0[i];
  for (int i = 0; i < 40; ++i) logits[40 + i] = i < 3 ? r1[i] : -inf;
  for (int i = 0; i < 40; ++i) logits[80 + i] = -inf;
  logits[120 + 33] = 7;
  logits[120 + 39] = 7;
  for (int i = 4; i < 40; ++i) logits[i] = -2;
  std::vector<int32_t> ids(4);
  std::vector<float> values(4);
  ASSERT_TRUE(backend_->Argmax(T(logits, {4, 40}), T(ids, {4}), T(values, {4})).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0, 33}));
  EXPECT_EQ(values[0], 3.0f);
  EXPECT_EQ(values[1], -5.0f);
  EXPECT_EQ(values[3], 7.0f);
}

INSTANTIATE_TEST_SUITE_P(Modes, CpuOpsTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("reference") : std::string("fast");
                         });

// ---- malformed inputs: rejected with INVALID_ARGUMENT before any memory is touched.
class MalformedBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = CreateBackend(BackendKind::kCpu, {.threads = 1});
    ASSERT_TRUE(b.ok());
    backend_ = std::move(*b);
    x_.assign(4 * 2, 1.0f);
    w_.assign(2 * 4, 1.0f);
    bias_.assign(2, 0.0f);
    state_.assign(4 * 3 * 2, 0.0f);  // 3 rows + scratch
    out_.assign(4 * 2, 0.0f);
  }
  absl::Status Conv(const RecurrentBatch& batch) {
    auto before = state_;
    absl::Status s = backend_->CausalConv1d(T(x_, {4, 2}), T(w_, {2, 4}), T(bias_, {2}), batch,
                                            T(state_, {4, 3, 2}), T(out_, {4, 2}));
    if (!s.ok()) {
      EXPECT_EQ(state_, before) << "a rejected batch touched the state";
    }
    return s;
  }
  std::unique_ptr<Backend> backend_;
  std::vector<float> x_, w_, bias_, state_, out_;
};

RecurrentBatch Batch(std::vector<std::pair<int, int>> runs_and_slots) {
  RecurrentBatch b;
  for (auto [run, slot] : runs_and_slots) b.Add(run, slot, false);
  return b;
}

TEST_F(MalformedBatchTest, AcceptsAValidBatchAndScratchPadding) {
  EXPECT_TRUE(Conv(Batch({{2, 0}, {1, 2}, {1, 1}})).ok());
  // The scratch row (slot 3 = state_rows) any number of times.
  EXPECT_TRUE(Conv(Batch({{2, 0}, {1, 3}, {1, 3}})).ok());
}

TEST_F(MalformedBatchTest, RejectsSlotOutOfRange) {
  absl::Status s = Conv(Batch({{2, 0}, {2, 4}}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("slot 4"));
  EXPECT_TRUE(absl::IsInvalidArgument(Conv(Batch({{2, -1}, {2, 0}}))));
}

TEST_F(MalformedBatchTest, RejectsSlotTwice) {
  absl::Status s = Conv(Batch({{2, 1}, {2, 1}}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("twice"));
}

TEST_F(MalformedBatchTest, RejectsRunsThatDoNotCoverTheRows) {
  EXPECT_THAT(std::string(Conv(Batch({{2, 0}, {1, 1}})).message()), HasSubstr("cover 3 rows"));
  EXPECT_TRUE(absl::IsInvalidArgument(Conv(Batch({{2, 0}, {3, 1}}))));
  RecurrentBatch empty_run = Batch({{4, 0}});
  empty_run.Add(0, 1, false);
  EXPECT_TRUE(absl::IsInvalidArgument(Conv(empty_run)));
  RecurrentBatch bad_start = Batch({{4, 0}});
  bad_start.cu_seqlens = {1, 5};
  EXPECT_TRUE(absl::IsInvalidArgument(Conv(bad_start)));
  RecurrentBatch short_fresh = Batch({{4, 0}});
  short_fresh.fresh.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(Conv(short_fresh)));
  EXPECT_TRUE(absl::IsInvalidArgument(Conv(RecurrentBatch{})));
}

TEST_F(MalformedBatchTest, SsmScanChecksTheSameBatch) {
  std::vector<float> x(4 * 4), dt(4 * 2), b(4 * 2), c(4 * 2), a(2), d(2), bias(2), y(4 * 4);
  std::vector<float> state(3 * 2 * 2 * 2);  // 2 rows + scratch, 2 heads, headdim 2, d_state 2
  auto scan = [&](const RecurrentBatch& batch) {
    return backend_->SsmScan(T(x, {4, 4}), T(dt, {4, 2}), T(a, {2}), T(b, {4, 2}), T(c, {4, 2}),
                             T(d, {2}), T(bias, {2}), {}, batch, T(state, {3, 2, 2, 2}),
                             T(y, {4, 4}));
  };
  EXPECT_TRUE(scan(Batch({{3, 0}, {1, 1}})).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(scan(Batch({{3, 0}, {1, 3}}))));
  EXPECT_TRUE(absl::IsInvalidArgument(scan(Batch({{3, 1}, {1, 1}}))));
  EXPECT_TRUE(absl::IsInvalidArgument(scan(Batch({{3, 0}}))));
}

TEST(BackendShapeTest, RejectsMismatchedShapesWithBothSizes) {
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok());
  std::vector<float> x(2 * 3), w(4 * 5), y(2 * 4);
  absl::Status s = (*backend)->Matmul(T(x, {2, 3}), T(w, {4, 5}), T(y, {2, 4}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("must be 3"));
  std::vector<int32_t> ids(2);
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*backend)->Matmul(Tensor(ids.data(), DType::kI32, {2, 1}), T(w, {4, 5}), T(y, {2, 4}))));
  // bf16 rows go with bf16 weights only.
  std::vector<uint16_t> xb(2 * 5);
  const absl::Status mixed =
      (*backend)->Matmul(Tensor(xb.data(), DType::kBF16, {2, 5}), T(w, {4, 5}), T(y, {2, 4}));
  EXPECT_TRUE(absl::IsInvalidArgument(mixed));
  EXPECT_THAT(std::string(mixed.message()), HasSubstr("pass x as f32"));
  // Without CUDA the factory refuses the kind; with it, a machine without a GPU answers
  // UNAVAILABLE and one with a GPU gets the backend.
  const absl::Status cuda = CreateBackend(BackendKind::kCuda).status();
#if COIL_WITH_CUDA
  EXPECT_TRUE(cuda.ok() || absl::IsUnavailable(cuda)) << cuda;
#else
  EXPECT_TRUE(absl::IsUnimplemented(cuda)) << cuda;
#endif
}

TEST(BackendFactoryTest, ParsesTheDeviceNames) {
  EXPECT_EQ(ParseBackendKind("cpu").value(), BackendKind::kCpu);
  EXPECT_EQ(ParseBackendKind("cuda").value(), BackendKind::kCuda);
  const absl::StatusOr<BackendKind> bad = ParseBackendKind("gpu");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_EQ(bad.status().message(), "unknown device \"gpu\"; use cpu or cuda");
}

TEST(StatePoolTest, HoldsEveryLayerPlusTheScratchRow) {
  // mamba2-130m at TP1: conv (4 - 1) x 1792 and SSM 24 x 64 x 128 floats per layer and
  // row, 24 layers: (5376 + 196608) * 4 * 24 bytes = 19.4 MB per sequence.
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok());
  StatePoolShape shape{.layers = 24, .state_rows = 2, .d_conv = 4, .conv_channels = 1792,
                       .heads = 24, .headdim = 64, .d_state = 128};
  EXPECT_EQ(shape.bytes_per_sequence(), (5376 + 196608) * 4 * 24);
  auto pool = StatePool::Create(**backend, shape);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->bytes(), static_cast<size_t>(shape.bytes_per_sequence()) * 3);
  const Tensor ssm = pool->SsmState(23);
  EXPECT_EQ(ssm.dim(0), 3);  // two rows and the scratch row
  EXPECT_EQ(ssm.dim(3), 128);
  EXPECT_EQ(pool->ConvState(1).dim(1), 3);
  EXPECT_EQ(pool->scratch_row(), 2);
  shape.d_conv = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(StatePool::Create(**backend, shape).status()));
}

TEST(StatePoolTest, ABf16SsmStateTakesHalfItsBytes) {
  // mamba2-130m: the SSM state in bf16 (196608 x 2 bytes per layer and row), the conv
  // state still fp32: (5376 * 4 + 196608 * 2) * 24 bytes = 9.95 MB per sequence.
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok());
  StatePoolShape shape{.layers = 24, .state_rows = 2, .d_conv = 4, .conv_channels = 1792,
                       .heads = 24, .headdim = 64, .d_state = 128, .ssm_dtype = DType::kBF16};
  EXPECT_EQ(shape.bytes_per_sequence(), (5376 * 4 + 196608 * 2) * 24);
  auto pool = StatePool::Create(**backend, shape);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->bytes(), static_cast<size_t>(shape.bytes_per_sequence()) * 3);
  const Tensor last = pool->SsmState(23), first = pool->SsmState(0);
  EXPECT_EQ(last.dtype(), DType::kBF16);
  EXPECT_EQ(static_cast<char*>(last.raw()) - static_cast<char*>(first.raw()),
            23 * 3 * 196608 * 2);
  shape.ssm_dtype = DType::kF16;
  const absl::Status refused = StatePool::Create(**backend, shape).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_EQ(refused.message(), "the SSM state's type is f16; it must be f32 or bf16");
}

}  // namespace
}  // namespace coil
