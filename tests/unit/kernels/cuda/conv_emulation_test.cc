// The CUDA causal conv1d's thread bodies (causal_conv1d_math.h), run on the host in the
// kernels' launch order (decode: one pass; otherwise every output, then every history)
// against the CPU backend's reference mode. Checks the in-place history updates for runs
// shorter than the history, fresh sequences and padding on the scratch row; the launch
// geometry itself is GPU-only. Runs without a GPU.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/causal_conv1d_math.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::cuda {
namespace {

struct Case {
  int32_t channels, width;
  std::vector<int32_t> runs;  // 0: a padding entry (one token on the scratch row)
  int state_rows;
};

std::string CaseName(const Case& c) {
  std::string runs;
  for (int32_t r : c.runs) absl::StrAppend(&runs, runs.empty() ? "" : "_", r);
  return absl::StrCat("c", c.channels, "_w", c.width, "_runs", runs);
}

class ConvEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConvEmulationTest, MatchesTheReference) {
  const Case& c = GetParam();
  std::mt19937_64 rng(::coil::testing::SeedFromName(CaseName(c)));
  RecurrentBatch batch;
  const std::vector<int32_t> slots =
      ::coil::testing::ShuffledSlots(rng, static_cast<int>(c.runs.size()), c.state_rows);
  bool decode = true;
  for (size_t s = 0; s < c.runs.size(); ++s) {
    if (c.runs[s] == 0) {
      batch.Add(1, c.state_rows, s % 2 == 0);
    } else {
      batch.Add(c.runs[s], slots[s], s % 3 == 1);
    }
    decode = decode && batch.run_length(static_cast<int>(s)) == 1;
  }
  const int64_t rows = batch.cu_seqlens.back(), C = c.channels, W = c.width;
  const int64_t x_stride = C + 5;  // a column slice of a wider matrix
  const std::vector<float> x = ::coil::testing::RandomFloats(rng, rows * x_stride, -2.0f, 2.0f);
  std::vector<float> weight = ::coil::testing::RandomFloats(rng, C * W);
  std::vector<float> bias = ::coil::testing::RandomFloats(rng, C);
  const std::vector<float> initial =
      ::coil::testing::RandomFloats(rng, (c.state_rows + 1) * (W - 1) * C);

  auto reference = CreateBackend(BackendKind::kCpu, {.threads = 1, .use_reference = true});
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<float> want_state = initial, want_out(rows * C, 0.0f);
  std::vector<float> x_copy = x;
  const Tensor x_wide(x_copy.data(), DType::kF32, {rows, x_stride});
  ASSERT_TRUE(
      (*reference)
          ->CausalConv1d(x_wide.Columns(2, C), Tensor(weight.data(), DType::kF32, {C, W}),
                         Tensor(bias.data(), DType::kF32, {C}), batch,
                         Tensor(want_state.data(), DType::kF32, {c.state_rows + 1, W - 1, C}),
                         Tensor(want_out.data(), DType::kF32, {rows, C}))
          .ok());

  std::vector<float> got_state = initial, got_out(rows * C, std::nanf(""));
  ConvParams p{};
  p.x = x.data() + 2;
  p.x_stride = x_stride;
  p.weight = weight.data();
  p.bias = bias.data();
  p.state = got_state.data();
  p.out = got_out.data();
  p.out_stride = C;
  p.cu_seqlens = batch.cu_seqlens.data();
  p.slots = batch.slots.data();
  p.fresh = batch.fresh.data();
  p.num_seqs = batch.num_seqs();
  p.rows = static_cast<int32_t>(rows);
  p.channels = c.channels;
  p.width = c.width;
  p.state_rows = c.state_rows;
  if (decode) {
    for (int32_t s = 0; s < p.num_seqs; ++s) {
      for (int32_t ch = 0; ch < p.channels; ++ch) ConvDecode(p, s, ch);
    }
  } else {
    for (int32_t s = 0; s < p.num_seqs; ++s) {
      for (int32_t r = batch.run_begin(s); r < batch.cu_seqlens[s + 1]; ++r) {
        for (int32_t ch = 0; ch < p.channels; ++ch) ConvOutput(p, s, r, ch);
      }
    }
    for (int32_t s = 0; s < p.num_seqs; ++s) {
      for (int32_t ch = 0; ch < p.channels; ++ch) ConvNewHistory(p, s, ch);
    }
  }
  EXPECT_LE(::coil::testing::Nmse(got_out, want_out), 1e-7);
  // The histories: the slots the batch uses like the reference, every other row (the
  // scratch row too) bit for bit as it was.
  const int64_t row_floats = (W - 1) * C;
  for (int row = 0; row <= c.state_rows; ++row) {
    const float* got = got_state.data() + row * row_floats;
    bool used = false;
    for (int s = 0; s < batch.num_seqs(); ++s) used |= batch.slots[s] == row && row != c.state_rows;
    if (used) {
      const std::vector<float> a(got, got + row_floats),
          b(want_state.begin() + row * row_floats, want_state.begin() + (row + 1) * row_floats);
      EXPECT_LE(::coil::testing::Nmse(a, b), 1e-7) << "slot " << row;
    } else {
      EXPECT_EQ(0, std::memcmp(got, initial.data() + row * row_floats, row_floats * sizeof(float)))
          << "slot " << row << " is not in the batch but changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvEmulationTest,
    ::testing::Values(Case{17, 4, {1, 2, 7, 1, 3000}, 6},  // runs shorter than the history
                      Case{33, 5, {2, 1, 3, 0, 4}, 5},
                      Case{9, 2, {3, 1}, 2},               // a history of one entry
                      Case{40, 4, {1, 0, 1, 0, 0, 1}, 6},  // decode, scratch thrice
                      Case{24, 2, {1, 1, 0}, 3}),          // decode, width 2
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

}  // namespace
}  // namespace coil::cuda
