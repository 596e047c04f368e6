// Nemotron-H (Mamba2, attention and MLP blocks) through the whole model on the CPU. Values
// are checked against the float64 reference in reference_model.h (written from the
// equations, no code shared with the kernels), prefill and decode, and against invariants:
// a prompt split at chunk multiples gives the prompt's logits whole, bit for bit, with pages
// of 1, 16 and 5 tokens (5 divides neither the chunk of 8 nor the split points) and the same
// bits whatever the page size; a sequence's logits do not depend on what shares its step;
// pages and a state row freed by one sequence and handed to the next give that sequence
// what fresh ones give; TP2 and TP4 (thread ranks) give the TP1 tokens and logits, and the
// reference's logits, in f32 and bf16, with KV heads split evenly, one KV head per rank, and
// query heads straddling KV groups.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/workers/runner/reference_model.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "tests/unit/workers/runner/thread_ranks.h"
#include "workers/model/shard_layout.h"

namespace coil {
namespace {

using testing_reference::LoadedModel;
using testing_reference::PlanOf;
using testing_reference::RunOf;
using testing_reference::TestPages;
using testing_reference::TokensBelow;
using testing_reference::WithPages;
using testing_reference::WorstRowError;

constexpr int32_t kVocab = 256;  // nemotron-tiny's, unpadded

std::string WriteTiny(const std::string& name, checkpoint::DType dtype,
                      const std::vector<std::pair<std::string, std::string>>& sets = {}) {
  auto dir = testing_reference::WriteShape("hybrid_" + name, "nemotron-tiny", dtype, sets);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : std::string();
}

std::unique_ptr<LoadedModel> Load(const std::string& dir, const TestPages& pages,
                                  int64_t state_rows = 4, bool reference = false) {
  BackendOptions options;
  options.threads = 2;
  options.use_reference = reference;
  auto loaded =
      testing_reference::LoadOn(dir, *CreateBackend(BackendKind::kCpu, options), state_rows,
                                model::WeightType::kAuto, pages.Options(state_rows));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

// max |a - b| / max |b| over a row.
double RowError(const float* a, const std::vector<double>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

// A prompt in one step, then decode steps of fixed tokens, every row's logits against the
// reference fed the same tokens one by one.
void ExpectMatchesReference(const std::string& dir, bool reference_mode, double tolerance) {
  const TestPages pages{16, 4};
  std::unique_ptr<LoadedModel> loaded = Load(dir, pages, 4, reference_mode);
  ASSERT_TRUE(loaded);
  const int64_t width = loaded->model->config().padded_vocab_size();
  testing_reference::ReferenceModel reference(loaded->files);
  std::vector<int32_t> tokens = TokensBelow(kVocab, 21, 11);  // 21: not a chunk multiple
  auto prefill =
      loaded->runner->ExecuteAllLogits(WithPages(PlanOf({RunOf(1, 0, tokens, 0, 21)}, 1), pages));
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  double worst_prefill = 0.0, worst_decode = 0.0;
  for (int t = 0; t < 21; ++t) {
    worst_prefill =
        std::max(worst_prefill, RowError(&(*prefill)[t * width], reference.Step(tokens[t])));
  }
  for (int step = 0; step < 12; ++step) {  // across the page boundary at 32
    tokens.push_back((7 + 31 * step) % kVocab);
    const int32_t n = static_cast<int32_t>(tokens.size());
    auto decode = loaded->runner->ExecuteAllLogits(
        WithPages(PlanOf({RunOf(1, 0, tokens, n - 1, 1)}, 2 + step), pages));
    ASSERT_TRUE(decode.ok()) << decode.status();
    worst_decode = std::max(worst_decode, RowError(decode->data(), reference.Step(tokens.back())));
  }
  EXPECT_LT(worst_prefill, tolerance) << "prefill";
  EXPECT_LT(worst_decode, tolerance) << "decode";
}

TEST(HybridModelTest, F32LogitsMatchFloat64ReferenceInBothScanModes) {
  const std::string dir = WriteTiny("f32", checkpoint::DType::kF32);
  ExpectMatchesReference(dir, /*reference_mode=*/true, 1e-5);
  ExpectMatchesReference(dir, /*reference_mode=*/false, 1e-5);
}

TEST(HybridModelTest, Bf16LogitsWithinBf16Tolerance) {
  // The reference reads the stored bf16 values as f32; coil also rounds activations entering
  // a bf16 matmul, and K/V in the cache, to bf16: hence the looser bound.
  ExpectMatchesReference(WriteTiny("bf16", checkpoint::DType::kBF16), false, 2e-2);
}

TEST(HybridModelTest, MultiQueryAttentionMatchesReference) {
  const std::string dir = WriteTiny("mqa", checkpoint::DType::kF32, {{"num_key_value_heads", "1"}});
  ExpectMatchesReference(dir, false, 1e-5);
}

// A 37-token prompt whole on row 0, then in pieces of 8, 16 and 13 (chunk multiples but the
// last) on row 1: the pieces' logits are the whole's rows, bit for bit; and the whole's
// logits are the same bits whatever the page size.
TEST(HybridModelTest, SplitEqualsWholeBitForBitAtEveryPageSize) {
  const std::string dir = WriteTiny("split", checkpoint::DType::kF32);
  const std::vector<int32_t> tokens = TokensBelow(kVocab, 37, 5);
  std::vector<float> first_whole;
  for (const bool reference : {false, true}) {
    first_whole.clear();
    for (const int32_t block_size : {1, 16, 5}) {
      SCOPED_TRACE(absl::StrCat("block_size ", block_size, reference ? ", reference mode" : ""));
      const TestPages pages{block_size, (40 + block_size - 1) / block_size};
      std::unique_ptr<LoadedModel> loaded = Load(dir, pages, 2, reference);
      ASSERT_TRUE(loaded);
      const int64_t width = loaded->model->config().padded_vocab_size();
      auto whole = loaded->runner->ExecuteAllLogits(
          WithPages(PlanOf({RunOf(1, 0, tokens, 0, 37)}, 1), pages));
      ASSERT_TRUE(whole.ok()) << whole.status();
      if (first_whole.empty()) first_whole = *whole;
      EXPECT_EQ(*whole, first_whole) << "the page size changed the logits";
      int32_t begin = 0;
      uint64_t step = 1;
      for (const int32_t count : {8, 16, 13}) {
        auto part = loaded->runner->ExecuteAllLogits(
            WithPages(PlanOf({RunOf(2, 1, tokens, begin, count)}, ++step), pages));
        ASSERT_TRUE(part.ok()) << part.status();
        for (int64_t i = 0; i < count * width; ++i) {
          ASSERT_EQ((*part)[i], (*whole)[begin * width + i])
              << "piece at " << begin << ", element " << i;
        }
        begin += count;
      }
    }
  }
}

// A sequence alone and among 2, 7 and 20 others (decodes and prefill chunks mixed, each on
// its own row and pages): its prefill and decode logits are bit-identical.
TEST(HybridModelTest, LogitsDoNotDependOnTheBatch) {
  const std::string dir = WriteTiny("batch", checkpoint::DType::kBF16);
  const TestPages pages{16, 2};
  std::vector<float> alone_first, alone_second;
  for (const int others : {0, 2, 7, 20}) {
    std::unique_ptr<LoadedModel> loaded = Load(dir, pages, 24);
    ASSERT_TRUE(loaded);
    const std::vector<int32_t> target = TokensBelow(kVocab, 14, 99);
    std::vector<ScheduledSequence> step1 = {RunOf(1000, 23, target, 0, 13)};
    std::vector<std::vector<int32_t>> prompts;
    for (int o = 0; o < others; ++o) {
      prompts.push_back(TokensBelow(kVocab, 3 + o % 11, 1000 + o));
      if (o % 2 == 0) {
        step1.push_back(
            RunOf(o, o, prompts.back(), 0, static_cast<int32_t>(prompts.back().size()) - 1));
      }
    }
    auto first = loaded->runner->ExecuteAllLogits(WithPages(PlanOf(step1, 1), pages));
    ASSERT_TRUE(first.ok()) << first.status();
    std::vector<ScheduledSequence> step2 = {RunOf(1000, 23, target, 13, 1)};
    for (int o = 0; o < others; ++o) {
      const int32_t n = static_cast<int32_t>(prompts[o].size());
      step2.push_back(o % 2 == 0 ? RunOf(o, o, prompts[o], n - 1, 1)
                                 : RunOf(o, o, prompts[o], 0, n));
    }
    auto second = loaded->runner->ExecuteAllLogits(WithPages(PlanOf(step2, 2), pages));
    ASSERT_TRUE(second.ok()) << second.status();
    const size_t width = static_cast<size_t>(loaded->model->config().padded_vocab_size());
    // The target is the first row block of step 1 and (a decode) row 0 of step 2.
    const std::vector<float> target_first(first->begin(), first->begin() + 13 * width);
    const std::vector<float> target_second(second->begin(), second->begin() + width);
    if (others == 0) {
      alone_first = target_first;
      alone_second = target_second;
      continue;
    }
    EXPECT_EQ(target_first, alone_first) << others << " others, prefill";
    EXPECT_EQ(target_second, alone_second) << others << " others, decode";
  }
}

// Sequence A fills its row and pages; B then gets A's row and A's pages (as the scheduler
// hands them on after A finishes or is preempted, without clearing them). B's logits must
// be those B gets on a fresh model: nothing of A is read.
TEST(HybridModelTest, ReusedPagesAndRowsGiveWhatFreshOnesGive) {
  const std::string dir = WriteTiny("reuse", checkpoint::DType::kF32);
  const TestPages pages{4, 8};
  const std::vector<int32_t> a = TokensBelow(kVocab, 29, 1), b = TokensBelow(kVocab, 18, 2);
  std::unique_ptr<LoadedModel> used = Load(dir, pages, 2);
  std::unique_ptr<LoadedModel> fresh = Load(dir, pages, 2);
  ASSERT_TRUE(used && fresh);
  ASSERT_TRUE(
      used->runner->ExecuteAllLogits(WithPages(PlanOf({RunOf(1, 0, a, 0, 29)}, 1), pages)).ok());
  // B on row 0, whose pages 0..7 hold A's keys (B needs 5 of them), prefill then a decode.
  std::vector<float> got, want;
  for (LoadedModel* m : {used.get(), fresh.get()}) {
    auto prefill =
        m->runner->ExecuteAllLogits(WithPages(PlanOf({RunOf(2, 0, b, 0, 17)}, 2), pages));
    auto decode = m->runner->ExecuteAllLogits(WithPages(PlanOf({RunOf(2, 0, b, 17, 1)}, 3), pages));
    ASSERT_TRUE(prefill.ok() && decode.ok());
    std::vector<float>& out = m == used.get() ? got : want;
    out = *prefill;
    out.insert(out.end(), decode->begin(), decode->end());
  }
  EXPECT_EQ(got, want);
  // And the pages of a sequence are its own: B's table in reverse order (pages 7, 6, ...)
  // gives the same bits as in order.
  std::unique_ptr<LoadedModel> reversed = Load(dir, pages, 2);
  StepPlan plan = WithPages(PlanOf({RunOf(2, 0, b, 0, 17)}, 1), pages);
  std::vector<int32_t>& table = plan.sequences[0].kv_block_table;
  for (int32_t& page : table) page = 7 - page;
  auto shuffled = reversed->runner->ExecuteAllLogits(plan);
  ASSERT_TRUE(shuffled.ok()) << shuffled.status();
  EXPECT_EQ(*shuffled, std::vector<float>(want.begin(), want.begin() + shuffled->size()));
}

// A plan that reuses a page another sequence of the same step writes, or whose table does
// not cover its run, fails the step (naming the problem) and leaves the model usable.
TEST(HybridModelTest, BadBlockTablesFailTheStep) {
  const std::string dir = WriteTiny("bad_tables", checkpoint::DType::kF32);
  const TestPages pages{4, 4};
  std::unique_ptr<LoadedModel> loaded = Load(dir, pages, 2);
  ASSERT_TRUE(loaded);
  const std::vector<int32_t> a = TokensBelow(kVocab, 6, 3), b = TokensBelow(kVocab, 5, 4);
  StepPlan shared = WithPages(PlanOf({RunOf(1, 0, a, 0, 6), RunOf(2, 1, b, 0, 5)}, 1), pages);
  shared.sequences[1].kv_block_table[0] = shared.sequences[0].kv_block_table[1];
  StepResult result = loaded->runner->Execute(shared);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("page"), std::string::npos) << result.error;
  StepPlan short_table = WithPages(PlanOf({RunOf(1, 0, a, 0, 6)}, 2), pages);
  short_table.sequences[0].kv_block_table.pop_back();
  result = loaded->runner->Execute(short_table);
  EXPECT_FALSE(result.ok);
  StepPlan outside = WithPages(PlanOf({RunOf(1, 0, a, 0, 6)}, 3), pages);
  outside.sequences[0].kv_block_table[0] = 99;
  result = loaded->runner->Execute(outside);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("99"), std::string::npos) << result.error;
  result = loaded->runner->Execute(WithPages(PlanOf({RunOf(1, 0, a, 0, 6)}, 4), pages));
  EXPECT_TRUE(result.ok) << result.error;
}

// Which heads a rank holds, worked out by hand, and the TP sizes that are refused.
TEST(HybridShardLayoutTest, RanksHoldTheKvHeadsTheirQueryHeadsRead) {
  model::ModelConfig config = *model::NamedModelShape("nemotron-tiny");
  config.attention_heads = 12;
  config.kv_heads = 3;  // 4 query heads per KV head
  // TP4: rank 1 holds query heads 3..5, which read KV heads 0 (head 3) and 1 (4, 5).
  const auto layout = model::MakeShardLayout(config, 4, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->q_head_begin, 3);
  EXPECT_EQ(layout->q_head_end, 6);
  EXPECT_EQ(layout->kv_head_begin, 0);
  EXPECT_EQ(layout->kv_head_end, 2);
  EXPECT_FALSE(layout->kv_groups_whole());
  EXPECT_EQ(layout->kv_head_of(0), 0);
  EXPECT_EQ(layout->kv_head_of(1), 1);
  // Each local KV head gets a cache layer of its own: 2 attention layers x 2 KV heads.
  const KvCacheShape kv = model::ShardKvShape(config, *layout, 10, 16, DType::kBF16);
  EXPECT_EQ(kv.layers, 4);
  EXPECT_EQ(kv.kv_heads, 1);
  EXPECT_EQ(kv.bytes_per_page(), 2 * 2 * 16 * 2 * 16 * 2);  // K and V, 2 layers, 2 KV heads
  // TP3: rank 2 holds query heads 8..11, exactly KV head 2.
  const auto whole = model::MakeShardLayout(config, 3, 2);
  ASSERT_FALSE(whole.ok());  // but 8 Mamba2 heads do not divide by 3
  EXPECT_THAT(std::string(whole.status().message()), ::testing::HasSubstr("8 heads"));
  config.attention_heads = 6;  // 6 heads, 3 KV heads: TP4 divides neither
  const auto refused = model::MakeShardLayout(config, 4, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("num_attention_heads"));
  config.attention_heads = 4;
  config.intermediate_size = 130;  // not a multiple of 4
  const auto mlp = model::MakeShardLayout(config, 4, 0);
  ASSERT_FALSE(mlp.ok());
  EXPECT_THAT(std::string(mlp.status().message()), ::testing::HasSubstr("intermediate_size"));
}

struct TpCase {
  int tp;
  int heads, kv_heads;
  checkpoint::DType dtype = checkpoint::DType::kF32;
};

class HybridThreadRanksTest : public ::testing::TestWithParam<TpCase> {};

// TP N on thread ranks against TP1: the same tokens (greedy, plain temperature, top_p) and
// logits within 1e-5 relative (TP changes only the order of some sums; bf16 weights are
// converted to the same f32 products on every rank). And every rank's logits, prompt and
// decode, against the float64 reference fed the same tokens: within 1e-5 for f32 weights,
// 6e-2 for bf16 (the reference reads the same bf16 weights but keeps its activations and
// K/V in float64; with 12 heads over 26 positions the bf16 rounding reaches 4.7e-2 at TP1
// already, and the TP1 match above shows that sharding adds nothing to it).
TEST_P(HybridThreadRanksTest, ShardsGiveTheTp1TokensAndLogits) {
  const TpCase& c = GetParam();
  const bool bf16 = c.dtype == checkpoint::DType::kBF16;
  const std::string dir =
      WriteTiny(absl::StrCat("tp", c.tp, "_", c.heads, "_", c.kv_heads, bf16 ? "_bf16" : ""),
                c.dtype,
                {{"num_attention_heads", absl::StrCat(c.heads)},
                 {"num_key_value_heads", absl::StrCat(c.kv_heads)}});
  const auto cpu = [](int) { return CreateBackend(BackendKind::kCpu, {.threads = 1}); };
  const std::vector<int32_t> prompt = TokensBelow(kVocab, 23, 17);
  const TestPages pages{16, 4};  // 64 positions per row: the prompt and 24 tokens
  const auto tp1 = testing_reference::RunOnThreadRanks(dir, 1, cpu, prompt, 24, {}, pages);
  const auto sharded = testing_reference::RunOnThreadRanks(dir, c.tp, cpu, prompt, 24, {}, pages);
  const size_t width = tp1[0].prompt_logits.size() / prompt.size();
  testing_reference::ExpectShardsMatchTp1(tp1, sharded, width, bf16 ? 1e-4 : 1e-5);

  auto files = model::OpenModelFiles(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  testing_reference::ReferenceModel reference(*files);
  std::vector<std::vector<double>> want;
  for (int32_t token : prompt) want.push_back(reference.Step(token));
  for (int32_t i = 0; i < testing_reference::kDecodeSteps; ++i) {
    want.push_back(reference.Step(7 + 3 * i));  // the tokens RunOnThreadRanks feeds
  }
  const double tolerance = bf16 ? 6e-2 : 1e-5;
  for (size_t rank = 0; rank < sharded.size(); ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", sharded.size()));
    const testing_reference::RankOutputs& got = sharded[rank];
    ASSERT_EQ(got.prompt_logits.size(), prompt.size() * width);
    ASSERT_EQ(got.decode_logits.size(), testing_reference::kDecodeSteps * width);
    double worst = 0.0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      worst = std::max(worst, RowError(&got.prompt_logits[t * width], want[t]));
    }
    for (int32_t i = 0; i < testing_reference::kDecodeSteps; ++i) {
      worst = std::max(worst, RowError(&got.decode_logits[i * width], want[prompt.size() + i]));
    }
    EXPECT_LT(worst, tolerance);
  }
}

// 4 heads over 2 KV heads: split evenly at TP2, one KV head read by each rank's query head at
// TP4 (2 does not divide by 4); 6 over 3 at TP2 and 12 over 3 at TP4: a rank's query heads
// straddle two KV groups.
INSTANTIATE_TEST_SUITE_P(Cases, HybridThreadRanksTest,
                         ::testing::Values(TpCase{2, 4, 2}, TpCase{4, 4, 2}, TpCase{2, 6, 3},
                                           TpCase{4, 12, 3},
                                           TpCase{2, 4, 2, checkpoint::DType::kBF16},
                                           TpCase{4, 12, 3, checkpoint::DType::kBF16}),
                         [](const ::testing::TestParamInfo<TpCase>& info) {
                           return absl::StrCat(
                               "tp", info.param.tp, "_heads", info.param.heads, "_kv",
                               info.param.kv_heads,
                               info.param.dtype == checkpoint::DType::kBF16 ? "_bf16" : "");
                         });

}  // namespace
}  // namespace coil
