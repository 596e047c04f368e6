// The CUDA chunked scan's algorithm, emulated on the host: the four phases in plain loops
// over the same chunk list, scratch layout and per-element formulas (ssm_scan_math.h) that
// the kernels use, against the CPU backend's reference mode (the token-by-token
// recurrence). What this cannot check is GPU-only: the 64x64 tiling, the warp scans, the
// device-built chunk list (tested equal to the host's by construction: ssd_chunks_test),
// and the decode kernel. Runs without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/ssd_chunks.h"
#include "kernels/cuda/ssm_scan_math.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::cuda {
namespace {

struct Shape {
  int32_t heads, headdim, d_state, groups;
  int64_t chunk;
  int32_t heads_per_group = 0, first_head = 0;
};

// The phases as the kernels order them, with fp32 accumulation; writes y rows and slots of
// the runs of two or more tokens only (the decode kernel's runs are left alone).
void EmulateChunkedScan(const SsmScanParams& p, const RecurrentBatch& batch, int64_t chunk) {
  const SsdChunkPlan plan = BuildSsdChunkPlan(batch, chunk, p.groups);
  const SsdScratchLayout layout = LayoutSsdScratch(plan, p);
  std::vector<double> memory(layout.total / sizeof(double) + 1);
  const SsdScratch w = SsdScratchAt(memory.data(), layout);
  std::memcpy(w.chunks, plan.chunks.data(), plan.chunks.size() * sizeof(SsdChunk));
  std::memcpy(w.seq_first_chunk, plan.seq_first_chunk.data(),
              plan.seq_first_chunk.size() * sizeof(int32_t));
  const int64_t chunks = static_cast<int64_t>(plan.chunks.size());
  const int32_t P = p.headdim, N = p.d_state;
  // Phase 1: dt' and the cumulative sums.
  for (int64_t k = 0; k < chunks; ++k) {
    const SsdChunk ch = w.chunks[k];
    for (int32_t head = 0; head < p.heads; ++head) {
      const float a = SsmA(p, head);
      const int64_t base = SsdRowIndex(p, head, ch.row0);
      double cum = 0.0;
      for (int32_t t = 0; t < ch.length; ++t) {
        const float v = SsmDt(p, int64_t{ch.row0} + t, head);
        cum += static_cast<double>(a * v);
        w.dtv[base + t] = v;
        w.cum[base + t] = cum;
      }
    }
  }
  // Phase 2: C B^T (lower triangle) and each chunk's own state.
  for (int64_t k = 0; k < chunks; ++k) {
    const SsdChunk ch = w.chunks[k];
    for (int32_t g = 0; g < p.groups; ++g) {
      for (int32_t t = 0; t < ch.length; ++t) {
        for (int32_t s = 0; s <= t; ++s) {
          float acc = 0.0f;
          for (int32_t n = 0; n < N; ++n) acc += SsdC(p, ch, g, t, n) * SsdB(p, ch, g, s, n);
          SsdCbBlock(w, ch, g)[int64_t{t} * ch.length + s] = acc;
        }
      }
    }
    for (int32_t head = 0; head < p.heads; ++head) {
      const int32_t g = SsmGroupOf(p, head);
      float* own = SsdChunkState(p, w, k, head);
      for (int32_t row = 0; row < P; ++row) {
        for (int32_t n = 0; n < N; ++n) {
          float acc = 0.0f;
          for (int32_t s = 0; s < ch.length; ++s) {
            acc += SsdStateX(p, w, ch, head, s, row) * SsdB(p, ch, g, s, n);
          }
          own[int64_t{row} * N + n] = acc;
        }
      }
    }
  }
  // Phase 3: state passing.
  for (int32_t s = 0; s < p.num_seqs; ++s) {
    for (int32_t head = 0; head < p.heads; ++head) {
      for (int64_t e = 0; e < int64_t{P} * N; ++e) SsdPassState(p, w, s, head, e);
    }
  }
  // Phase 4: the chunk scan.
  for (int64_t k = 0; k < chunks; ++k) {
    const SsdChunk ch = w.chunks[k];
    for (int32_t head = 0; head < p.heads; ++head) {
      const int32_t g = SsmGroupOf(p, head);
      const float* h_prev = SsdChunkState(p, w, k, head);
      for (int32_t t = 0; t < ch.length; ++t) {
        float* y = SsdY(p, ch, head, t);
        for (int32_t col = 0; col < P; ++col) {
          float acc = 0.0f;
          for (int32_t n = 0; n < N; ++n) {
            acc += SsdScanC(p, w, ch, head, g, t, n) * h_prev[int64_t{col} * N + n];
          }
          for (int32_t s = 0; s <= t; ++s) {
            acc += SsdScanCoef(p, w, ch, head, g, t, s) * SsdX(p, ch, head, s, col);
          }
          y[col] = acc + p.d[head] * SsdX(p, ch, head, t, col);
        }
      }
    }
  }
}

struct Case {
  Shape shape;
  std::vector<int32_t> runs;  // 0: one token on the scratch row; -L: L tokens on it
  int state_rows;
  int32_t max_start;
};

std::string CaseName(const Case& c) {
  std::string runs;
  for (int32_t r : c.runs) {
    absl::StrAppend(&runs, runs.empty() ? "" : "_", r < 0 ? absl::StrCat("scratch", -r) : absl::StrCat(r));
  }
  return absl::StrCat("h", c.shape.heads, "_p", c.shape.headdim, "_ds", c.shape.d_state, "_g",
                      c.shape.groups, "_chunk", c.shape.chunk, "_hpg", c.shape.heads_per_group,
                      "_runs", runs);
}

class SsdEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(SsdEmulationTest, MatchesTheReferenceRecurrence) {
  const Case& c = GetParam();
  const Shape& sh = c.shape;
  std::mt19937_64 rng(::coil::testing::SeedFromName(CaseName(c)));
  RecurrentBatch batch;
  const std::vector<int32_t> slots =
      ::coil::testing::ShuffledSlots(rng, static_cast<int>(c.runs.size()), c.state_rows);
  std::uniform_int_distribution<int32_t> position(0, c.max_start);
  for (size_t s = 0; s < c.runs.size(); ++s) {
    const int32_t run = c.runs[s];
    if (run <= 0) {
      batch.Add(run == 0 ? 1 : -run, c.state_rows, s % 2 == 0, position(rng));
      continue;
    }
    const bool fresh = s % 3 == 0;
    batch.Add(run, slots[s], fresh, fresh ? 0 : position(rng));
  }
  const int64_t rows = batch.cu_seqlens.back();
  const int64_t hp = int64_t{sh.heads} * sh.headdim, gn = int64_t{sh.groups} * sh.d_state;
  const int64_t width = hp + 2 * gn + sh.heads;  // [x | B | C | dt]
  std::vector<float> packed = ::coil::testing::RandomFloats(rng, rows * width);
  std::vector<float> a_log = ::coil::testing::RandomFloats(rng, sh.heads, 0.0f, 2.5f);
  std::vector<float> d = ::coil::testing::RandomFloats(rng, sh.heads);
  std::vector<float> dt_bias = ::coil::testing::RandomFloats(rng, sh.heads, -4.0f, -1.0f);
  const int64_t state_floats = int64_t{sh.heads} * sh.headdim * sh.d_state;
  const std::vector<float> initial =
      ::coil::testing::RandomFloats(rng, (c.state_rows + 1) * state_floats);

  // The reference.
  auto reference = CreateBackend(BackendKind::kCpu, {.threads = 1, .use_reference = true});
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<float> want_state = initial, want_y(rows * hp, 0.0f);
  const Tensor packed_t(packed.data(), DType::kF32, {rows, width});
  SsmScanOptions options;
  options.chunk_size = sh.chunk;
  options.heads_per_group = sh.heads_per_group;
  options.first_head_in_group = sh.first_head;
  ASSERT_TRUE((*reference)
                  ->SsmScan(packed_t.Columns(0, hp), packed_t.Columns(hp + 2 * gn, sh.heads),
                            Tensor(a_log.data(), DType::kF32, {sh.heads}),
                            packed_t.Columns(hp, gn), packed_t.Columns(hp + gn, gn),
                            Tensor(d.data(), DType::kF32, {sh.heads}),
                            Tensor(dt_bias.data(), DType::kF32, {sh.heads}), options, batch,
                            Tensor(want_state.data(), DType::kF32,
                                   {c.state_rows + 1, sh.heads, sh.headdim, sh.d_state}),
                            Tensor(want_y.data(), DType::kF32, {rows, hp}))
                  .ok());

  // The emulation, on the same inputs.
  std::vector<float> got_state = initial, got_y(rows * hp, std::nanf(""));
  SsmScanParams p{};
  p.x = packed.data();
  p.b = packed.data() + hp;
  p.c = packed.data() + hp + gn;
  p.dt = packed.data() + hp + 2 * gn;
  p.x_stride = p.b_stride = p.c_stride = p.dt_stride = width;
  p.a_log = a_log.data();
  p.d = d.data();
  p.dt_bias = dt_bias.data();
  p.state = got_state.data();
  p.y = got_y.data();
  p.y_stride = hp;
  p.cu_seqlens = batch.cu_seqlens.data();
  p.slots = batch.slots.data();
  p.fresh = batch.fresh.data();
  p.start_positions = batch.start_positions.data();
  p.num_seqs = batch.num_seqs();
  p.rows = static_cast<int32_t>(rows);
  p.heads = sh.heads;
  p.headdim = sh.headdim;
  p.d_state = sh.d_state;
  p.groups = sh.groups;
  p.heads_per_group = sh.heads_per_group > 0 ? sh.heads_per_group : sh.heads / sh.groups;
  p.first_head = sh.heads_per_group > 0 ? sh.first_head : 0;
  p.state_rows = c.state_rows;
  p.dt_min = options.dt_min;
  p.dt_max = options.dt_max;
  EmulateChunkedScan(p, batch, sh.chunk);

  // y of the chunked runs against the reference; the decode kernel's rows stay untouched.
  std::vector<float> got_rows, want_rows;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    const int64_t begin = batch.run_begin(s) * hp, end = (batch.run_begin(s) + batch.run_length(s)) * hp;
    for (int64_t i = begin; i < end; ++i) {
      if (batch.run_length(s) >= 2) {
        got_rows.push_back(got_y[i]);
        want_rows.push_back(want_y[i]);
      } else {
        ASSERT_TRUE(std::isnan(got_y[i])) << "row of decode sequence " << s << " written";
      }
    }
  }
  EXPECT_LE(::coil::testing::Nmse(got_rows, want_rows), 1e-7);
  // States: the chunked runs' slots against the reference; every other row (the scratch
  // row too) bit for bit as it was.
  for (int row = 0; row <= c.state_rows; ++row) {
    int seq = -1;
    for (int s = 0; s < batch.num_seqs(); ++s) {
      if (batch.slots[s] == row && batch.run_length(s) >= 2 && row != c.state_rows) seq = s;
    }
    const std::vector<float> got(got_state.begin() + row * state_floats,
                                 got_state.begin() + (row + 1) * state_floats);
    if (seq >= 0) {
      const std::vector<float> want(want_state.begin() + row * state_floats,
                                    want_state.begin() + (row + 1) * state_floats);
      EXPECT_LE(::coil::testing::Nmse(got, want), 1e-7) << "slot " << row;
    } else {
      EXPECT_EQ(0, std::memcmp(got.data(), initial.data() + row * state_floats,
                               state_floats * sizeof(float)))
          << "slot " << row << " is not a chunked run's but changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SsdEmulationTest,
    ::testing::Values(
        // Chunk boundaries inside and across runs, decode runs and padding mixed in.
        Case{{4, 8, 16, 2, 8}, {20, 1, 3, 9, 2, 0}, 7, 40},
        // Heads starting inside a group (5 heads from head 2 of groups of 3: 3 groups).
        Case{{5, 8, 16, 3, 8, 3, 2}, {19, 1, 33}, 4, 100},
        // Chunks longer than one 64-row tile; headdim above one tile.
        Case{{2, 80, 24, 1, 100}, {300, 65, 2}, 4, 1000},
        // chunk_size 1: every chunk one token.
        Case{{2, 4, 8, 1, 1}, {5, 3}, 2, 10},
        // A long prompt resuming far into its sequence, and a run on the scratch row.
        Case{{2, 4, 8, 1, 256}, {3000, 700, -5}, 3, 5000}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

}  // namespace
}  // namespace coil::cuda
