// Per-op timing: OpTimer's sums worked out by hand over a clock whose marks are given, and
// each backend's timing naming and counting the ops a sequence runs (on CUDA, the chunked
// scan's phases as well, inside the scan's own time).
#include "kernels/op_timing.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/kernels/forwarding_backend.h"
#include "tests/unit/kernels/op_cases.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil {
namespace {

// Mark i (counted since the last Clear) is at times[first + i] seconds.
class ScriptedClock final : public OpClock {
 public:
  explicit ScriptedClock(std::vector<double> times) : times_(std::move(times)) {}
  absl::StatusOr<int64_t> Mark() override {
    if (first_ + used_ >= times_.size()) return absl::OutOfRangeError("no more scripted times");
    return static_cast<int64_t>(used_++);
  }
  absl::StatusOr<double> Between(int64_t from, int64_t to) override {
    return times_[first_ + to] - times_[first_ + from];
  }
  void Clear() override {
    first_ += used_;
    used_ = 0;
  }

 private:
  std::vector<double> times_;
  size_t first_ = 0, used_ = 0;
};

TEST(OpTimerTest, SumsNamedIntervalsSlowestFirst) {
  OpTimer timer(std::make_unique<ScriptedClock>(
      std::vector<double>{0.0, 1.0, 1.5, 4.0, 4.25, 10.0, 10.5, 11.0, 20.0, 23.0}));
  int64_t a = timer.Begin().value();                     // 0
  ASSERT_TRUE(timer.End("Matmul", a).ok());              // 1: 1.0
  const int64_t op = timer.Begin().value();              // 1.5
  const int64_t phase = timer.Begin().value();           // 4.0, inside the op
  ASSERT_TRUE(timer.End("SsmScan: phase", phase).ok());  // 4.25: 0.25
  ASSERT_TRUE(timer.End("SsmScan", op).ok());            // 10.0: 8.5
  a = timer.Begin().value();                             // 10.5
  ASSERT_TRUE(timer.End("Matmul", a).ok());              // 11.0: 0.5
  const std::vector<OpTime> times = timer.Take().value();
  ASSERT_EQ(times.size(), 3u);
  EXPECT_EQ(times[0].op, "SsmScan");
  EXPECT_EQ(times[0].calls, 1);
  EXPECT_DOUBLE_EQ(times[0].seconds, 8.5);
  EXPECT_EQ(times[1].op, "Matmul");
  EXPECT_EQ(times[1].calls, 2);
  EXPECT_DOUBLE_EQ(times[1].seconds, 1.5);
  EXPECT_EQ(times[2].op, "SsmScan: phase");
  EXPECT_DOUBLE_EQ(times[2].seconds, 0.25);
  // Taken once: the next take starts over, on the clock's next marks (20.0 and 23.0).
  EXPECT_TRUE(timer.Take().value().empty());
  a = timer.Begin().value();
  ASSERT_TRUE(timer.End("Argmax", a).ok());
  const std::vector<OpTime> again = timer.Take().value();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_DOUBLE_EQ(again[0].seconds, 3.0);
}

// The table worked out by hand: 2 steps in 10 s of wall time; the phase is indented and
// left out of the ops' total.
TEST(OpTimerTest, FormatsPerStepTimesAndShares) {
  const std::string table = FormatOpTimes(
      "prefill", {{"SsmScan", 2, 8.5}, {"SsmScan: phase", 2, 0.25}, {"Argmax", 1, 0.5}}, 2, 10.0);
  EXPECT_NE(table.find("prefill: 5000000.0 us per step (wall)"), std::string::npos) << table;
  EXPECT_NE(table.find("| SsmScan | 1.00 | 4250000.0 | 85.0% |"), std::string::npos) << table;
  EXPECT_NE(table.find("| &nbsp;&nbsp;SsmScan: phase | 1.00 | 125000.0 | 2.5% |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| Argmax | 0.50 | 250000.0 | 5.0% |"), std::string::npos) << table;
  EXPECT_NE(table.find("| (ops together) | | 4500000.0 | 90.0% |"), std::string::npos) << table;
}

std::map<std::string, OpTime> ByName(const std::vector<OpTime>& times) {
  std::map<std::string, OpTime> by_name;
  for (const OpTime& t : times) {
    EXPECT_TRUE(std::isfinite(t.seconds) && t.seconds >= 0.0) << t.op << ": " << t.seconds;
    EXPECT_TRUE(by_name.emplace(t.op, t).second) << t.op << " listed twice";
  }
  return by_name;
}

class OpTimingTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(GetParam());
    // A build without CUDA (UNIMPLEMENTED) or a machine without a GPU (UNAVAILABLE) skips.
    if (absl::IsUnimplemented(backend.status()) || absl::IsUnavailable(backend.status())) {
      GTEST_SKIP() << backend.status();
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(OpTimingTest, NamesAndCountsTheOpsRunWhileOn) {
  Backend& b = *backend_;
  using testing::DeviceArray;
  std::mt19937_64 rng(7);
  auto x = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 4 * 3)).value();
  auto w5 = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 5 * 3)).value();
  auto w2 = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 2 * 3)).value();
  auto y = DeviceArray::FromFloats(b, std::vector<float>(4 * 5)).value();
  auto norm_w = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 3)).value();
  auto residual = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 4 * 3)).value();
  const auto f32 = [&](const DeviceArray& a, int64_t rows, int64_t cols) {
    return Tensor(a.data(), DType::kF32, {rows, cols}, b.device());
  };
  const Tensor xt = f32(x, 4, 3), yt = f32(y, 4, 5);
  EXPECT_FALSE(b.op_timing());
  ASSERT_TRUE(b.Matmul(xt, f32(w5, 5, 3), yt).ok());  // not timed: timing is off
  EXPECT_TRUE(b.TakeOpTimes().value().empty());

  b.SetOpTiming(true);
  EXPECT_TRUE(b.op_timing());
  ASSERT_TRUE(b.Matmul(xt, f32(w5, 5, 3), yt).ok());
  ASSERT_TRUE(b.Matmul(xt, f32(w2, 2, 3), f32(y, 4, 2)).ok());
  ASSERT_TRUE(b.Matmul(xt, f32(w5, 5, 3), yt).ok());
  ASSERT_TRUE(b.AddRmsNorm(Tensor(), Tensor(norm_w.data(), DType::kF32, {3}, b.device()), 1e-5f,
                           f32(residual, 4, 3), xt)
                  .ok());
  std::vector<float> host(4 * 5);
  ASSERT_TRUE(b.CopyToHost(host.data(), y.data(), host.size() * sizeof(float)).ok());
  std::map<std::string, OpTime> times = ByName(b.TakeOpTimes().value());
  ASSERT_EQ(times.size(), 4u);
  EXPECT_EQ(times["Matmul 5x3"].calls, 2);
  EXPECT_EQ(times["Matmul 2x3"].calls, 1);
  EXPECT_EQ(times["AddRmsNorm"].calls, 1);
  EXPECT_EQ(times["CopyToHost"].calls, 1);
  EXPECT_TRUE(b.TakeOpTimes().value().empty());  // taken

  b.SetOpTiming(false);
  ASSERT_TRUE(b.Matmul(xt, f32(w5, 5, 3), yt).ok());
  EXPECT_TRUE(b.TakeOpTimes().value().empty());
}

// On CUDA the chunked scan times its phases inside its own interval: each phase once, and
// together no longer than the scan (to the events' resolution).
TEST_P(OpTimingTest, ChunkedScanPhasesFitInsideTheScan) {
  Backend& b = *backend_;
  for (auto& op : testing::PerfOpCases(600, /*decode=*/false)) {
    if (op->Op() != "SsmScan" || !absl::StrContains(op->Params(), "bf16products")) continue;
    op->MakeInputs(1);
    ASSERT_TRUE(op->Prepare(b).ok());
    b.SetOpTiming(true);
    ASSERT_TRUE(op->Launch(b).ok());
    std::map<std::string, OpTime> times = ByName(b.TakeOpTimes().value());
    b.SetOpTiming(false);
    ASSERT_EQ(times.count("SsmScan"), 1u);
    EXPECT_EQ(times["SsmScan"].calls, 1);
    double phases = 0.0;
    int phase_count = 0;
    for (const auto& [name, t] : times) {
      if (!absl::StartsWith(name, "SsmScan: ")) continue;
      EXPECT_EQ(t.calls, 1) << name;
      phases += t.seconds;
      ++phase_count;
    }
    if (GetParam() == BackendKind::kCuda) {
      EXPECT_EQ(phase_count, 6);  // chunk list, cumsum, C B^T, states, passing, chunk scan
      EXPECT_LE(phases, times["SsmScan"].seconds + 1e-5);
    } else {
      EXPECT_EQ(phase_count, 0);  // the CPU times whole ops only
    }
    return;
  }
  FAIL() << "no bf16 SsmScan perf case";
}

// A clock whose marks fail from the `good`-th on.
class FailingClock final : public OpClock {
 public:
  explicit FailingClock(int good) : good_(good) {}
  absl::StatusOr<int64_t> Mark() override {
    if (used_ >= good_) return absl::UnavailableError("the clock is gone");
    return used_++;
  }
  absl::StatusOr<double> Between(int64_t, int64_t) override { return 0.0; }
  void Clear() override {}

 private:
  int good_, used_ = 0;
};

// The CPU backend timed by a clock that fails at its third mark: the first loop's copy
// takes two, so the first timed matmul's end mark fails.
class FailingClockBackend final : public testing::ForwardingBackend {
 public:
  FailingClockBackend() : ForwardingBackend(CreateBackend(BackendKind::kCpu).value()) {}

 private:
  std::unique_ptr<OpClock> MakeOpClock() override { return std::make_unique<FailingClock>(3); }
};

TEST(OpTimingFailureTest, AFailingClockStopsTheTimingNeverAnOp) {
  FailingClockBackend b;
  using testing::DeviceArray;
  std::mt19937_64 rng(3);
  auto x = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 4 * 3)).value();
  auto w = DeviceArray::FromFloats(b, testing::RandomFloats(rng, 5 * 3)).value();
  auto y = DeviceArray::FromFloats(b, std::vector<float>(4 * 5)).value();
  const Tensor xt(x.data(), DType::kF32, {4, 3}), wt(w.data(), DType::kF32, {5, 3}),
      yt(y.data(), DType::kF32, {4, 5});
  ASSERT_TRUE(b.Matmul(xt, wt, yt).ok());
  const std::vector<float> want = y.ReadFloats().value();
  b.SetOpTiming(true);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(y.Read().ok());
    ASSERT_TRUE(b.Matmul(xt, wt, yt).ok()) << "call " << i;
    EXPECT_EQ(y.ReadFloats().value(), want) << "call " << i;
  }
  EXPECT_FALSE(b.op_timing());
  const auto times = b.TakeOpTimes();
  ASSERT_TRUE(absl::IsUnavailable(times.status())) << times.status();
  EXPECT_NE(times.status().message().find("op timing stopped: the clock is gone"),
            absl::string_view::npos);
  EXPECT_TRUE(b.TakeOpTimes().value().empty());  // reported once; timing is off
}

INSTANTIATE_TEST_SUITE_P(Backends, OpTimingTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& info) {
                           return info.param == BackendKind::kCpu ? "cpu" : "cuda";
                         });

}  // namespace
}  // namespace coil
