// The CUDA scan emulated on the host: the decode kernel's lane bodies (SsmDecodeLane, for
// all 32 lanes of each warp, in every (vector width, loads per lane) form) for runs of one
// token, and the chunked path's four phases in plain loops over the same chunk list,
// scratch layout and per-element formulas (ssm_scan_math.h) for longer runs, against the
// CPU backend's reference mode (the token-by-token recurrence). What this cannot check is
// GPU-only: the 64x64 tiling, the warp scans and shuffles, the device-built chunk list
// (built with the same geometry: ssd_chunks_test) and the launch geometry. Each runs with an
// f32 state and with a bf16 one (widened on load, rounded after every chunk and on store),
// the latter against the reference with a bf16 state. Runs without a GPU.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/ssd_blocks.h"
#include "kernels/cuda/ssd_chunks.h"
#include "kernels/cuda/ssd_tiles.h"
#include "kernels/cuda/ssm_scan_math.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::cuda {
namespace {

struct Shape {
  int32_t heads, headdim, d_state, groups;
  int64_t chunk;
  int32_t heads_per_group = 0, first_head = 0;
};

// The chunked path's scratch on the host, with the chunk list copied in (the device builds
// the same list: ssd_chunks_test).
struct HostScratch {
  SsdChunkPlan plan;
  std::vector<double> memory;
  SsdScratch w;
  int64_t chunks;
};

HostScratch MakeScratch(const SsmScanParams& p, const RecurrentBatch& batch, int64_t chunk) {
  HostScratch h;
  h.plan = BuildSsdChunkPlan(batch, chunk, p.groups);
  const SsdScratchLayout layout = LayoutSsdScratch(h.plan, p);
  h.memory.assign(layout.total / sizeof(double) + 1, 0.0);
  h.w = SsdScratchAt(h.memory.data(), layout);
  std::memcpy(h.w.chunks, h.plan.chunks.data(), h.plan.chunks.size() * sizeof(SsdChunk));
  std::memcpy(h.w.seq_first_chunk, h.plan.seq_first_chunk.data(),
              h.plan.seq_first_chunk.size() * sizeof(int32_t));
  h.chunks = static_cast<int64_t>(h.plan.chunks.size());
  return h;
}

// Phase 1: dt' and the cumulative sums.
void EmulateCumsum(const SsmScanParams& p, const SsdScratch& w, int64_t chunks) {
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
      for (int32_t t = 0; t < ch.length; ++t) SsdRowScales(p, w, ch, head, t);
    }
  }
}

// Phase 3: state passing, for the state's element type.
void EmulatePassing(const SsmScanParams& p, const SsdScratch& w) {
  for (int32_t s = 0; s < p.num_seqs; ++s) {
    for (int32_t head = 0; head < p.heads; ++head) {
      for (int64_t e = 0; e < int64_t{p.headdim} * p.d_state; ++e) {
        if (p.state_bf16) {
          SsdPassState<uint16_t>(p, w, s, head, e);
        } else {
          SsdPassState<float>(p, w, s, head, e);
        }
      }
    }
  }
}

// The phases as the kernels order them, with fp32 accumulation; writes y rows and slots of
// the runs of two or more tokens only (the decode kernel's runs are left alone).
void EmulateChunkedScan(const SsmScanParams& p, const RecurrentBatch& batch, int64_t chunk) {
  HostScratch scratch = MakeScratch(p, batch, chunk);
  const SsdScratch& w = scratch.w;
  const int64_t chunks = scratch.chunks;
  const int32_t P = p.headdim, N = p.d_state;
  EmulateCumsum(p, w, chunks);
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
  EmulatePassing(p, w);
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

// The launcher's tiled path itself: ssd_blocks.h's block bodies over the kernels' grids,
// each block's threads and warps run by HostExec (kBf16: the tensor-core form, its wmma
// products emulated in fp32 over bf16 operands).
template <bool kBf16>
void EmulateTiledChunkedScan(const SsmScanParams& p, const RecurrentBatch& batch,
                             int64_t chunk) {
  HostScratch scratch = MakeScratch(p, batch, chunk);
  const SsdScratch& w = scratch.w;
  const int64_t chunks = scratch.chunks;
  if (chunks == 0) return;
  const int32_t t_tiles = (scratch.plan.max_length + kSsdTile - 1) / kSsdTile;
  const int32_t pairs = t_tiles * (t_tiles + 1) / 2;
  const int32_t p_tiles = (p.headdim + kSsdTile - 1) / kSsdTile;
  const int32_t n_tiles = (p.d_state + kSsdTile - 1) / kSsdTile;
  EmulateCumsum(p, w, chunks);
  HostExec ex;
  auto sm = std::make_unique<TileSmem<kBf16>>();
  for (int64_t bx = 0; bx < chunks * pairs; ++bx) {
    for (int32_t g = 0; g < p.groups; ++g) ChunkCbBlock<kBf16>(ex, *sm, p, w, pairs, bx, g);
  }
  for (int64_t k = 0; k < chunks; ++k) {
    for (int32_t head = 0; head < p.heads; ++head) {
      for (int32_t bz = 0; bz < p_tiles * n_tiles; ++bz) {
        ChunkStateBlock<kBf16>(ex, *sm, p, w, k, head, bz);
      }
    }
  }
  EmulatePassing(p, w);
  for (int64_t bx = 0; bx < chunks * t_tiles; ++bx) {
    for (int32_t head = 0; head < p.heads; ++head) {
      for (int32_t bz = 0; bz < p_tiles; ++bz) {
        ChunkScanBlock<kBf16>(ex, *sm, p, w, t_tiles, bx, head, bz);
      }
    }
  }
}

// The decode kernel for every run of one token: one (sequence, head) at a time, rows in
// groups of kRows (a warp's), the 32 lanes' partial sums added as the shuffles would.
template <int kVec, int kSteps, typename StateT>
void EmulateDecodeOf(const SsmScanParams& p) {
  constexpr int kRows = 4;
  const int32_t P = p.headdim, N = p.d_state;
  for (int32_t seq = 0; seq < p.num_seqs; ++seq) {
    const int64_t row = p.cu_seqlens[seq];
    if (p.cu_seqlens[seq + 1] - row != 1) continue;
    for (int32_t head = 0; head < p.heads; ++head) {
      const int64_t group = SsmGroupOf(p, head);
      const float* b_row = p.b + row * p.b_stride + group * N;
      const float* c_row = p.c + row * p.c_stride + group * N;
      const float dtv = SsmDt(p, row, head);
      const float decay = expf(SsmA(p, head) * dtv);
      const int32_t slot = p.slots[seq];
      const bool scratch = slot == p.state_rows;
      StateT* state = SsmStateOf<StateT>(p, slot, head);
      const float* x_row = p.x + row * p.x_stride + int64_t{head} * P;
      float* y_row = p.y + row * p.y_stride + int64_t{head} * P;
      for (int32_t p_base = 0; p_base < P; p_base += kRows) {
        float xdt[kRows], total[kRows] = {};
        for (int r = 0; r < kRows; ++r) xdt[r] = p_base + r < P ? x_row[p_base + r] * dtv : 0.0f;
        for (int lane = 0; lane < 32; ++lane) {
          float acc[kRows] = {};
          SsmDecodeLane<kVec, kSteps, kRows>(p, b_row, c_row, state, scratch || p.fresh[seq] != 0,
                                             scratch, decay, xdt, p_base, lane, acc);
          for (int r = 0; r < kRows; ++r) total[r] += acc[r];
        }
        for (int r = 0; r < kRows && p_base + r < P; ++r) {
          y_row[p_base + r] = total[r] + p.d[head] * x_row[p_base + r];
        }
      }
    }
  }
}

template <int kVec, int kSteps>
void EmulateDecode(const SsmScanParams& p) {
  if (p.state_bf16) {
    EmulateDecodeOf<kVec, kSteps, uint16_t>(p);
  } else {
    EmulateDecodeOf<kVec, kSteps, float>(p);
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
    absl::StrAppend(&runs, runs.empty() ? "" : "_",
                    r < 0 ? absl::StrCat("scratch", -r) : absl::StrCat(r));
  }
  return absl::StrCat("h", c.shape.heads, "_p", c.shape.headdim, "_ds", c.shape.d_state, "_g",
                      c.shape.groups, "_chunk", c.shape.chunk, "_hpg", c.shape.heads_per_group,
                      "_runs", runs);
}

// One case's batch and inputs, and the reference's y and state pool.
struct Problem {
  RecurrentBatch batch;
  int64_t rows = 0, hp = 0, gn = 0, width = 0, state_floats = 0;
  std::vector<float> packed, a_log, d, dt_bias, initial, want_state, want_y;
  SsmScanOptions options;
  DType state_dtype = DType::kF32;
};

// state_dtype: the pool's type; a bf16 pool starts from values it can hold.
Problem MakeProblem(const Case& c, DType state_dtype = DType::kF32) {
  const Shape& sh = c.shape;
  Problem pr;
  pr.state_dtype = state_dtype;
  std::mt19937_64 rng(::coil::testing::SeedFromName(CaseName(c)));
  const std::vector<int32_t> slots =
      ::coil::testing::ShuffledSlots(rng, static_cast<int>(c.runs.size()), c.state_rows);
  std::uniform_int_distribution<int32_t> position(0, c.max_start);
  for (size_t s = 0; s < c.runs.size(); ++s) {
    const int32_t run = c.runs[s];
    if (run <= 0) {
      pr.batch.Add(run == 0 ? 1 : -run, c.state_rows, s % 2 == 0, position(rng));
      continue;
    }
    const bool fresh = s % 3 == 0;
    pr.batch.Add(run, slots[s], fresh, fresh ? 0 : position(rng));
  }
  pr.rows = pr.batch.cu_seqlens.back();
  pr.hp = int64_t{sh.heads} * sh.headdim;
  pr.gn = int64_t{sh.groups} * sh.d_state;
  pr.width = pr.hp + 2 * pr.gn + sh.heads;  // [x | B | C | dt]
  pr.packed = ::coil::testing::RandomFloats(rng, pr.rows * pr.width);
  pr.a_log = ::coil::testing::RandomFloats(rng, sh.heads, 0.0f, 2.5f);
  pr.d = ::coil::testing::RandomFloats(rng, sh.heads);
  pr.dt_bias = ::coil::testing::RandomFloats(rng, sh.heads, -4.0f, -1.0f);
  pr.state_floats = int64_t{sh.heads} * sh.headdim * sh.d_state;
  pr.initial = ::coil::testing::RandomFloats(rng, (c.state_rows + 1) * pr.state_floats);
  pr.initial = ::coil::testing::Decode(::coil::testing::Encode(pr.initial, state_dtype), state_dtype);
  pr.options.chunk_size = sh.chunk;
  pr.options.heads_per_group = sh.heads_per_group;
  pr.options.first_head_in_group = sh.first_head;

  auto reference = CreateBackend(BackendKind::kCpu, {.threads = 1, .use_reference = true});
  EXPECT_TRUE(reference.ok()) << reference.status();
  std::vector<uint8_t> want_state = ::coil::testing::Encode(pr.initial, state_dtype);
  pr.want_y.assign(pr.rows * pr.hp, 0.0f);
  const Tensor packed_t(pr.packed.data(), DType::kF32, {pr.rows, pr.width});
  const absl::Status status =
      (*reference)
          ->SsmScan(packed_t.Columns(0, pr.hp), packed_t.Columns(pr.hp + 2 * pr.gn, sh.heads),
                    Tensor(pr.a_log.data(), DType::kF32, {sh.heads}),
                    packed_t.Columns(pr.hp, pr.gn), packed_t.Columns(pr.hp + pr.gn, pr.gn),
                    Tensor(pr.d.data(), DType::kF32, {sh.heads}),
                    Tensor(pr.dt_bias.data(), DType::kF32, {sh.heads}), pr.options, pr.batch,
                    Tensor(want_state.data(), state_dtype,
                           {c.state_rows + 1, sh.heads, sh.headdim, sh.d_state}),
                    Tensor(pr.want_y.data(), DType::kF32, {pr.rows, pr.hp}));
  EXPECT_TRUE(status.ok()) << status;
  pr.want_state = ::coil::testing::Decode(want_state, state_dtype);
  return pr;
}

// The launcher's parameters over the problem's host arrays, writing `state` (the pool's
// bytes, of the problem's state type) and `y`.
SsmScanParams ParamsOf(const Case& c, Problem& pr, std::vector<uint8_t>& state,
                       std::vector<float>& y) {
  const Shape& sh = c.shape;
  SsmScanParams p{};
  p.x = pr.packed.data();
  p.b = pr.packed.data() + pr.hp;
  p.c = pr.packed.data() + pr.hp + pr.gn;
  p.dt = pr.packed.data() + pr.hp + 2 * pr.gn;
  p.x_stride = p.b_stride = p.c_stride = p.dt_stride = pr.width;
  p.a_log = pr.a_log.data();
  p.d = pr.d.data();
  p.dt_bias = pr.dt_bias.data();
  p.state = state.data();
  p.state_bf16 = pr.state_dtype == DType::kBF16;
  p.y = y.data();
  p.y_stride = pr.hp;
  p.cu_seqlens = pr.batch.cu_seqlens.data();
  p.slots = pr.batch.slots.data();
  p.fresh = pr.batch.fresh.data();
  p.start_positions = pr.batch.start_positions.data();
  p.num_seqs = pr.batch.num_seqs();
  p.rows = static_cast<int32_t>(pr.rows);
  p.heads = sh.heads;
  p.headdim = sh.headdim;
  p.d_state = sh.d_state;
  p.groups = sh.groups;
  p.heads_per_group = sh.heads_per_group > 0 ? sh.heads_per_group : sh.heads / sh.groups;
  p.first_head = sh.heads_per_group > 0 ? sh.first_head : 0;
  p.state_rows = c.state_rows;
  p.dt_min = pr.options.dt_min;
  p.dt_max = pr.options.dt_max;
  return p;
}

// y (every row written) and the state pool (the slots the batch uses like the reference,
// every other row, the scratch row too, bit for bit as it was).
void ExpectMatches(const Case& c, const Problem& pr, const std::vector<uint8_t>& state_bytes,
                   const std::vector<float>& y, double max_nmse = 1e-7) {
  const std::vector<float> state = ::coil::testing::Decode(state_bytes, pr.state_dtype);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_FALSE(std::isnan(y[i])) << "y[" << i << "]";
  EXPECT_LE(::coil::testing::Nmse(y, pr.want_y), max_nmse);
  for (int row = 0; row <= c.state_rows; ++row) {
    bool used = false;
    for (int s = 0; s < pr.batch.num_seqs(); ++s) {
      used |= pr.batch.slots[s] == row && row != c.state_rows;
    }
    const std::vector<float> got(state.begin() + row * pr.state_floats,
                                 state.begin() + (row + 1) * pr.state_floats);
    if (used) {
      const std::vector<float> want(pr.want_state.begin() + row * pr.state_floats,
                                    pr.want_state.begin() + (row + 1) * pr.state_floats);
      EXPECT_LE(::coil::testing::Nmse(got, want), max_nmse) << "slot " << row;
    } else {
      EXPECT_EQ(0, std::memcmp(got.data(), pr.initial.data() + row * pr.state_floats,
                               pr.state_floats * sizeof(float)))
          << "slot " << row << " is not in the batch but changed";
    }
  }
}

class SsmEmulationTest : public ::testing::TestWithParam<Case> {};

// Decode and chunked paths together, as LaunchSsmScan dispatches them, for each form of
// the decode kernel d_state allows (vector loads need d_state % 4 == 0).
TEST_P(SsmEmulationTest, MatchesTheReferenceRecurrence) {
  const Case& c = GetParam();
  Problem pr = MakeProblem(c);
  using DecodeForm = void (*)(const SsmScanParams&);
  std::vector<std::pair<std::string, DecodeForm>> forms = {
      {"v1s1", EmulateDecode<1, 1>}, {"v1s2", EmulateDecode<1, 2>}, {"v1s4", EmulateDecode<1, 4>}};
  if (c.shape.d_state % 4 == 0) {
    forms.push_back({"v4s1", EmulateDecode<4, 1>});
    forms.push_back({"v4s2", EmulateDecode<4, 2>});
    forms.push_back({"v4s4", EmulateDecode<4, 4>});
  }
  for (const auto& [name, decode] : forms) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> state = ::coil::testing::Encode(pr.initial, pr.state_dtype);
    std::vector<float> y(pr.rows * pr.hp, std::nanf(""));
    const SsmScanParams p = ParamsOf(c, pr, state, y);
    decode(p);
    EmulateChunkedScan(p, pr.batch, c.shape.chunk);
    ExpectMatches(c, pr, state, y);
  }
}

// The tiled blocks in both product forms, with the decode kernel's v1s1 form for the runs
// of one token. The bf16 form rounds every staged operand (C, B, the scaled x, the scaled
// C, the entering states, the coefficients, x) to bf16: about 3e-3 relative error per
// product, an NMSE near 1e-5 against the fp32 reference; its bound of 3e-5 still fails any
// misplaced tile, row or operand (NMSE near 1).
TEST_P(SsmEmulationTest, TiledBlocksMatchTheReferenceInBothProductForms) {
  const Case& c = GetParam();
  Problem pr = MakeProblem(c);
  {
    SCOPED_TRACE("fp32 tiles");
    std::vector<uint8_t> state = ::coil::testing::Encode(pr.initial, pr.state_dtype);
    std::vector<float> y(pr.rows * pr.hp, std::nanf(""));
    const SsmScanParams p = ParamsOf(c, pr, state, y);
    EmulateDecode<1, 1>(p);
    EmulateTiledChunkedScan<false>(p, pr.batch, c.shape.chunk);
    ExpectMatches(c, pr, state, y);
  }
  {
    SCOPED_TRACE("bf16 tiles");
    std::vector<uint8_t> state = ::coil::testing::Encode(pr.initial, pr.state_dtype);
    std::vector<float> y(pr.rows * pr.hp, std::nanf(""));
    const SsmScanParams p = ParamsOf(c, pr, state, y);
    EmulateDecode<1, 1>(p);
    EmulateTiledChunkedScan<true>(p, pr.batch, c.shape.chunk);
    ExpectMatches(c, pr, state, y, 3e-5);
    if (const double nmse = ::coil::testing::Nmse(y, pr.want_y); nmse > 0.0) {
      RecordProperty("bf16_nmse", absl::StrCat(nmse));
      std::printf("bf16 tiles: y NMSE %.3g\n", nmse);
    }
  }
}

// A bf16 state: the decode forms and the fp32 tiles against the reference with a bf16
// state, which rounds at the same points (after every chunk, on the store). fp32 values
// that differ in their last bits can round one bf16 step (2^-8) apart: NMSE about 1e-7
// here, bound 1e-5; a state read or written as the wrong type gives about 1.
TEST_P(SsmEmulationTest, Bf16StateMatchesTheReference) {
  const Case& c = GetParam();
  Problem pr = MakeProblem(c, DType::kBF16);
  using DecodeForm = void (*)(const SsmScanParams&);
  std::vector<std::pair<std::string, DecodeForm>> forms = {{"v1s1", EmulateDecode<1, 1>},
                                                           {"v1s4", EmulateDecode<1, 4>}};
  if (c.shape.d_state % 4 == 0) forms.push_back({"v4s2", EmulateDecode<4, 2>});
  for (const auto& [name, decode] : forms) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> state = ::coil::testing::Encode(pr.initial, pr.state_dtype);
    std::vector<float> y(pr.rows * pr.hp, std::nanf(""));
    const SsmScanParams p = ParamsOf(c, pr, state, y);
    decode(p);
    EmulateChunkedScan(p, pr.batch, c.shape.chunk);
    ExpectMatches(c, pr, state, y, 1e-5);
  }
  SCOPED_TRACE("fp32 tiles");
  std::vector<uint8_t> state = ::coil::testing::Encode(pr.initial, pr.state_dtype);
  std::vector<float> y(pr.rows * pr.hp, std::nanf(""));
  const SsmScanParams p = ParamsOf(c, pr, state, y);
  EmulateDecode<1, 1>(p);
  EmulateTiledChunkedScan<false>(p, pr.batch, c.shape.chunk);
  ExpectMatches(c, pr, state, y, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SsmEmulationTest,
    ::testing::Values(
        // Chunk boundaries inside and across runs, decode runs and padding mixed in.
        Case{{4, 8, 16, 2, 8}, {20, 1, 3, 9, 2, 0}, 7, 40},
        // Heads starting inside a group (5 heads from head 2 of groups of 3: 3 groups).
        Case{{5, 8, 16, 3, 8, 3, 2}, {19, 1, 33}, 4, 100},
        // Chunks longer than one 64-row tile; headdim above one tile.
        Case{{2, 80, 24, 1, 100}, {300, 65, 2}, 4, 1000},
        // mamba2's head shape: whole 64x64 tiles, two t-tiles and two d_state tiles.
        Case{{2, 64, 128, 1, 128}, {300, 130, 1}, 3, 500},
        // chunk_size 1: every chunk one token.
        Case{{2, 4, 8, 1, 1}, {5, 3}, 2, 10},
        // A long prompt resuming far into its sequence, and a run on the scratch row.
        Case{{2, 4, 8, 1, 256}, {3000, 700, -5}, 3, 5000},
        // Decode only: d_state below one lane's span, not a multiple of 4, across several
        // spans (600 > 512 columns), and headdim not a multiple of the warp's 4 rows.
        Case{{3, 8, 16, 3, 8}, {1, 0, 1, 0, 0, 1}, 6, 100},
        Case{{2, 6, 42, 1, 8}, {1, 1, 1}, 4, 100}, Case{{1, 5, 600, 1, 8}, {1, 0, 1, 2}, 4, 100},
        Case{{2, 16, 128, 2, 8, 1, 0}, {1, 1, 0}, 3, 100}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

}  // namespace
}  // namespace coil::cuda
