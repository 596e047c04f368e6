// The fused CUDA mixer decode's block body (mixer_decode_block.h), run on the host over the
// kernel's whole grid with MixerHostExec, blocks in a shuffled order, against the CPU
// reference mode's CausalConv1d, SsmScan and GatedRmsNorm (MixerDecode), or CausalConv1d,
// SsmScan and GatedSumSquares per group (MixerDecodeSumSquares, heads starting inside a
// group). Checks the block-to-(sequence, head, tile) mapping, partial tiles, the B/C channels
// each group reads, the tickets (the last block of a group, whichever it is, shifts the
// shared histories and normalises the group or writes its sums; a group's blocks are those of
// its heads here; every ticket is back at zero afterwards), fresh sequences and padding on
// the scratch row. Runs without a GPU.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/mixer_decode_block.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::cuda {
namespace {

struct Case {
  int32_t heads, headdim, d_state, groups, width;
  int vec, steps;              // the decode lanes' shape (ssm_scan_kernels.cuh picks it)
  std::vector<int32_t> runs;   // 1: a decode token; 0: a padding entry on the scratch row
  int32_t state_rows;
  // MixerDecodeSumSquares when > 0: heads_per_group and the first head's place in its group.
  int32_t heads_per_group = 0, first_head = 0;
  DType state_dtype = DType::kF32;  // the SSM state pool's type
};

std::string CaseName(const Case& c) {
  return absl::StrCat("h", c.heads, "_p", c.headdim, "_ds", c.d_state, "_g", c.groups, "_w",
                      c.width, "_v", c.vec, "s", c.steps, "_n", c.runs.size(),
                      c.heads_per_group > 0
                          ? absl::StrCat("_sums_hpg", c.heads_per_group, "_first", c.first_head)
                          : "",
                      c.state_dtype == DType::kBF16 ? "_statebf16" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

class MixerEmulationTest : public ::testing::TestWithParam<Case> {};

template <int kVec, int kSteps, typename StateT>
void RunGridOf(const MixerDecodeParams& p, const std::vector<int64_t>& order,
               std::vector<float>& out) {
  std::vector<float> shared(static_cast<size_t>(MixerSmemFloats(p.scan.d_state)));
  MixerHostExec ex;
  for (int64_t block : order) {
    std::fill(shared.begin(), shared.end(), std::nanf(""));  // no state between blocks
    const MixerSmem sm = MixerSmemAt(shared.data(), p.scan.d_state);
    MixerDecodeBlock<kVec, kSteps, StateT>(
        ex, sm, p, block, [&out](int64_t at, float v) { out[static_cast<size_t>(at)] = v; });
  }
}

template <int kVec, int kSteps>
void RunGrid(const MixerDecodeParams& p, const std::vector<int64_t>& order,
             std::vector<float>& out) {
  if (p.scan.state_bf16) {
    RunGridOf<kVec, kSteps, uint16_t>(p, order, out);
  } else {
    RunGridOf<kVec, kSteps, float>(p, order, out);
  }
}

TEST_P(MixerEmulationTest, MatchesTheThreeOps) {
  const Case& c = GetParam();
  std::mt19937_64 rng(::coil::testing::SeedFromName(CaseName(c)));
  RecurrentBatch batch;
  const std::vector<int32_t> slots =
      ::coil::testing::ShuffledSlots(rng, static_cast<int>(c.runs.size()), c.state_rows);
  for (size_t s = 0; s < c.runs.size(); ++s) {
    if (c.runs[s] == 0) {
      batch.Add(1, c.state_rows, true);
    } else {
      batch.Add(1, slots[s], s % 3 == 1, 7);
    }
  }
  const int64_t rows = batch.num_seqs();
  const int64_t E = static_cast<int64_t>(c.heads) * c.headdim;
  const int64_t C = E + 2 * static_cast<int64_t>(c.groups) * c.d_state;
  const int64_t row_width = E + C + c.heads + 3;  // [z | xbc | dt | padding]
  const std::vector<float> packed = ::coil::testing::RandomFloats(rng, rows * row_width, -2.0f, 2.0f);
  std::vector<float> conv_w = ::coil::testing::RandomFloats(rng, C * c.width);
  std::vector<float> conv_b = ::coil::testing::RandomFloats(rng, C);
  std::vector<float> a_log = ::coil::testing::RandomFloats(rng, c.heads, 0.0f, 2.5f);
  std::vector<float> d = ::coil::testing::RandomFloats(rng, c.heads);
  std::vector<float> dt_bias = ::coil::testing::RandomFloats(rng, c.heads, -4.0f, -1.0f);
  std::vector<float> norm_w = ::coil::testing::RandomFloats(rng, E, 0.5f, 1.5f);
  const std::vector<float> conv0 =
      ::coil::testing::RandomFloats(rng, (c.state_rows + 1) * (c.width - 1) * C);
  // A bf16 pool starts from values it can hold.
  const std::vector<float> ssm0 = ::coil::testing::Decode(
      ::coil::testing::Encode(
          ::coil::testing::RandomFloats(rng, (c.state_rows + 1) * E * c.d_state), c.state_dtype),
      c.state_dtype);

  // The reference: the CPU reference mode's ops (MixerDecode's and MixerDecodeSumSquares's
  // default).
  const bool sums = c.heads_per_group > 0;
  auto reference = CreateBackend(BackendKind::kCpu, {.threads = 1, .use_reference = true});
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<float> in = packed, want_conv = conv0;
  std::vector<uint8_t> want_ssm_bytes = ::coil::testing::Encode(ssm0, c.state_dtype);
  std::vector<float> xbc(rows * C), y(rows * E), want_out(rows * E), want_sums(rows * c.groups);
  const Tensor in_t(in.data(), DType::kF32, {rows, row_width});
  const MixerWeights w{Tensor(conv_w.data(), DType::kF32, {C, c.width}),
                       Tensor(conv_b.data(), DType::kF32, {C}),
                       Tensor(a_log.data(), DType::kF32, {c.heads}),
                       Tensor(d.data(), DType::kF32, {c.heads}),
                       Tensor(dt_bias.data(), DType::kF32, {c.heads}),
                       Tensor(norm_w.data(), DType::kF32, {E})};
  SsmScanOptions options;
  options.heads_per_group = c.heads_per_group;
  options.first_head_in_group = c.first_head;
  const Tensor want_conv_t(want_conv.data(), DType::kF32, {c.state_rows + 1, c.width - 1, C});
  const Tensor want_ssm_t(want_ssm_bytes.data(), c.state_dtype,
                          {c.state_rows + 1, c.heads, c.headdim, c.d_state});
  if (sums) {
    const absl::Status done =
        (*reference)
            ->MixerDecodeSumSquares(in_t.Columns(E, C), in_t.Columns(E + C, c.heads),
                                    in_t.Columns(0, E), w, options, batch, want_conv_t, want_ssm_t,
                                    Tensor(xbc.data(), DType::kF32, {rows, C}),
                                    Tensor(want_out.data(), DType::kF32, {rows, E}),
                                    Tensor(want_sums.data(), DType::kF32, {rows, c.groups}));
    ASSERT_TRUE(done.ok()) << done;
  } else {
    const absl::Status done =
        (*reference)
            ->MixerDecode(in_t.Columns(E, C), in_t.Columns(E + C, c.heads), in_t.Columns(0, E), w,
                          options, 1e-5f, batch, want_conv_t, want_ssm_t,
                          Tensor(xbc.data(), DType::kF32, {rows, C}),
                          Tensor(y.data(), DType::kF32, {rows, E}),
                          Tensor(want_out.data(), DType::kF32, {rows, E}));
    ASSERT_TRUE(done.ok()) << done;
  }

  const std::vector<float> want_ssm = ::coil::testing::Decode(want_ssm_bytes, c.state_dtype);

  // The emulated kernel, as LaunchMixerDecode fills its parameters.
  std::vector<float> got_conv = conv0, got_y(rows * E, std::nanf(""));
  std::vector<uint8_t> got_ssm_bytes = ::coil::testing::Encode(ssm0, c.state_dtype);
  std::vector<float> got_out(rows * E, std::nanf(""));
  // The sums as columns [1, 1 + groups) of a wider buffer, whose other columns must stay.
  const int64_t sums_stride = c.groups + 2;
  std::vector<float> got_sums(rows * sums_stride, 9.0f);
  std::vector<int32_t> tickets(rows * c.groups, 0);
  MixerDecodeParams p{};
  p.conv.x = packed.data() + E;
  p.conv.weight = conv_w.data();
  p.conv.bias = conv_b.data();
  p.conv.state = got_conv.data();
  p.conv.x_stride = row_width;
  p.conv.cu_seqlens = batch.cu_seqlens.data();
  p.conv.slots = batch.slots.data();
  p.conv.fresh = batch.fresh.data();
  p.conv.num_seqs = batch.num_seqs();
  p.conv.rows = static_cast<int32_t>(rows);
  p.conv.channels = static_cast<int32_t>(C);
  p.conv.width = c.width;
  p.conv.state_rows = c.state_rows;
  SsmScanParams& s = p.scan;
  s.dt = packed.data() + E + C;
  s.a_log = a_log.data();
  s.d = d.data();
  s.dt_bias = dt_bias.data();
  s.state = got_ssm_bytes.data();
  s.state_bf16 = c.state_dtype == DType::kBF16;
  s.y = got_y.data();
  s.dt_stride = row_width;
  s.y_stride = E;
  s.cu_seqlens = batch.cu_seqlens.data();
  s.slots = batch.slots.data();
  s.fresh = batch.fresh.data();
  s.start_positions = batch.start_positions.data();
  s.num_seqs = batch.num_seqs();
  s.rows = static_cast<int32_t>(rows);
  s.heads = c.heads;
  s.headdim = c.headdim;
  s.d_state = c.d_state;
  s.groups = c.groups;
  s.heads_per_group = sums ? c.heads_per_group : c.heads / c.groups;  // as SsmScanParamsFor
  s.first_head = sums ? c.first_head : 0;
  s.state_rows = c.state_rows;
  s.dt_min = 0.0f;
  s.dt_max = std::numeric_limits<float>::infinity();
  p.z = packed.data();
  p.z_stride = row_width;
  p.norm_weight = norm_w.data();
  p.norm_eps = 1e-5f;
  p.out_stride = E;
  if (sums) {
    p.sumsq = got_sums.data() + 1;
    p.sumsq_stride = sums_stride;
  }
  p.tickets = tickets.data();
  p.p_tiles = (c.headdim + kMixerRows - 1) / kMixerRows;

  std::vector<int64_t> order(static_cast<size_t>(rows * c.heads * p.p_tiles));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  ASSERT_TRUE((c.vec == 1 || c.vec == 4) && (c.steps == 1 || c.steps == 4)) << "no such lane shape";
  auto run_grid = [&](const MixerDecodeParams& q, std::vector<float>& out) {
    if (c.vec == 4 && c.steps == 1) {
      RunGrid<4, 1>(q, order, out);
    } else if (c.vec == 4 && c.steps == 4) {
      RunGrid<4, 4>(q, order, out);
    } else if (c.vec == 1 && c.steps == 1) {
      RunGrid<1, 1>(q, order, out);
    } else {
      RunGrid<1, 4>(q, order, out);
    }
  };
  run_grid(p, got_out);

  if (sums) {  // the gated values over y, the sums in their columns, the others as they were
    EXPECT_LE(::coil::testing::Nmse(got_y, want_out), 1e-9);
    std::vector<float> sums_view(rows * c.groups);
    for (int64_t t = 0; t < rows; ++t) {
      for (int32_t g = 0; g < c.groups; ++g) {
        sums_view[t * c.groups + g] = got_sums[t * sums_stride + 1 + g];
      }
      EXPECT_EQ(got_sums[t * sums_stride], 9.0f) << "row " << t;
      EXPECT_EQ(got_sums[t * sums_stride + c.groups + 1], 9.0f) << "row " << t;
    }
    EXPECT_LE(::coil::testing::Nmse(sums_view, want_sums), 1e-9);

    // And bit for bit what GatedSumSquaresKernel makes of each group's columns (a view from
    // the group's first column, 256 threads, BlockSum) from the same grid's y, which the
    // normalising form leaves in y: the sums form must sum as the unfused kernel does.
    std::vector<float> raw_conv = conv0, raw_y(rows * E, std::nanf(""));
    std::vector<uint8_t> raw_ssm = ::coil::testing::Encode(ssm0, c.state_dtype);
    std::vector<float> raw_out(rows * E, std::nanf(""));
    MixerDecodeParams q = p;
    q.conv.state = raw_conv.data();
    q.scan.state = raw_ssm.data();
    q.scan.y = raw_y.data();
    q.sumsq = nullptr;
    run_grid(q, raw_out);
    ASSERT_EQ(raw_conv, got_conv);
    ASSERT_EQ(raw_ssm, got_ssm_bytes);
    MixerHostExec ex;
    for (int64_t t = 0; t < rows; ++t) {
      const float* zr = packed.data() + t * row_width;
      for (int32_t g = 0; g < c.groups; ++g) {
        int32_t head_begin = -1, head_end = -1;  // counted out: (first + h) / hpg == g
        for (int32_t h = 0; h < c.heads; ++h) {
          if ((c.first_head + h) / c.heads_per_group != g) continue;
          if (head_begin < 0) head_begin = h;
          head_end = h + 1;
        }
        const int64_t begin = static_cast<int64_t>(head_begin) * c.headdim;
        const int64_t width = static_cast<int64_t>(head_end - head_begin) * c.headdim;
        std::vector<float> gated(static_cast<size_t>(width));
        MixerHostExec::PerThread<float> part;
        for (int tid = 0; tid < kMixerThreads; ++tid) {
          part(tid) =
              GatedPartialSumSquares([&](int64_t i) { return raw_y[t * E + begin + i]; },
                                     zr + begin, gated.data(), 0, width, tid, kMixerThreads);
        }
        const float want = ex.BlockSum(part, nullptr);
        EXPECT_EQ(std::bit_cast<uint32_t>(got_sums[t * sums_stride + 1 + g]),
                  std::bit_cast<uint32_t>(want))
            << "row " << t << " group " << g;
        EXPECT_EQ(0, std::memcmp(got_y.data() + t * E + begin, gated.data(), width * 4))
            << "row " << t << " group " << g << ": gated values";
      }
    }
    EXPECT_TRUE(std::all_of(got_out.begin(), got_out.end(), [](float v) { return std::isnan(v); }))
        << "out was written in the sums form";
  } else {
    EXPECT_LE(::coil::testing::Nmse(got_out, want_out), 1e-9);
    // And bit for bit what GatedRmsNormKernel makes of the y this grid left (256 threads,
    // the group's columns from its first, BlockSum, then the scale per column).
    MixerHostExec ex;
    const int64_t width = E / c.groups;
    for (int64_t t = 0; t < rows; ++t) {
      const float* zr = packed.data() + t * row_width;
      const float* yr = got_y.data() + t * E;
      for (int32_t g = 0; g < c.groups; ++g) {
        const int64_t begin = g * width;
        MixerHostExec::PerThread<float> part;
        for (int tid = 0; tid < kMixerThreads; ++tid) {
          part(tid) = GatedPartialSumSquares([&](int64_t i) { return yr[i]; }, zr, nullptr, begin,
                                             width, tid, kMixerThreads);
        }
        const float scale =
            GatedNormScale(ex.BlockSum(part, nullptr), static_cast<float>(width), p.norm_eps);
        for (int64_t i = begin; i < begin + width; ++i) {
          const float want = yr[i] * GatedSilu(zr[i]) * scale * norm_w[i];
          ASSERT_EQ(std::bit_cast<uint32_t>(got_out[t * E + i]), std::bit_cast<uint32_t>(want))
              << "row " << t << " column " << i;
        }
      }
    }
  }
  EXPECT_EQ(tickets, std::vector<int32_t>(tickets.size(), 0)) << "a ticket was left taken";
  // The states: the slots the batch uses like the reference, every other row (the scratch
  // row too) bit for bit as it was.
  // A bf16 state rounded from fp32 values that differ in their last bits can land one bf16
  // step apart (the reference sums in another order): bound 1e-5 there.
  auto check_rows = [&](const char* name, const std::vector<float>& got,
                        const std::vector<float>& want, const std::vector<float>& initial,
                        int64_t row_floats, double bound) {
    for (int32_t row = 0; row <= c.state_rows; ++row) {
      const bool used = row != c.state_rows &&
                        std::find(batch.slots.begin(), batch.slots.end(), row) != batch.slots.end();
      const std::vector<float> a(got.begin() + row * row_floats, got.begin() + (row + 1) * row_floats);
      if (used) {
        const std::vector<float> b(want.begin() + row * row_floats,
                                   want.begin() + (row + 1) * row_floats);
        EXPECT_LE(::coil::testing::Nmse(a, b), bound) << name << " slot " << row;
      } else {
        EXPECT_EQ(0, std::memcmp(a.data(), initial.data() + row * row_floats,
                                 row_floats * sizeof(float)))
            << name << " slot " << row << " is not in the batch but changed";
      }
    }
  };
  check_rows("conv_state", got_conv, want_conv, conv0, (c.width - 1) * C, 1e-9);
  check_rows("ssm_state", ::coil::testing::Decode(got_ssm_bytes, c.state_dtype), want_ssm, ssm0,
             E * c.d_state, c.state_dtype == DType::kBF16 ? 1e-5 : 1e-9);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MixerEmulationTest,
    ::testing::Values(
        // A partial tile (24 of 32 rows), two groups, padding twice.
        Case{4, 24, 20, 2, 4, 4, 1, {1, 1, 0, 1, 0, 1}, 6},
        // A partial second tile (40 = 32 + 8).
        Case{2, 40, 16, 1, 3, 4, 1, {1, 0, 1}, 3},
        // Scalar loads, three groups of two heads, width 3.
        Case{6, 16, 18, 3, 3, 1, 1, {1, 1, 1}, 4},
        // Scalar loads over several per lane; one group; headdim below one tile.
        Case{2, 10, 70, 1, 4, 1, 4, {1, 0, 1, 1}, 5},
        // Two spans of 512 columns; width 2 (a history of one entry).
        Case{2, 8, 600, 2, 2, 4, 4, {1, 1}, 3},
        // mamba2's head shape: 4 tiles per head, one group; many sequences.
        Case{4, 64, 128, 1, 4, 4, 1, {1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1}, 12},
        // The same with a bf16 state, and a bf16 state with scalar loads over several spans.
        Case{4, 64, 128, 1, 4, 4, 1, {1, 1, 0, 1, 1, 1, 0, 1}, 9, 0, 0, DType::kBF16},
        Case{2, 10, 70, 1, 4, 1, 4, {1, 0, 1, 1}, 5, 0, 0, DType::kBF16},
        // The sums form: one head of the first group then four of the second, partial tiles.
        Case{5, 24, 20, 2, 4, 4, 1, {1, 1, 0, 1, 0, 1}, 6, 4, 3},
        // Whole groups (two of two heads) in the sums form.
        Case{4, 24, 20, 2, 4, 4, 1, {1, 0, 1, 1}, 5, 2, 0},
        // Two heads then four, a partial second tile, scalar loads.
        Case{6, 40, 18, 2, 3, 1, 1, {1, 0, 1}, 3, 4, 2},
        // Three groups, the middle one whole: 1 + 3 + 2 heads.
        Case{6, 16, 16, 3, 4, 4, 4, {1, 1, 1, 0}, 4, 3, 2},
        // Each TP2 rank's half of mamba2's one group (heads 12 to 23 of 24, then 0 to 11).
        Case{12, 64, 128, 1, 4, 4, 1, {1, 0, 1, 1}, 5, 24, 12},
        Case{12, 64, 128, 1, 4, 4, 1, {1, 1, 0}, 4, 24, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

}  // namespace
}  // namespace coil::cuda
