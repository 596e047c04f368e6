// The op harness: every op x backend x dtype against the CPU backend's reference mode
// (scalar loops and the token-by-token recurrence: the oracle), on random inputs seeded
// from the case name. Sections: (1) the backends under test, (2) the comparison, (3) the
// coverage test. To add an op: add a line to COIL_BACKEND_OPS (kernels/backend.h) and a
// case to TestOpCases() (op_cases.cc); the coverage test fails until both are done.
// Checks, in order: NaN/inf, NMSE against the reference (and against the case's own float64
// reference where it has one, for both sides), guards (state rows not in the batch, the
// scratch row, bytes past each tensor, padding of strided rows) unchanged.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
    EXPECT_LE(nmse, test_case->max_nmse_for(p.backend.kind)) << name << ": NMSE " << nmse;
  }
  // Cases with references of their own: both sides against them too.
  const auto expected = test_case->Expected();
  if (!expected.empty()) {
    ASSERT_EQ(expected.size(), got->outputs.size());
    for (size_t o = 0; o < expected.size(); ++o) {
      const auto& [name, e] = expected[o];
      ASSERT_EQ(name, got->outputs[o].first);
      ASSERT_EQ(e.size(), got->outputs[o].second.size()) << name;
      const double nmse = Nmse(got->outputs[o].second, e);
      EXPECT_LE(nmse, test_case->max_nmse_for(p.backend.kind))
          << name << " against the case's own reference: NMSE " << nmse;
      const double ref_nmse = Nmse(want->outputs[o].second, e);
      EXPECT_LE(ref_nmse, test_case->max_nmse())
          << name << ": the reference mode against the case's own reference: NMSE " << ref_nmse;
    }
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

// Calls body(backend) for each backend under test this machine has (no GPU: CPU only),
// inside a SCOPED_TRACE naming it.
template <typename Body>
void ForEachAvailableBackend(Body body) {
  for (const BackendUnderTest& b : Backends()) {
    SCOPED_TRACE(b.name);
    auto backend_or = CreateBackend(b.kind, {.threads = b.threads});
    if (absl::IsUnimplemented(backend_or.status()) || absl::IsUnavailable(backend_or.status())) {
      continue;  // no GPU here
    }
    ASSERT_TRUE(backend_or.ok()) << backend_or.status();
    body(**backend_or);
  }
}

// GatedRmsNorm is GatedSumSquares then GatedNormApply (group_size = the group width) in one
// pass: the same bits on every backend, and its bf16 out is that f32 out rounded.
TEST(GatedRmsNormInvariantTest, EqualsItsTwoHalvesBitForBit) {
  constexpr int64_t kRows = 6, kWidth = 1000, kGroups = 4;
  std::mt19937_64 rng(SeedFromName("GatedRmsNormInvariant"));
  const std::vector<float> y = RandomFloats(rng, kRows * kWidth, -2.0f, 2.0f);
  const std::vector<float> z = RandomFloats(rng, kRows * kWidth, -4.0f, 4.0f);
  const std::vector<float> w = RandomFloats(rng, kWidth, 0.5f, 1.5f);
  ForEachAvailableBackend([&](Backend& be) {
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
  });
}

// A matmul with bf16 weights gives the same y for f32 rows and for those rows rounded to
// bf16, whatever their stride (the Backend contract): on CUDA, both reach the same pinned
// cuBLASLt algorithm, so that a row's bits do not depend on which form the caller had
// (the model's lm_head takes either, depending on whether a step samples every row).
TEST(MatmulBf16RowsInvariantTest, F32RowsAndTheirBf16RowsGiveTheSameBits) {
  constexpr int64_t kM = 5, kN = 37;
  for (const int64_t k : {64, 100, 768}) {
    SCOPED_TRACE(::testing::Message() << "K " << k);
    std::mt19937_64 rng(SeedFromName(absl::StrCat("MatmulBf16Rows", k)));
    const std::vector<float> w = RandomFloats(rng, kN * k);
    const std::vector<float> x = RandomFloats(rng, kM * k, -2.0f, 2.0f);
    // The bf16 rows three ways: packed at stride K, at a wider stride, and a single row.
    const int64_t wide = k + 136;
    std::vector<float> x_wide(kM * wide, 0.0f);
    for (int64_t r = 0; r < kM; ++r) {
      std::copy(x.begin() + r * k, x.begin() + (r + 1) * k, x_wide.begin() + r * wide);
    }
    ForEachAvailableBackend([&](Backend& be) {
      const Device dev = be.device();
      auto d_w = DeviceArray::FromFloats(be, w, DType::kBF16);
      auto d_x = DeviceArray::FromFloats(be, x);
      auto d_x16 = DeviceArray::FromFloats(be, x, DType::kBF16);
      auto d_wide16 = DeviceArray::FromFloats(be, x_wide, DType::kBF16);
      std::vector<DeviceArray> ys;
      for (int i = 0; i < 4; ++i) {
        auto y = DeviceArray::FromFloats(be, std::vector<float>(kM * kN));
        ASSERT_TRUE(y.ok());
        ys.push_back(std::move(y).value());
      }
      ASSERT_TRUE(d_w.ok() && d_x.ok() && d_x16.ok() && d_wide16.ok());
      const Tensor tw(d_w->data(), DType::kBF16, {kN, k}, dev);
      auto y_of = [&](const DeviceArray& y) { return Tensor(y.data(), DType::kF32, {kM, kN}, dev); };
      ASSERT_TRUE(be.Matmul(Tensor(d_x->data(), DType::kF32, {kM, k}, dev), tw, y_of(ys[0])).ok());
      ASSERT_TRUE(be.Matmul(Tensor(d_x16->data(), DType::kBF16, {kM, k}, dev), tw, y_of(ys[1])).ok());
      const Tensor wide16(d_wide16->data(), DType::kBF16, {kM, wide}, dev);
      ASSERT_TRUE(be.Matmul(wide16.Columns(0, k), tw, y_of(ys[2])).ok());
      ASSERT_TRUE(be.Matmul(Tensor(d_x16->data(), DType::kBF16, {1, k}, dev), tw,
                            Tensor(ys[3].data(), DType::kF32, {1, kN}, dev))
                      .ok());
      std::vector<std::vector<float>> got;
      for (const DeviceArray& y : ys) {
        auto v = y.ReadFloats();
        ASSERT_TRUE(v.ok());
        got.push_back(*v);
      }
      EXPECT_EQ(got[1], got[0]) << "bf16 rows at stride K";
      EXPECT_EQ(got[2], got[0]) << "bf16 rows at a wider stride";
      EXPECT_EQ(std::vector<float>(got[3].begin(), got[3].begin() + kN),
                std::vector<float>(got[0].begin(), got[0].begin() + kN))
          << "one bf16 row";
    });
  }
}

// A backend may keep what it derives from a batch between ops (the CUDA backend builds the
// chunked scan's chunk list once per step, not once per layer): every scan case run once in
// turn, then each twice in a row on the same backend, gives the same bits every time.
TEST(SsmScanPlanReuseTest, RepeatedAndInterleavedScansGiveTheSameBits) {
  ForEachAvailableBackend([&](Backend& be) {
    std::vector<std::vector<std::pair<std::string, std::vector<float>>>> first;
    std::vector<std::unique_ptr<OpCase>> cases;
    for (auto& c : TestOpCases()) {
      if (c->Op() == "SsmScan") cases.push_back(std::move(c));
    }
    ASSERT_GT(cases.size(), 10u);
    for (auto& c : cases) {
      c->MakeInputs(SeedFromName(c->Name()));
      auto r = c->Run(be);
      ASSERT_TRUE(r.ok()) << c->Name() << ": " << r.status();
      first.push_back(r->outputs);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      for (int again = 0; again < 2; ++again) {
        auto r = cases[i]->Run(be);
        ASSERT_TRUE(r.ok()) << cases[i]->Name() << ": " << r.status();
        EXPECT_EQ(r->outputs, first[i]) << cases[i]->Name() << ", run " << again + 2;
      }
    }
  });
}

// MixerDecode is CausalConv1d, SsmScan and GatedRmsNorm in turn: the same out and states,
// bit for bit, on every backend (the CUDA backend fuses them into one launch), twice in a
// row (the second step resumes from the first's states, and on CUDA reuses the tickets the
// first left at zero). Over the shapes that reach each form of the fused kernel: partial
// and several tiles, 4-wide and scalar state loads over one to several spans, conv widths
// 2 to 4, one to three groups, f32 and bf16 out, and many sequences.
struct MixerShapeCase {
  int64_t heads, headdim, d_state, groups, width;
  int seqs;
  DType out_dtype = DType::kF32;
  // MixerDecodeSumSquares (against CausalConv1d, SsmScan and GatedSumSquares per group) in
  // place of MixerDecode, with heads_per_group and first_head as SsmScanOptions takes them.
  bool sums = false;
  int64_t heads_per_group = 0, first_head = 0;
};

void ExpectMixerDecodeEqualsThreeOps(const MixerShapeCase& m) {
  const int64_t E = m.heads * m.headdim, C = E + 2 * m.groups * m.d_state;
  const int64_t row = E + C + m.heads;  // [z | xbc | dt]
  const int64_t state_rows = m.seqs + 1;
  SCOPED_TRACE(::testing::Message()
               << "h" << m.heads << " p" << m.headdim << " ds" << m.d_state << " g" << m.groups
               << " w" << m.width << " seqs " << m.seqs
               << (m.out_dtype == DType::kBF16 ? " bf16 out" : "") << (m.sums ? " sums" : "")
               << " hpg " << m.heads_per_group << " first " << m.first_head);
  std::mt19937_64 rng(SeedFromName(absl::StrCat("MixerDecodeInvariant", m.headdim, m.d_state)));
  RecurrentBatch batch;
  for (int s = 0; s < m.seqs; ++s) {
    if (s % 4 == 1) {
      batch.Add(1, static_cast<int32_t>(state_rows), true, 0);  // padding on the scratch row
    } else {
      batch.Add(1, s, s % 4 == 2, s % 4 == 2 ? 0 : 17 + s);
    }
  }
  const std::vector<uint8_t> fresh0 = batch.fresh;
  const int64_t rows = batch.num_seqs();
  const std::vector<float> packed = RandomFloats(rng, rows * row, -2.0f, 2.0f);
  const std::vector<float> conv_w = RandomFloats(rng, C * m.width);
  const std::vector<float> conv_b = RandomFloats(rng, C);
  const std::vector<float> a_log = RandomFloats(rng, m.heads, 0.0f, 2.5f);
  const std::vector<float> d = RandomFloats(rng, m.heads);
  const std::vector<float> dt_bias = RandomFloats(rng, m.heads, -4.0f, -1.0f);
  const std::vector<float> norm_w = RandomFloats(rng, E, 0.5f, 1.5f);
  const std::vector<float> conv0 = RandomFloats(rng, (state_rows + 1) * (m.width - 1) * C);
  const std::vector<float> ssm0 = RandomFloats(rng, (state_rows + 1) * E * m.d_state);
  ForEachAvailableBackend([&](Backend& be) {
    const Device dev = be.device();
    auto array = [&](const std::vector<float>& v, DType dtype = DType::kF32) {
      auto a = DeviceArray::FromFloats(be, v, dtype);
      EXPECT_TRUE(a.ok()) << a.status();
      return std::move(a).value();
    };
    DeviceArray d_packed = array(packed), d_conv_w = array(conv_w), d_conv_b = array(conv_b),
                d_a = array(a_log), d_d = array(d), d_bias = array(dt_bias),
                d_norm_w = array(norm_w);
    auto t = [&](const DeviceArray& a, std::initializer_list<int64_t> shape,
                 DType dtype = DType::kF32) { return Tensor(a.data(), dtype, shape, dev); };
    const Tensor in(d_packed.data(), DType::kF32, {rows, row}, dev);
    const Tensor z = in.Columns(0, E), xbc_in = in.Columns(E, C), dt = in.Columns(E + C, m.heads);
    const MixerWeights w{t(d_conv_w, {C, m.width}), t(d_conv_b, {C}), t(d_a, {m.heads}),
                         t(d_d, {m.heads}),         t(d_bias, {m.heads}), t(d_norm_w, {E})};
    SsmScanOptions options;
    options.chunk_size = 8;
    options.heads_per_group = m.heads_per_group;
    options.first_head_in_group = m.first_head;
    // Path 0: the fused op; path 1: the ops it stands for. Each with its own states and
    // outputs (out, or the gated y and the sums).
    std::vector<uint8_t> outs[2];
    std::vector<float> convs[2], ssms[2];
    for (int path = 0; path < 2; ++path) {
      DeviceArray conv = array(conv0), ssm = array(ssm0);
      DeviceArray xbc = array(std::vector<float>(rows * C)), y = array(std::vector<float>(rows * E));
      DeviceArray out = array(std::vector<float>(rows * E), m.out_dtype);
      const Tensor conv_t = t(conv, {state_rows + 1, m.width - 1, C});
      const Tensor ssm_t = t(ssm, {state_rows + 1, m.heads, m.headdim, m.d_state});
      const Tensor xbc_t = t(xbc, {rows, C}), y_t = t(y, {rows, E});
      const Tensor out_t = t(out, {rows, E}, m.out_dtype);
      // The sums as a view of columns [1, 1 + groups) of a wider buffer.
      DeviceArray sums = array(std::vector<float>(rows * (m.groups + 2), 7.0f));
      const Tensor sums_t = t(sums, {rows, m.groups + 2}).Columns(1, m.groups);
      batch.fresh = fresh0;
      for (int step = 0; step < 2; ++step) {
        if (path == 0 && m.sums) {
          const absl::Status fused = be.MixerDecodeSumSquares(xbc_in, dt, z, w, options, batch,
                                                              conv_t, ssm_t, xbc_t, y_t, sums_t);
          ASSERT_TRUE(fused.ok()) << fused;
        } else if (path == 0) {
          const absl::Status fused = be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, batch,
                                                    conv_t, ssm_t, xbc_t, y_t, out_t);
          ASSERT_TRUE(fused.ok()) << fused;
        } else {
          const int64_t gn = m.groups * m.d_state;
          ASSERT_TRUE(be.CausalConv1d(xbc_in, w.conv_weight, w.conv_bias, batch, conv_t, xbc_t).ok());
          ASSERT_TRUE(be.SsmScan(xbc_t.Columns(0, E), dt, w.a_log, xbc_t.Columns(E, gn),
                                 xbc_t.Columns(E + gn, gn), w.d, w.dt_bias, options, batch, ssm_t,
                                 y_t)
                          .ok());
          if (!m.sums) {
            ASSERT_TRUE(be.GatedRmsNorm(y_t, z, w.norm_weight, m.groups, 1e-5f, out_t).ok());
          }
          for (int64_t g = 0; g < m.groups && m.sums; ++g) {
            // Group g's heads here, counted out head by head: (first + h) / hpg == g.
            const int64_t hpg = m.heads_per_group > 0 ? m.heads_per_group : m.heads / m.groups;
            int64_t head_begin = -1, head_end = -1;
            for (int64_t h = 0; h < m.heads; ++h) {
              if ((m.first_head + h) / hpg != g) continue;
              if (head_begin < 0) head_begin = h;
              head_end = h + 1;
            }
            ASSERT_GE(head_begin, 0) << "group " << g << " has no head here";
            const int64_t begin = head_begin * m.headdim;
            const int64_t cols = (head_end - head_begin) * m.headdim;
            ASSERT_TRUE(be.GatedSumSquares(y_t.Columns(begin, cols), z.Columns(begin, cols), 1,
                                           y_t.Columns(begin, cols), sums_t.Columns(g, 1))
                            .ok());
          }
        }
        // The second step resumes every real sequence; padding stays on the scratch row.
        for (int s = 0; s < m.seqs; ++s) batch.fresh[s] = s % 4 == 1 ? 1 : 0;
      }
      auto o = out.Read();
      auto gated = y.Read();
      auto sum_bytes = sums.Read();
      auto c = conv.ReadFloats();
      auto st = ssm.ReadFloats();
      ASSERT_TRUE(o.ok() && gated.ok() && sum_bytes.ok() && c.ok() && st.ok());
      outs[path] = *o;
      if (m.sums) {
        outs[path] = *gated;
        outs[path].insert(outs[path].end(), sum_bytes->begin(), sum_bytes->end());
      }
      convs[path] = *c;
      ssms[path] = *st;
    }
    EXPECT_EQ(outs[0], outs[1]);
    EXPECT_EQ(convs[0], convs[1]);
    EXPECT_EQ(ssms[0], ssms[1]);
    EXPECT_NE(convs[0], conv0);  // the states moved
  });
}

TEST(MixerDecodeInvariantTest, EqualsItsThreeOpsBitForBit) {
  for (const MixerShapeCase& m : std::vector<MixerShapeCase>{
           {4, 24, 20, 2, 4, 4},                    // one partial tile, 4-wide loads
           {2, 40, 16, 1, 3, 3},                    // a partial second tile, width 3
           {6, 16, 18, 3, 3, 3},                    // scalar loads, three groups
           {2, 10, 70, 1, 4, 4},                    // scalar loads, several per lane
           {2, 8, 600, 2, 2, 2},                    // two spans, width 2
           {4, 64, 128, 1, 4, 5, DType::kBF16},     // mamba2's heads, bf16 out
           {2, 8, 16, 1, 4, 300}}) {                // 300 sequences' tickets
    ExpectMixerDecodeEqualsThreeOps(m);
  }
}

// MixerDecodeSumSquares is CausalConv1d, SsmScan and GatedSumSquares over each group's
// columns: the same gated y, sums (into a column view) and states, bit for bit. Heads that
// start inside a group (pieces of one and four heads; two and four, with partial tiles; a
// TP2 rank's second half of mamba2's group), heads that end inside one (the first half; 1 +
// 3 + 2 heads over three groups), whole groups, and many sequences.
TEST(MixerDecodeInvariantTest, SumSquaresEqualsItsOpsBitForBit) {
  for (MixerShapeCase m :
       std::vector<MixerShapeCase>{{5, 24, 20, 2, 4, 4, DType::kF32, true, 4, 3},
                                   {6, 40, 18, 2, 3, 3, DType::kF32, true, 4, 2},
                                   {4, 24, 20, 2, 4, 4, DType::kF32, true},
                                   {12, 64, 128, 1, 4, 5, DType::kF32, true, 24, 12},
                                   {12, 64, 128, 1, 4, 5, DType::kF32, true, 24, 0},
                                   {6, 16, 16, 3, 4, 4, DType::kF32, true, 3, 2},
                                   {3, 8, 16, 2, 4, 300, DType::kF32, true, 2, 1}}) {
    ExpectMixerDecodeEqualsThreeOps(m);
  }
}

// Refused, with what to run instead: a run of two tokens, heads starting inside a group, a
// wrong xbc width, and an output overlapping an input (the fused form reads its inputs
// after other blocks have written outputs).
TEST(MixerDecodeInvariantTest, RefusesWhatItDoesNotCompute) {
  constexpr int64_t kHeads = 4, kHeadDim = 24, kDState = 20, kGroups = 2, kWidth = 4;
  constexpr int64_t kE = kHeads * kHeadDim, kC = kE + 2 * kGroups * kDState, kStateRows = 5;
  constexpr int64_t kRows = 4, kRow = kE + kC + kHeads;
  std::mt19937_64 rng(SeedFromName("MixerDecodeRefusals"));
  ForEachAvailableBackend([&](Backend& be) {
    const Device dev = be.device();
    auto array = [&](size_t n) {
      auto a = DeviceArray::FromFloats(be, RandomFloats(rng, n));
      EXPECT_TRUE(a.ok()) << a.status();
      return std::move(a).value();
    };
    DeviceArray d_packed = array(kRows * kRow), d_conv_w = array(kC * kWidth),
                d_conv_b = array(kC), d_a = array(kHeads), d_d = array(kHeads),
                d_bias = array(kHeads), d_norm_w = array(kE);
    DeviceArray conv = array((kStateRows + 1) * (kWidth - 1) * kC);
    DeviceArray ssm = array((kStateRows + 1) * kE * kDState);
    DeviceArray xbc = array(kRows * kC), y = array(kRows * kC), out = array(kRows * kE);
    auto t = [&](const DeviceArray& a, std::initializer_list<int64_t> shape) {
      return Tensor(a.data(), DType::kF32, shape, dev);
    };
    const Tensor in = t(d_packed, {kRows, kRow});
    const Tensor z = in.Columns(0, kE), xbc_in = in.Columns(kE, kC),
                 dt = in.Columns(kE + kC, kHeads);
    const MixerWeights w{t(d_conv_w, {kC, kWidth}), t(d_conv_b, {kC}), t(d_a, {kHeads}),
                         t(d_d, {kHeads}),          t(d_bias, {kHeads}), t(d_norm_w, {kE})};
    const Tensor conv_t = t(conv, {kStateRows + 1, kWidth - 1, kC});
    const Tensor ssm_t = t(ssm, {kStateRows + 1, kHeads, kHeadDim, kDState});
    const Tensor xbc_t = t(xbc, {kRows, kC}), y_t = t(y, {kRows, kE}), out_t = t(out, {kRows, kE});
    RecurrentBatch decode;
    for (int s = 0; s < kRows; ++s) decode.Add(1, s, false, 9);
    SsmScanOptions options;
    ASSERT_TRUE(
        be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, decode, conv_t, ssm_t, xbc_t, y_t, out_t)
            .ok());
    ASSERT_TRUE(
        be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, decode, conv_t, ssm_t, xbc_t, y_t, y_t)
            .ok())
        << "out may alias y";

    RecurrentBatch prefill;
    prefill.Add(2, 0, true, 0);
    prefill.Add(1, 1, false, 3);
    prefill.Add(1, 2, false, 3);
    const absl::Status long_run =
        be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, prefill, conv_t, ssm_t, xbc_t, y_t, out_t);
    EXPECT_TRUE(absl::IsInvalidArgument(long_run)) << long_run;
    EXPECT_NE(long_run.message().find("runs 2 tokens"), std::string::npos) << long_run;

    SsmScanOptions split = options;
    split.heads_per_group = 2;
    split.first_head_in_group = 1;
    const absl::Status partial =
        be.MixerDecode(xbc_in, dt, z, w, split, 1e-5f, decode, conv_t, ssm_t, xbc_t, y_t, out_t);
    EXPECT_TRUE(absl::IsInvalidArgument(partial)) << partial;
    EXPECT_NE(partial.message().find("MixerDecodeSumSquares"), std::string::npos) << partial;

    // MixerDecodeSumSquares: sums of one column per group, apart from the other outputs, and
    // decode runs only.
    DeviceArray sums = array(kRows * kGroups);
    const Tensor sums_t = t(sums, {kRows, kGroups});
    const MixerWeights no_norm{w.conv_weight, w.conv_bias, w.a_log, w.d, w.dt_bias, Tensor()};
    SsmScanOptions across = options;  // 4 heads from head 2 of a group of 4: two groups
    across.heads_per_group = 4;
    across.first_head_in_group = 2;
    EXPECT_TRUE(be.MixerDecodeSumSquares(xbc_in, dt, z, no_norm, across, decode, conv_t, ssm_t,
                                         xbc_t, y_t, sums_t)
                    .ok());
    const absl::Status narrow = be.MixerDecodeSumSquares(
        xbc_in, dt, z, no_norm, across, decode, conv_t, ssm_t, xbc_t, y_t, sums_t.Columns(0, 1));
    EXPECT_TRUE(absl::IsInvalidArgument(narrow)) << narrow;
    EXPECT_NE(narrow.message().find("B/C groups"), std::string::npos) << narrow;
    const absl::Status sums_on_y = be.MixerDecodeSumSquares(
        xbc_in, dt, z, no_norm, across, decode, conv_t, ssm_t, xbc_t, y_t, t(y, {kRows, kGroups}));
    EXPECT_TRUE(absl::IsInvalidArgument(sums_on_y)) << sums_on_y;
    EXPECT_NE(sums_on_y.message().find("overlaps"), std::string::npos) << sums_on_y;
    // sumsq over xbc, the input rows (a view of z's columns, whose span meets xbc_in's, the
    // first input checked) and the ssm state; bf16 sums.
    const std::pair<const char*, Tensor> misplaced[] = {
        {"xbc", t(xbc, {kRows, kGroups})},
        {"xbc_in", Tensor(d_packed.data(), DType::kF32, {kRows, kGroups}, {kRow, 1}, dev)},
        {"ssm_state", t(ssm, {kRows, kGroups})}};
    for (const auto& [name, where] : misplaced) {
      const absl::Status over = be.MixerDecodeSumSquares(xbc_in, dt, z, no_norm, across, decode,
                                                         conv_t, ssm_t, xbc_t, y_t, where);
      EXPECT_TRUE(absl::IsInvalidArgument(over)) << name << ": " << over;
      EXPECT_NE(over.message().find(absl::StrCat("sumsq overlaps ", name)), std::string::npos)
          << over;
    }
    DeviceArray sums16 = array(kRows * kGroups);
    const absl::Status bf16_sums =
        be.MixerDecodeSumSquares(xbc_in, dt, z, no_norm, across, decode, conv_t, ssm_t, xbc_t, y_t,
                                 Tensor(sums16.data(), DType::kBF16, {kRows, kGroups}, dev));
    EXPECT_TRUE(absl::IsInvalidArgument(bf16_sums)) << bf16_sums;
    EXPECT_NE(bf16_sums.message().find("sumsq"), std::string::npos) << bf16_sums;
    const absl::Status sums_prefill = be.MixerDecodeSumSquares(
        xbc_in, dt, z, no_norm, across, prefill, conv_t, ssm_t, xbc_t, y_t, sums_t);
    EXPECT_TRUE(absl::IsInvalidArgument(sums_prefill)) << sums_prefill;
    EXPECT_NE(sums_prefill.message().find("runs 2 tokens"), std::string::npos) << sums_prefill;

    const absl::Status width = be.MixerDecode(
        in.Columns(kE, kC - 1), dt, z,
        MixerWeights{t(d_conv_w, {kC - 1, kWidth}), t(d_conv_b, {kC - 1}), w.a_log, w.d,
                     w.dt_bias, w.norm_weight},
        options, 1e-5f, decode, t(conv, {kStateRows + 1, kWidth - 1, kC - 1}), ssm_t,
        t(xbc, {kRows, kC - 1}), y_t, out_t);
    EXPECT_TRUE(absl::IsInvalidArgument(width)) << width;
    EXPECT_NE(width.message().find("2 * ngroups * d_state"), std::string::npos) << width;

    // out over z's columns, y over the input rows, xbc over y.
    const absl::Status out_on_z = be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, decode,
                                                 conv_t, ssm_t, xbc_t, y_t, in.Columns(0, kE));
    EXPECT_TRUE(absl::IsInvalidArgument(out_on_z)) << out_on_z;
    EXPECT_NE(out_on_z.message().find("overlaps"), std::string::npos) << out_on_z;
    const absl::Status y_on_in = be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, decode,
                                                conv_t, ssm_t, xbc_t, in.Columns(kE, kE), out_t);
    EXPECT_TRUE(absl::IsInvalidArgument(y_on_in)) << y_on_in;
    const absl::Status xbc_on_y = be.MixerDecode(xbc_in, dt, z, w, options, 1e-5f, decode, conv_t,
                                                 ssm_t, t(y, {kRows, kC}), y_t, out_t);
    EXPECT_TRUE(absl::IsInvalidArgument(xbc_on_y)) << xbc_on_y;
  });
}

}  // namespace
}  // namespace coil::testing
