// Properties of the stateful ops (conv1d then SSM scan, as a Mamba2 mixer runs them) that
// serving relies on, each checked against an invariant rather than stored numbers:
//  - the chunked SSD scan agrees with the token-by-token recurrence (the oracle) within
//    1e-5 relative, for chunk sizes that do and do not divide the length, and within bf16
//    rounding with bf16 products (SsmScanOptions::bf16_products), which the CPU takes where
//    it has AMX or AVX-512 BF16 (and otherwise computes as fp32, the same bits);
//  - a prompt split at chunk multiples gives the bits of the whole prompt (at any split in
//    the reference mode), with and without bf16 products, with an f32 or a bf16 state;
//  - a sequence's outputs do not depend on what else shares the step or on the threads,
//    in each of those settings;
//  - a bf16 state is the f32 state rounded: within a piece the step computes in fp32;
//  - swapped slots, a fresh sequence on a dirty slot, and the head-to-group mapping.
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/vec_math.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil {
namespace {

// headdim a multiple of 16 and d_state of 32, so the chunked scan takes its AVX-512 form,
// and its bf16 form when asked, where the CPU has them (the op harness covers the portable
// form with other shapes).
constexpr int64_t kHeads = 4, kHeaddim = 16, kDState = 32, kGroups = 2, kWidth = 4;
constexpr int64_t kInner = kHeads * kHeaddim;                      // 64
constexpr int64_t kConvChannels = kInner + 2 * kGroups * kDState;  // 192
constexpr int kStateRows = 40;

// A sequence's own inputs: per token the conv input xBC [128] and the raw dt [4].
struct SeqInputs {
  std::vector<float> xbc, dt;
  int64_t tokens() const { return static_cast<int64_t>(dt.size()) / kHeads; }
};

SeqInputs RandomSeq(std::mt19937_64& rng, int64_t tokens) {
  return {testing::RandomFloats(rng, tokens * kConvChannels),
          testing::RandomFloats(rng, tokens * kHeads)};
}

// The layer's weights and the state pool (rows + scratch), all host memory.
struct Layer {
  std::vector<float> conv_w, conv_b, a_log, d, dt_bias;
  std::vector<float> conv_state, ssm_state;  // a bf16 state is kept here widened
  int64_t chunk = 8;
  bool bf16_products = false;
  bool bf16_state = false;

  explicit Layer(uint64_t seed) {
    std::mt19937_64 rng(seed);
    conv_w = testing::RandomFloats(rng, kConvChannels * kWidth, -0.5f, 0.5f);
    conv_b = testing::RandomFloats(rng, kConvChannels, -0.2f, 0.2f);
    a_log = testing::RandomFloats(rng, kHeads, 0.0f, 2.0f);
    d = testing::RandomFloats(rng, kHeads);
    dt_bias = testing::RandomFloats(rng, kHeads, -4.0f, -1.0f);
    conv_state = testing::RandomFloats(rng, (kStateRows + 1) * (kWidth - 1) * kConvChannels);
    ssm_state = testing::RandomFloats(rng, (kStateRows + 1) * kHeads * kHeaddim * kDState);
  }
  float* ConvRow(int slot) { return conv_state.data() + slot * (kWidth - 1) * kConvChannels; }
  float* SsmRow(int slot) { return ssm_state.data() + slot * kHeads * kHeaddim * kDState; }
  // A slot's whole state (conv then SSM), to compare bit for bit.
  std::vector<float> Row(int slot) {
    std::vector<float> r(ConvRow(slot), ConvRow(slot) + (kWidth - 1) * kConvChannels);
    r.insert(r.end(), SsmRow(slot), SsmRow(slot) + kHeads * kHeaddim * kDState);
    return r;
  }
  // Rounds the SSM state's values to bf16 (what a bf16 pool holds).
  void RoundState() {
    for (float& v : ssm_state) v = Bf16ToFloat(FloatToBf16(v));
  }
  void UseBf16State() {
    bf16_state = true;
    RoundState();
  }
  void CopyRow(int from, int to) {
    std::memcpy(ConvRow(to), ConvRow(from), sizeof(float) * (kWidth - 1) * kConvChannels);
    std::memcpy(SsmRow(to), SsmRow(from), sizeof(float) * kHeads * kHeaddim * kDState);
  }
};

// One entry of a step: tokens [begin, begin + length) of `seq`.
struct Entry {
  const SeqInputs* seq;
  int64_t begin, length;
  int slot;
  bool fresh;
};

// Runs conv1d + scan for a step and returns each entry's y rows [length, kInner].
std::vector<std::vector<float>> Step(Backend& backend, Layer& layer,
                                     const std::vector<Entry>& entries) {
  RecurrentBatch batch;
  std::vector<float> xbc, dt;
  for (const Entry& e : entries) {
    batch.Add(static_cast<int32_t>(e.length), e.slot, e.fresh, static_cast<int32_t>(e.begin));
    xbc.insert(xbc.end(), e.seq->xbc.begin() + e.begin * kConvChannels,
               e.seq->xbc.begin() + (e.begin + e.length) * kConvChannels);
    dt.insert(dt.end(), e.seq->dt.begin() + e.begin * kHeads,
              e.seq->dt.begin() + (e.begin + e.length) * kHeads);
  }
  const int64_t rows = batch.cu_seqlens.back();
  std::vector<float> conv_out(rows * kConvChannels), y(rows * kInner);
  auto f = [](std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return Tensor(v.data(), DType::kF32, shape);
  };
  absl::Status s =
      backend.CausalConv1d(f(xbc, {rows, kConvChannels}), f(layer.conv_w, {kConvChannels, kWidth}),
                           f(layer.conv_b, {kConvChannels}), batch,
                           f(layer.conv_state, {kStateRows + 1, kWidth - 1, kConvChannels}),
                           f(conv_out, {rows, kConvChannels}));
  EXPECT_TRUE(s.ok()) << s;
  const Tensor conv = f(conv_out, {rows, kConvChannels});
  SsmScanOptions options;
  options.chunk_size = layer.chunk;
  options.bf16_products = layer.bf16_products;
  // A bf16 pool: the values (bf16 already) narrowed exactly, and widened back afterwards.
  std::vector<uint16_t> narrow;
  if (layer.bf16_state) {
    for (float v : layer.ssm_state) narrow.push_back(FloatToBf16(v));
  }
  const Tensor ssm_state =
      layer.bf16_state
          ? Tensor(narrow.data(), DType::kBF16, {kStateRows + 1, kHeads, kHeaddim, kDState})
          : f(layer.ssm_state, {kStateRows + 1, kHeads, kHeaddim, kDState});
  s = backend.SsmScan(conv.Columns(0, kInner), f(dt, {rows, kHeads}), f(layer.a_log, {kHeads}),
                      conv.Columns(kInner, kGroups * kDState),
                      conv.Columns(kInner + kGroups * kDState, kGroups * kDState),
                      f(layer.d, {kHeads}), f(layer.dt_bias, {kHeads}), options, batch, ssm_state,
                      f(y, {rows, kInner}));
  EXPECT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < narrow.size(); ++i) layer.ssm_state[i] = Bf16ToFloat(narrow[i]);
  std::vector<std::vector<float>> out;
  for (int i = 0; i < batch.num_seqs(); ++i) {
    out.emplace_back(y.begin() + batch.run_begin(i) * kInner,
                     y.begin() + (batch.run_begin(i) + batch.run_length(i)) * kInner);
  }
  return out;
}

std::unique_ptr<Backend> Cpu(bool reference, int threads = 2) {
  auto b = CreateBackend(BackendKind::kCpu, {.threads = threads, .use_reference = reference});
  EXPECT_TRUE(b.ok());
  return std::move(*b);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `seq` through steps of the given lengths on `slot`; returns all its y rows.
std::vector<float> RunSplit(Backend& backend, Layer& layer, const SeqInputs& seq, int slot,
                            const std::vector<int64_t>& lengths, bool fresh) {
  std::vector<float> y;
  int64_t begin = 0;
  for (int64_t len : lengths) {
    auto out = Step(backend, layer, {{&seq, begin, len, slot, fresh && begin == 0}});
    y.insert(y.end(), out[0].begin(), out[0].end());
    begin += len;
  }
  return y;
}

// Each test that takes the chunked form runs with fp32 and with bf16 products, and with an
// f32 and a bf16 state.
struct Setting {
  bool bf16_products, bf16_state;
  void Apply(Layer& layer) const {
    layer.bf16_products = bf16_products;
    if (bf16_state) layer.UseBf16State();
  }
};
class SettingsTest : public ::testing::TestWithParam<Setting> {};
INSTANTIATE_TEST_SUITE_P(Settings, SettingsTest,
                         ::testing::Values(Setting{false, false}, Setting{true, false},
                                           Setting{false, true}, Setting{true, true}),
                         [](const ::testing::TestParamInfo<Setting>& info) {
                           return std::string(info.param.bf16_products ? "bf16" : "fp32") +
                                  "_products_" + (info.param.bf16_state ? "bf16" : "f32") +
                                  "_state";
                         });

TEST_P(SettingsTest, ChunkedScanMatchesTheRecurrence) {
  // (length, chunk): 37/8 and 50/16 leave a partial last chunk; 32/8 divides; 9/256 is
  // a single partial chunk; 100/64 has pieces longer than the bf16 form's 32-row blocks.
  // The sequence resumes from a random state at position 0. Bounds: fp32 sums differ from
  // the recurrence by rounding only (1e-5 relative); bf16 operands carry 2^-9 relative
  // error each, and a bf16 state rounded from slightly different fp32 values can land one
  // bf16 step apart, so outputs and states are then compared by NMSE (measured about 1e-5
  // here; a misplaced operand or block gives about 1).
  for (auto [length, chunk] : std::vector<std::pair<int64_t, int64_t>>{
           {37, 8}, {32, 8}, {50, 16}, {9, 256}, {64, 5}, {100, 64}}) {
    std::mt19937_64 rng(length * 1000 + chunk);
    const SeqInputs seq = RandomSeq(rng, length);
    Layer fast_layer(7), ref_layer(7);
    fast_layer.chunk = ref_layer.chunk = chunk;
    GetParam().Apply(fast_layer);
    if (GetParam().bf16_state) ref_layer.UseBf16State();  // rounded at the same boundaries
    auto fast = Cpu(false), ref = Cpu(true);
    const auto y_fast = RunSplit(*fast, fast_layer, seq, 3, {length}, false);
    const auto y_ref = RunSplit(*ref, ref_layer, seq, 3, {length}, false);
    if (GetParam().bf16_products || GetParam().bf16_state) {
      EXPECT_LE(testing::Nmse(y_fast, y_ref), 1e-4) << "length " << length << " chunk " << chunk;
      EXPECT_LE(testing::Nmse(fast_layer.Row(3), ref_layer.Row(3)), 1e-4)
          << "final state, length " << length << " chunk " << chunk;
      continue;
    }
    for (int64_t t = 0; t < length; ++t) {
      const std::vector<float> a(y_fast.begin() + t * kInner, y_fast.begin() + (t + 1) * kInner);
      const std::vector<float> b(y_ref.begin() + t * kInner, y_ref.begin() + (t + 1) * kInner);
      ASSERT_LE(testing::MaxRelError(a, b), 1e-5)
          << "length " << length << " chunk " << chunk << " token " << t;
    }
    EXPECT_LE(testing::MaxRelError(fast_layer.Row(3), ref_layer.Row(3)), 1e-5)
        << "final state, length " << length << " chunk " << chunk;
  }
}

TEST(RecurrentOpsTest, Bf16ProductsAreTakenWhereTheCpuHasThem) {
  // The same prompt with and without bf16 products: different bits where the CPU has
  // bf16 products (the operands are rounded), the very same bits where it has not.
  std::mt19937_64 rng(41);
  const SeqInputs seq = RandomSeq(rng, 70);
  auto fast = Cpu(false);
  Layer fp32(9), bf16(9);
  fp32.chunk = bf16.chunk = 64;
  bf16.bf16_products = true;
  const auto y_fp32 = RunSplit(*fast, fp32, seq, 2, {70}, true);
  const auto y_bf16 = RunSplit(*fast, bf16, seq, 2, {70}, true);
  if (HostBf16Products() == Bf16Products::kNone) {
    EXPECT_TRUE(SameBits(y_fp32, y_bf16));
  } else {
    EXPECT_FALSE(SameBits(y_fp32, y_bf16));
    EXPECT_LE(testing::Nmse(y_bf16, y_fp32), 1e-4);
  }
}

TEST_P(SettingsTest, SplitAtChunkMultiplesEqualsWholeBitForBit) {
  std::mt19937_64 rng(37);
  const SeqInputs seq = RandomSeq(rng, 37);
  auto fast = Cpu(false);
  Layer whole(3), split(3);
  GetParam().Apply(whole);
  GetParam().Apply(split);
  const auto y_whole = RunSplit(*fast, whole, seq, 5, {37}, true);
  const auto y_split = RunSplit(*fast, split, seq, 5, {8, 8, 21}, true);
  EXPECT_TRUE(SameBits(y_whole, y_split));
  EXPECT_TRUE(SameBits(whole.Row(5), split.Row(5)));
  // Decoding on from there: still identical.
  EXPECT_TRUE(SameBits(RunSplit(*fast, whole, seq, 5, {1}, false),
                       RunSplit(*fast, split, seq, 5, {1}, false)));
}

TEST(RecurrentOpsTest, ReferenceModeSplitAnywhereEqualsWholeBitForBit) {
  // 1 + 5 + 31: a step shorter than the conv history (3 rows) included.
  std::mt19937_64 rng(38);
  const SeqInputs seq = RandomSeq(rng, 37);
  auto ref = Cpu(true);
  Layer whole(4), split(4);
  const auto y_whole = RunSplit(*ref, whole, seq, 0, {37}, true);
  const auto y_split = RunSplit(*ref, split, seq, 0, {1, 5, 31}, true);
  EXPECT_TRUE(SameBits(y_whole, y_split));
  EXPECT_TRUE(SameBits(whole.Row(0), split.Row(0)));
}

TEST(RecurrentOpsTest, ReferenceModeSplitAtChunkMultiplesEqualsWholeWithABf16State) {
  // The reference mode rounds a bf16 state at the chunk boundaries too.
  std::mt19937_64 rng(39);
  const SeqInputs seq = RandomSeq(rng, 37);
  auto ref = Cpu(true);
  Layer whole(4), split(4);
  whole.UseBf16State();
  split.UseBf16State();
  const auto y_whole = RunSplit(*ref, whole, seq, 0, {37}, true);
  const auto y_split = RunSplit(*ref, split, seq, 0, {8, 16, 13}, true);
  EXPECT_TRUE(SameBits(y_whole, y_split));
  EXPECT_TRUE(SameBits(whole.Row(0), split.Row(0)));
}

TEST(RecurrentOpsTest, ABf16StateIsTheF32StateRounded) {
  // From the same (bf16) state, one piece with an f32 and with a bf16 state: the same
  // outputs, bit for bit (the step computes in fp32), and the bf16 state is the f32 state
  // rounded to nearest even. A decode token, then a 20-token piece (chunk 64), on the fast
  // kernels (with both kinds of products) and the reference.
  std::mt19937_64 rng(40);
  const SeqInputs seq = RandomSeq(rng, 41);
  for (bool reference : {false, true}) {
    for (bool bf16_products : {false, true}) {
      auto backend = Cpu(reference);
      Layer f32(13), bf16(13);
      f32.chunk = bf16.chunk = 64;
      f32.bf16_products = bf16.bf16_products = bf16_products;
      f32.RoundState();
      bf16.UseBf16State();
      for (auto [begin, length] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 20}}) {
        const auto y_f32 = Step(*backend, f32, {{&seq, begin, length, 2, false}})[0];
        const auto y_bf16 = Step(*backend, bf16, {{&seq, begin, length, 2, false}})[0];
        EXPECT_TRUE(SameBits(y_f32, y_bf16)) << "reference " << reference << " length " << length;
        f32.RoundState();
        EXPECT_TRUE(SameBits(f32.Row(2), bf16.Row(2))) << "reference " << reference;
      }
    }
  }
}

TEST_P(SettingsTest, OutputsDoNotDependOnTheBatchOrTheThreads) {
  // The probe: a 21-token prefill resuming at position 11 of a 32-token sequence, then one
  // decode token. Alone (1 thread) versus inside batches of 2, 7 and 32 other sequences
  // (decodes first, then prefills, as the scheduler packs them) on 2 threads.
  std::mt19937_64 rng(99);
  const SeqInputs probe = RandomSeq(rng, 33);
  std::vector<SeqInputs> others;
  for (int i = 0; i < 32; ++i) others.push_back(RandomSeq(rng, 1 + (i * 7) % 19));
  auto solo_backend = Cpu(false, 1);
  Layer solo(11);
  GetParam().Apply(solo);
  const auto solo_prefill = Step(*solo_backend, solo, {{&probe, 11, 21, 0, false}})[0];
  const auto solo_decode = Step(*solo_backend, solo, {{&probe, 32, 1, 0, false}})[0];
  for (int n_others : {2, 7, 32}) {
    auto backend = Cpu(false, 2);
    Layer batched(11);
    GetParam().Apply(batched);
    std::vector<Entry> decodes, prefills;
    for (int i = 0; i < n_others; ++i) {
      const SeqInputs& o = others[i];
      if (o.tokens() == 1 || i % 2 == 0) {
        decodes.push_back({&o, o.tokens() - 1, 1, 1 + i, false});
      } else {
        prefills.push_back({&o, 0, o.tokens(), 1 + i, true});
      }
    }
    std::vector<Entry> step = decodes;
    step.insert(step.end(), prefills.begin(), prefills.end());
    step.push_back({&probe, 11, 21, 0, false});
    const auto out = Step(*backend, batched, step);
    EXPECT_TRUE(SameBits(out.back(), solo_prefill)) << n_others << " others";
    // The decode step with the probe in the middle of the batch.
    std::vector<Entry> decode_step = decodes;
    const size_t middle = decode_step.size() / 2;
    decode_step.insert(decode_step.begin() + middle, {&probe, 32, 1, 0, false});
    const auto out2 = Step(*backend, batched, decode_step);
    EXPECT_TRUE(SameBits(out2[middle], solo_decode)) << n_others << " others";
    EXPECT_TRUE(SameBits(batched.Row(0), solo.Row(0)));
  }
}

TEST(RecurrentOpsTest, SwappedSlotsMatchSoloRuns) {
  // A is fresh; B resumes from the state in its slot. Solo: A on slot 1, B on slot 2.
  // Batched: B's state moved to slot 1 and A put on slot 2 (dirty with B's old state).
  for (bool reference : {false, true}) {
    std::mt19937_64 rng(5);
    const SeqInputs a = RandomSeq(rng, 12), b = RandomSeq(rng, 12);
    auto backend = Cpu(reference);
    Layer solo(21), batched(21);
    const auto ya = Step(*backend, solo, {{&a, 0, 12, 1, true}})[0];
    const auto yb = Step(*backend, solo, {{&b, 0, 12, 2, false}})[0];
    batched.CopyRow(2, 1);
    const auto out = Step(*backend, batched, {{&b, 0, 12, 1, false}, {&a, 0, 12, 2, true}});
    EXPECT_TRUE(SameBits(out[0], yb)) << "reference " << reference;
    EXPECT_TRUE(SameBits(out[1], ya)) << "reference " << reference;
    EXPECT_TRUE(SameBits(batched.Row(1), solo.Row(2)));
    EXPECT_TRUE(SameBits(batched.Row(2), solo.Row(1)));
  }
}

TEST(RecurrentOpsTest, FreshSequenceIgnoresADirtySlot) {
  // The same fresh prompt on a zeroed slot and on a slot full of NaN: identical outputs
  // and states (a single NaN read would poison both).
  for (bool reference : {false, true}) {
    std::mt19937_64 rng(6);
    const SeqInputs a = RandomSeq(rng, 19);
    auto backend = Cpu(reference);
    Layer clean(8), dirty(8);
    std::fill(clean.ConvRow(4), clean.ConvRow(5), 0.0f);
    std::fill(clean.SsmRow(4), clean.SsmRow(5), 0.0f);
    std::fill(dirty.ConvRow(4), dirty.ConvRow(5), std::numeric_limits<float>::quiet_NaN());
    std::fill(dirty.SsmRow(4), dirty.SsmRow(5), std::numeric_limits<float>::quiet_NaN());
    for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{19}, {1}}) {
      EXPECT_TRUE(SameBits(RunSplit(*backend, clean, a, 4, lengths, true),
                           RunSplit(*backend, dirty, a, 4, lengths, true)));
      EXPECT_TRUE(SameBits(clean.Row(4), dirty.Row(4)));
    }
  }
}

TEST(RecurrentOpsTest, HeadsReadTheirGroup) {
  // 4 heads, 2 groups: heads 0-1 read group 0, heads 2-3 group 1. With group 1's B and C
  // zero, heads 2-3 give exactly D x (their state stays 0 when fresh); heads 0-1 do not.
  for (bool reference : {false, true}) {
    std::mt19937_64 rng(12);
    const int64_t rows = 10;
    const int64_t width = kInner + 2 * kGroups * kDState + kHeads;
    std::vector<float> packed = testing::RandomFloats(rng, rows * width);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t n = 0; n < kDState; ++n) {
        packed[t * width + kInner + kDState + n] = 0.0f;                      // B, group 1
        packed[t * width + kInner + kGroups * kDState + kDState + n] = 0.0f;  // C, group 1
      }
    }
    std::vector<float> a_log(kHeads, 0.5f), d = {0.5f, -1.0f, 0.75f, -0.25f}, bias(kHeads, -2.0f);
    std::vector<float> state(2 * kHeads * kHeaddim * kDState, 1.0f), y(rows * kInner);
    RecurrentBatch batch;
    batch.Add(rows, 0, true);
    auto backend = Cpu(reference);
    const Tensor p(packed.data(), DType::kF32, {rows, width});
    SsmScanOptions options;
    options.chunk_size = 4;
    ASSERT_TRUE(
        backend
            ->SsmScan(
                p.Columns(0, kInner), p.Columns(kInner + 2 * kGroups * kDState, kHeads),
                Tensor(a_log.data(), DType::kF32, {kHeads}), p.Columns(kInner, kGroups * kDState),
                p.Columns(kInner + kGroups * kDState, kGroups * kDState),
                Tensor(d.data(), DType::kF32, {kHeads}), Tensor(bias.data(), DType::kF32, {kHeads}),
                options, batch, Tensor(state.data(), DType::kF32, {2, kHeads, kHeaddim, kDState}),
                Tensor(y.data(), DType::kF32, {rows, kInner}))
            .ok());
    bool group0_differs = false;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < kHeads; ++h) {
        for (int64_t q = 0; q < kHeaddim; ++q) {
          const float x = packed[t * width + h * kHeaddim + q];
          const float got = y[t * kInner + h * kHeaddim + q];
          if (h >= 2) {
            ASSERT_EQ(got, d[h] * x) << "head " << h << " token " << t;
          } else {
            group0_differs |= got != d[h] * x;
          }
        }
      }
    }
    EXPECT_TRUE(group0_differs);
    for (int64_t i = 2 * kHeaddim * kDState; i < kHeads * kHeaddim * kDState; ++i) {
      ASSERT_EQ(state[i], 0.0f);
    }
  }
}

}  // namespace
}  // namespace coil
