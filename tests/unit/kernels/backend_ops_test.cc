// The op harness: every op x backend x dtype against the CPU backend's reference mode
// (scalar loops and the token-by-token recurrence: the oracle), on random inputs seeded
// from the case name. Sections: (1) the backends under test, (2) the comparison, (3) the
// coverage test. To add an op: list it in kBackendOps (kernels/backend.h) and add a case
// to TestOpCases() (op_cases.cc); the coverage test fails until both are done.
// Checks, in order: NaN/inf, NMSE against the reference, guards (state rows not in the
// batch, the scratch row, bytes past each tensor, padding of strided rows) unchanged.
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels/op_cases.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::testing {
namespace {

// ---- (1) the backends under test: the CPU's fast kernels on 1 and 2 threads; the CUDA
// backend joins here under COIL_WITH_CUDA.
struct BackendUnderTest {
  std::string name;
  BackendKind kind;
  int threads;
};

std::vector<BackendUnderTest> Backends() {
  std::vector<BackendUnderTest> b = {{"cpu", BackendKind::kCpu, 2},
                                     {"cpu1t", BackendKind::kCpu, 1}};
#if COIL_WITH_CUDA
  b.push_back({"cuda", BackendKind::kCuda, 1});
#endif
  return b;
}

struct Param {
  BackendUnderTest backend;
  int case_index;
  std::string name;  // "SsmScan/cpu_f32_h4_..."
};

std::vector<Param> AllParams() {
  std::vector<Param> params;
  const auto cases = TestOpCases();
  for (const auto& backend : Backends()) {
    for (size_t i = 0; i < cases.size(); ++i) {
      params.push_back({backend, static_cast<int>(i),
                        cases[i]->Op() + "/" + backend.name + "_" + cases[i]->Params()});
    }
  }
  return params;
}

// ---- (2) the comparison
class BackendOpsTest : public ::testing::TestWithParam<Param> {};

TEST_P(BackendOpsTest, MatchesReference) {
  const Param& p = GetParam();
  auto backend_or = CreateBackend(p.backend.kind, {.threads = p.backend.threads});
  // A build without CUDA (UNIMPLEMENTED) or a machine without a GPU (UNAVAILABLE) skips.
  if (absl::IsUnimplemented(backend_or.status()) || absl::IsUnavailable(backend_or.status())) {
    GTEST_SKIP() << backend_or.status();
  }
  ASSERT_TRUE(backend_or.ok()) << backend_or.status();
  auto reference_or = CreateBackend(BackendKind::kCpu, {.threads = 1, .use_reference = true});
  ASSERT_TRUE(reference_or.ok()) << reference_or.status();

  auto test_case = std::move(TestOpCases()[p.case_index]);
  auto reference_case = std::move(TestOpCases()[p.case_index]);
  const uint64_t seed = SeedFromName(test_case->Name());
  SCOPED_TRACE(::testing::Message() << "case " << p.name << " seed " << seed);
  test_case->MakeInputs(seed);
  reference_case->MakeInputs(seed);

  auto got = test_case->Run(**backend_or);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = reference_case->Run(**reference_or);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(got->outputs.size(), want->outputs.size());
  for (size_t o = 0; o < got->outputs.size(); ++o) {
    const auto& [name, a] = got->outputs[o];
    const auto& b = want->outputs[o].second;
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_FALSE(std::isnan(a[i])) << name << "[" << i << "] is NaN";
      ASSERT_EQ(std::isinf(a[i]), std::isinf(b[i])) << name << "[" << i << "] = " << a[i];
    }
    const double nmse = Nmse(a, b);
    EXPECT_LE(nmse, test_case->max_nmse()) << name << ": NMSE " << nmse;
  }
  for (const std::string& v : got->guard_violations) ADD_FAILURE() << v;
  for (const std::string& v : want->guard_violations) ADD_FAILURE() << "reference: " << v;
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOpsTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           std::string n = info.param.name;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// ---- (3) coverage: every op of the Backend interface has at least one case.
TEST(BackendOpsCoverageTest, EveryOpHasACase) {
  std::set<std::string> covered;
  for (const auto& c : TestOpCases()) covered.insert(c->Op());
  for (const char* op : kBackendOps) {
    EXPECT_TRUE(covered.count(op)) << "op " << op << " has no case in TestOpCases()";
  }
  std::set<std::string> ops(std::begin(kBackendOps), std::end(kBackendOps));
  for (const std::string& op : covered) {
    EXPECT_TRUE(ops.count(op)) << "case op " << op << " is not in kBackendOps";
  }
}

// ---- (4) invariants between ops of one backend.

// GatedRmsNorm is GatedSumSquares then GatedNormApply (group_size = the group width) in one
// pass: the same bits on every backend, and its bf16 out is that f32 out rounded.
TEST(GatedRmsNormInvariantTest, EqualsItsTwoHalvesBitForBit) {
  constexpr int64_t kRows = 6, kWidth = 1000, kGroups = 4;
  std::mt19937_64 rng(SeedFromName("GatedRmsNormInvariant"));
  const std::vector<float> y = RandomFloats(rng, kRows * kWidth, -2.0f, 2.0f);
  const std::vector<float> z = RandomFloats(rng, kRows * kWidth, -4.0f, 4.0f);
  const std::vector<float> w = RandomFloats(rng, kWidth, 0.5f, 1.5f);
  for (const BackendUnderTest& b : Backends()) {
    SCOPED_TRACE(b.name);
    auto backend_or = CreateBackend(b.kind, {.threads = b.threads});
    if (absl::IsUnimplemented(backend_or.status()) || absl::IsUnavailable(backend_or.status())) {
      continue;  // no GPU here
    }
    ASSERT_TRUE(backend_or.ok()) << backend_or.status();
    Backend& be = **backend_or;
    const Device dev = be.device();
    auto d_y = DeviceArray::FromFloats(be, y);
    auto d_z = DeviceArray::FromFloats(be, z);
    auto d_w = DeviceArray::FromFloats(be, w);
    auto d_gated = DeviceArray::FromFloats(be, std::vector<float>(kRows * kWidth));
    auto d_sums = DeviceArray::FromFloats(be, std::vector<float>(kRows * kGroups));
    auto d_two = DeviceArray::FromFloats(be, std::vector<float>(kRows * kWidth));
    auto d_one = DeviceArray::FromFloats(be, std::vector<float>(kRows * kWidth));
    auto d_one16 = DeviceArray::FromFloats(be, std::vector<float>(kRows * kWidth), DType::kBF16);
    ASSERT_TRUE(d_y.ok() && d_z.ok() && d_w.ok() && d_gated.ok() && d_sums.ok() && d_two.ok() &&
                d_one.ok() && d_one16.ok());
    auto t = [&](const DeviceArray& a, DType dtype, std::initializer_list<int64_t> shape) {
      return Tensor(a.data(), dtype, shape, dev);
    };
    const Tensor ty = t(*d_y, DType::kF32, {kRows, kWidth});
    const Tensor tz = t(*d_z, DType::kF32, {kRows, kWidth});
    const Tensor tw = t(*d_w, DType::kF32, {kWidth});
    ASSERT_TRUE(be.GatedSumSquares(ty, tz, kGroups, t(*d_gated, DType::kF32, {kRows, kWidth}),
                                   t(*d_sums, DType::kF32, {kRows, kGroups}))
                    .ok());
    ASSERT_TRUE(be.GatedNormApply(t(*d_gated, DType::kF32, {kRows, kWidth}),
                                  t(*d_sums, DType::kF32, {kRows, kGroups}), tw,
                                  kWidth / kGroups, 1e-5f, t(*d_two, DType::kF32, {kRows, kWidth}))
                    .ok());
    ASSERT_TRUE(
        be.GatedRmsNorm(ty, tz, tw, kGroups, 1e-5f, t(*d_one, DType::kF32, {kRows, kWidth})).ok());
    ASSERT_TRUE(
        be.GatedRmsNorm(ty, tz, tw, kGroups, 1e-5f, t(*d_one16, DType::kBF16, {kRows, kWidth}))
            .ok());
    auto two = d_two->ReadFloats();
    auto one = d_one->ReadFloats();
    auto one16 = d_one16->Read();
    ASSERT_TRUE(two.ok() && one.ok() && one16.ok());
    EXPECT_EQ(*one, *two);
    EXPECT_EQ(Decode(*one16, DType::kBF16), Decode(Encode(*two, DType::kBF16), DType::kBF16));
  }
}

}  // namespace
}  // namespace coil::testing
