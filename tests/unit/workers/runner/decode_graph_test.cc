// The host side of the GPU path, on the CPU: the one-block step metadata, decode buckets
// and their scratch-row padding (a padded step computes the real rows bit for bit as the
// unpadded one and touches no other state row), and greedy sampling from the device argmax
// (the same tokens as the host sampler).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "workers/sampler.h"
#include "workers/model/step_metadata.h"

namespace coil {
namespace {

using testing_reference::LoadedModel;
using testing_reference::PlanOf;
using testing_reference::RunOf;
using testing_reference::TestPages;
using testing_reference::TokensBelow;
using testing_reference::WithPages;

// The worked example of docs/ARCHITECTURE.md §4: decodes of A (slot 2) and B (slot 0), a fresh
// 3-token chunk of C (slot 1) sampled at its end, and a 2-token chunk of D (slot 3) resumed at
// 40, not sampled.
StepMetadata WorkedExample() {
  std::vector<int32_t> a = {0, 0, 0, 0, 0, 0, 11}, b = {0, 0, 12}, c = {13, 14, 15};
  std::vector<int32_t> d(42, 16);
  d[41] = 17;
  ScheduledSequence run_d = RunOf(4, 3, d, 40, 2);
  run_d.sample = false;
  const StepPlan plan =
      PlanOf({RunOf(1, 2, a, 6, 1), RunOf(2, 0, b, 2, 1), RunOf(3, 1, c, 0, 3), run_d}, 1);
  auto meta = BuildStepMetadata(plan, 100, 4);
  EXPECT_TRUE(meta.ok()) << meta.status();
  return *meta;
}

TEST(StepMetadataPackTest, EveryArrayLandsAtItsOffsetInOneBlock) {
  const StepMetadata meta = WorkedExample();
  ASSERT_EQ(meta.token_ids, (std::vector<int32_t>{11, 12, 13, 14, 15, 16, 17}));
  PackedStepMetadata packed;
  PackStepMetadata(meta, packed);
  auto expect_at = [&](size_t offset, const std::vector<int32_t>& values, const char* what) {
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(packed.words[offset + i], values[i]) << what << "[" << i << "]";
    }
  };
  expect_at(packed.token_ids, meta.token_ids, "token_ids");
  expect_at(packed.cu_seqlens, {0, 1, 2, 5, 7}, "cu_seqlens");
  expect_at(packed.slots, {2, 0, 1, 3}, "slots");
  expect_at(packed.start_positions, {6, 2, 0, 40}, "start_positions");
  expect_at(packed.sample_rows, {0, 1, 4}, "sample_rows");
  EXPECT_EQ(packed.token_ids, 0u);  // the ids open the block: the embedding reads them there
  uint8_t fresh[4];
  std::memcpy(fresh, packed.words.data() + packed.fresh, 4);
  EXPECT_EQ(std::vector<uint8_t>(fresh, fresh + 4), (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(packed.words.size(), packed.fresh + 1);
  EXPECT_LE(static_cast<int64_t>(packed.words.size()), MaxPackedWords(meta.num_tokens()));

  // Reused for a smaller step: the offsets follow the new sizes, nothing stale remains.
  const StepMetadata small = ScratchDecodeBatch(1, 9);
  PackStepMetadata(small, packed);
  EXPECT_EQ(packed.words, (std::vector<int32_t>{0, 0, 1, 9, 0, 0, 0}));
}

TEST(StepMetadataPackTest, TheBoundHoldsForOneTokenPerSequenceAndAllSampled) {
  // The most sequences and samples a step of `rows` tokens can have: one each per token.
  for (int64_t rows : {1, 2, 3, 4, 5, 8, 31, 256}) {
    const StepMetadata meta = ScratchDecodeBatch(rows, 0);
    PackedStepMetadata packed;
    PackStepMetadata(meta, packed);
    EXPECT_EQ(static_cast<int64_t>(packed.words.size()), MaxPackedWords(rows)) << rows;
  }
}

// A hybrid decode step of three sequences on 10 KV pages of 4 tokens, padded to 4: its
// contexts are `contexts`, each sequence on pages of its own.
StepMetadata HybridDecode(const std::vector<int32_t>& contexts) {
  std::vector<ScheduledSequence> runs;
  for (size_t i = 0; i < contexts.size(); ++i) {
    const std::vector<int32_t> tokens(static_cast<size_t>(contexts[i]), 3);
    runs.push_back(RunOf(i, static_cast<int32_t>(i), tokens, contexts[i] - 1, 1));
  }
  StepPlan plan = PlanOf(runs, 1);
  int32_t next = 0;
  for (ScheduledSequence& seq : plan.sequences) {
    for (int32_t p = 0; p < seq.start_position + 1; p += 4) seq.kv_block_table.push_back(next++);
  }
  auto meta = BuildStepMetadata(plan, 10, 4, KvPages{4, 10});
  EXPECT_TRUE(meta.ok()) << meta.status();
  return PadDecodeBatch(*meta, 4, 4, /*scratch_page=*/10);
}

// A decode graph reads the step's arrays at the addresses it was captured with: every
// offset of a bucket's packed metadata is the same whatever its block tables hold, the
// tables coming last; their words are bounded by MaxDecodePackedWords.
TEST(StepMetadataPackTest, ABucketsOffsetsDoNotDependOnItsBlockTables) {
  const StepMetadata short_tables = HybridDecode({1, 2, 5});   // 1 + 1 + 2 pages
  const StepMetadata long_tables = HybridDecode({12, 9, 13});  // 3 + 3 + 4 pages
  PackedStepMetadata a, b;
  PackStepMetadata(short_tables, a);
  PackStepMetadata(long_tables, b);
  for (auto offset : {&PackedStepMetadata::token_ids, &PackedStepMetadata::cu_seqlens,
                      &PackedStepMetadata::slots, &PackedStepMetadata::start_positions,
                      &PackedStepMetadata::sample_rows, &PackedStepMetadata::fresh,
                      &PackedStepMetadata::cu_blocks, &PackedStepMetadata::block_table}) {
    EXPECT_EQ(a.*offset, b.*offset);
  }
  EXPECT_EQ(b.words.size() - a.words.size(), 6u);  // only the tables' length differs
  EXPECT_EQ(b.block_table + long_tables.kv.block_table.size(), b.words.size());  // tables last
  // The padding entry's table is the scratch page; the others' pages follow in order.
  EXPECT_EQ(std::vector<int32_t>(b.words.begin() + static_cast<std::ptrdiff_t>(b.cu_blocks),
                                 b.words.begin() + static_cast<std::ptrdiff_t>(b.block_table)),
            (std::vector<int32_t>{0, 3, 6, 10, 11}));
  EXPECT_EQ(std::vector<int32_t>(b.words.begin() + static_cast<std::ptrdiff_t>(b.block_table),
                                 b.words.end()),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(
      std::vector<int32_t>(b.words.begin() + static_cast<std::ptrdiff_t>(b.start_positions),
                           b.words.begin() + static_cast<std::ptrdiff_t>(b.start_positions) + 4),
      (std::vector<int32_t>{11, 8, 12, 0}));  // the K/V write positions
  // Four pages per sequence (16 positions of 4) bound the long step: 4 x 4 + 5 words of
  // tables over the Mamba2 step's most.
  EXPECT_LE(static_cast<int64_t>(b.words.size()), MaxDecodePackedWords(4, 4));
  EXPECT_EQ(MaxDecodePackedWords(4, 4), MaxPackedWords(4) + 5 + 16);
  EXPECT_EQ(MaxDecodePackedWords(4, 0), MaxPackedWords(4));
}

// Padding a hybrid decode step: each added entry writes and reads position 0 of the scratch
// page (which every padding entry may share), and the padded batch passes the KV checks;
// the capture batch is padding throughout.
TEST(DecodeBucketTest, HybridPaddingTakesTheScratchPage) {
  const StepMetadata padded = HybridDecode({12, 9, 13});
  EXPECT_EQ(padded.kv.block_size, 4);
  EXPECT_EQ(padded.kv.start_positions, (std::vector<int32_t>{11, 8, 12, 0}));
  EXPECT_EQ(padded.kv.cu_seqlens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(padded.kv.cu_blocks, (std::vector<int32_t>{0, 3, 6, 10, 11}));
  EXPECT_EQ(padded.kv.block_table.back(), 10);
  EXPECT_TRUE(ValidatePagedKvBatch(padded.kv, 4, 10).ok());
  PagedKvBatch capacity = padded.kv;
  capacity.max_context = 16;  // a graph's capacity: every context within it
  EXPECT_TRUE(ValidatePagedKvBatch(capacity, 4, 10).ok());
  capacity.max_context = 12;  // sequence 2 holds 13 positions
  EXPECT_FALSE(ValidatePagedKvBatch(capacity, 4, 10).ok());

  const StepMetadata scratch = ScratchDecodeBatch(8, 4, KvPages{4, 10});
  EXPECT_EQ(scratch.kv.block_size, 4);
  EXPECT_EQ(scratch.kv.block_table, std::vector<int32_t>(8, 10));
  EXPECT_EQ(scratch.kv.start_positions, std::vector<int32_t>(8, 0));
  EXPECT_TRUE(ValidatePagedKvBatch(scratch.kv, 8, 10).ok());
  EXPECT_TRUE(ScratchDecodeBatch(8, 4).kv.block_table.empty());  // no attention: no tables
}

TEST(DecodeBucketTest, TheSmallestPowerOfTwoAtLeastTheSequences) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {
      {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {255, 256}, {256, 256}, {257, 512}};
  for (const auto& [n, bucket] : cases) EXPECT_EQ(DecodeBucket(n), bucket) << n;
}

TEST(DecodeBucketTest, DecodeOnlyMeansOneResumedTokenPerSequence) {
  EXPECT_FALSE(IsDecodeOnly(WorkedExample()));  // a prefill chunk
  EXPECT_FALSE(IsDecodeOnly(StepMetadata{}));
  const std::vector<int32_t> tokens = {1, 2, 3};
  auto decodes =
      BuildStepMetadata(PlanOf({RunOf(1, 0, tokens, 2, 1), RunOf(2, 1, tokens, 1, 1)}, 1), 10, 4);
  ASSERT_TRUE(decodes.ok());
  EXPECT_TRUE(IsDecodeOnly(*decodes));
  EXPECT_TRUE(SamplesEveryRow(*decodes));
  EXPECT_FALSE(SamplesEveryRow(WorkedExample()));  // a prompt chunk samples its last row only
  // A one-token prompt is a run of one token but starts fresh: not replayed.
  auto fresh =
      BuildStepMetadata(PlanOf({RunOf(1, 0, tokens, 2, 1), RunOf(2, 1, tokens, 0, 1)}, 1), 10, 4);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(IsDecodeOnly(*fresh));
}

TEST(DecodeBucketTest, PaddingAppendsScratchEntriesAfterTheRealOnes) {
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  std::vector<ScheduledSequence> runs = {RunOf(1, 5, tokens, 3, 1), RunOf(2, 1, tokens, 2, 1),
                                         RunOf(3, 3, tokens, 1, 1)};
  runs[1].sample = false;
  auto meta = BuildStepMetadata(PlanOf(runs, 1), 10, 8);
  ASSERT_TRUE(meta.ok());
  const StepMetadata padded = PadDecodeBatch(*meta, 4, 8);
  EXPECT_EQ(padded.token_ids, (std::vector<int32_t>{8, 7, 6, 0}));
  EXPECT_EQ(padded.batch.cu_seqlens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(padded.batch.slots, (std::vector<int32_t>{5, 1, 3, 8}));
  EXPECT_EQ(padded.batch.fresh, (std::vector<uint8_t>{0, 0, 0, 0}));
  EXPECT_EQ(padded.sample_rows, (std::vector<int32_t>{0, 2, 2, 3}));  // the real samples first
  EXPECT_EQ(padded.sample_sequences, meta->sample_sequences);
  EXPECT_TRUE(IsDecodeOnly(padded));
  EXPECT_FALSE(SamplesEveryRow(padded));  // so it runs op by op, with the gather
  EXPECT_TRUE(ValidateRecurrentBatch(padded.batch, 4, 8).ok());
  // The capture batch: every entry on the scratch row, which may repeat.
  const StepMetadata scratch = ScratchDecodeBatch(8, 8);
  EXPECT_EQ(scratch.batch.slots, std::vector<int32_t>(8, 8));
  EXPECT_EQ(scratch.num_samples(), 8);
  EXPECT_TRUE(SamplesEveryRow(scratch));  // what a graph is captured for
  EXPECT_TRUE(ValidateRecurrentBatch(scratch.batch, 8, 8).ok());
}

std::unique_ptr<LoadedModel> LoadTiny(const std::string& name, int64_t state_rows) {
  auto dir = testing_reference::WriteShape(name, "tiny", checkpoint::DType::kF32, {});
  EXPECT_TRUE(dir.ok()) << dir.status();
  BackendOptions options;
  options.threads = 2;
  auto loaded = testing_reference::LoadOn(*dir, *CreateBackend(BackendKind::kCpu, options),
                                          state_rows, model::WeightType::kAuto);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return std::move(loaded).value();
}

// A step that samples every row in order feeds lm_head from the final norm (bf16 rows with
// bf16 weights); one that skips a row gathers the sampled rows: the same logits for the rows
// both sample, bit for bit, and the same states.
TEST(DecodePaddingTest, SamplingEveryRowEqualsGatheringTheSampledRows) {
  std::vector<std::unique_ptr<LoadedModel>> models;
  for (const char* name : {"every_row", "gathered"}) {
    auto dir = testing_reference::WriteShape(name, "tiny", checkpoint::DType::kBF16, {});
    ASSERT_TRUE(dir.ok()) << dir.status();
    BackendOptions options;
    options.threads = 2;
    auto loaded = testing_reference::LoadOn(*dir, *CreateBackend(BackendKind::kCpu, options), 4,
                                            model::WeightType::kAuto);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    models.push_back(std::move(loaded).value());
  }
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> prefill, decodes;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(TokensBelow(250, 6 + 5 * i, 70 + i));
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    prefill.push_back(RunOf(i, i, prompts[i], 0, n - 1));
    decodes.push_back(RunOf(i, i, prompts[i], n - 1, 1));
  }
  std::vector<float> logits[2];
  for (int m = 0; m < 2; ++m) {
    ASSERT_TRUE(models[m]->runner->Execute(PlanOf(prefill, 1)).ok);
    std::vector<ScheduledSequence> step = decodes;
    if (m == 1) step[1].sample = false;
    auto meta = BuildStepMetadata(PlanOf(step, 2), models[m]->model->config().padded_vocab_size(), 4);
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(SamplesEveryRow(*meta), m == 0);
    ASSERT_TRUE(models[m]->runner->Forward(*meta, false, logits[m]).ok());
  }
  const size_t width = logits[1].size() / 2;
  ASSERT_EQ(logits[0].size(), 3 * width);
  EXPECT_EQ(std::vector<float>(logits[0].begin(), logits[0].begin() + width),
            std::vector<float>(logits[1].begin(), logits[1].begin() + width));
  EXPECT_EQ(std::vector<float>(logits[0].begin() + 2 * width, logits[0].end()),
            std::vector<float>(logits[1].begin() + width, logits[1].end()));
  for (int64_t row = 0; row < 3; ++row) {
    auto a = testing_reference::SnapshotState(*models[0]->backend, models[0]->runner->state_pool());
    auto b = testing_reference::SnapshotState(*models[1]->backend, models[1]->runner->state_pool());
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(testing_reference::StateRow(models[0]->runner->state_pool(), *a, row),
              testing_reference::StateRow(models[1]->runner->state_pool(), *b, row));
  }
}

// The host path's view of `plan`: `host` (the same weights, its own pool) runs the step,
// the host sampler takes its logits.
struct HostStep {
  std::vector<const ScheduledSequence*> rows;
  std::vector<float> logits;  // this rank's columns of the sampled rows
  std::vector<SampledToken> tokens;
};

HostStep StepOnHost(LoadedModel& host, const StepPlan& plan) {
  HostStep step;
  auto meta = BuildStepMetadata(plan, host.model->config().padded_vocab_size(), 8);
  EXPECT_TRUE(meta.ok()) << meta.status();
  if (!meta.ok()) return step;
  EXPECT_TRUE(host.runner->Forward(*meta, false, step.logits).ok());
  for (int32_t s : meta->sample_sequences) step.rows.push_back(&plan.sequences[s]);
  Sampler sampler(host.comm, host.model->layout().vocab,
                  static_cast<int32_t>(host.model->config().vocab_size));
  std::vector<float> scratch = step.logits;  // Sample changes its input
  auto tokens = sampler.Sample(step.rows, scratch.data());
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (tokens.ok()) step.tokens = std::move(tokens).value();
  return step;
}

// Checks the device path's tokens against the host path's, then appends each token to its
// prompt and returns the next step's decode runs.
std::vector<ScheduledSequence> CompareAndDecode(const StepResult& result, const HostStep& host,
                                                int32_t vocab, int step,
                                                std::vector<std::vector<int32_t>>& prompts) {
  EXPECT_EQ(result.tokens.size(), host.tokens.size());
  std::vector<ScheduledSequence> runs;
  for (size_t r = 0; r < host.rows.size() && r < result.tokens.size(); ++r) {
    EXPECT_EQ(result.tokens[r].token_id, host.tokens[r].token_id)
        << "step " << step << " row " << r;
    EXPECT_EQ(result.tokens[r].request_id, host.tokens[r].request_id);
    EXPECT_LT(result.tokens[r].token_id, vocab);
    const auto id = host.rows[r]->request_id;
    prompts[id].push_back(result.tokens[r].token_id);
    const int32_t n = static_cast<int32_t>(prompts[id].size());
    runs.push_back(RunOf(id, static_cast<int32_t>(id), prompts[id], n - 1, 1));
  }
  return runs;
}

// Three sequences prefilled on slots 0, 2 and 4 and one more on 5 that sits the decode out;
// then the three decode once, unpadded on one model and padded to 4 on the other.
TEST(DecodePaddingTest, PaddedDecodeKeepsTheRealRowsAndEveryOtherStateRow) {
  constexpr int64_t kRows = 6;
  std::unique_ptr<LoadedModel> plain = LoadTiny("pad_plain", kRows);
  std::unique_ptr<LoadedModel> padded = LoadTiny("pad_padded", kRows);
  const int32_t slots[] = {0, 2, 4, 5};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> prefill;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(TokensBelow(250, 5 + 3 * i, 40 + i));
    prefill.push_back(
        RunOf(i, slots[i], prompts[i], 0, static_cast<int32_t>(prompts[i].size()) - 1));
  }
  for (LoadedModel* m : {plain.get(), padded.get()}) {
    const StepResult result = m->runner->Execute(PlanOf(prefill, 1));
    ASSERT_TRUE(result.ok) << result.error;
  }
  std::vector<ScheduledSequence> decodes;
  for (int i = 0; i < 3; ++i) {
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    decodes.push_back(RunOf(i, slots[i], prompts[i], n - 1, 1));
  }
  auto meta = BuildStepMetadata(PlanOf(decodes, 2), 256, kRows);
  ASSERT_TRUE(meta.ok());
  ASSERT_TRUE(IsDecodeOnly(*meta));
  auto& plain_pool = const_cast<StatePool&>(plain->runner->state_pool());
  auto& padded_pool = const_cast<StatePool&>(padded->runner->state_pool());
  std::vector<float> plain_logits, padded_logits;
  ASSERT_TRUE(plain->runner->Forward(*meta, false, plain_logits).ok());
  const StepMetadata padded_meta =
      PadDecodeBatch(*meta, DecodeBucket(3), static_cast<int32_t>(kRows));
  ASSERT_TRUE(padded->runner->Forward(padded_meta, false, padded_logits).ok());
  ASSERT_EQ(padded_logits.size(), plain_logits.size() / 3 * 4);
  for (size_t i = 0; i < plain_logits.size(); ++i) {
    ASSERT_EQ(padded_logits[i], plain_logits[i]) << "element " << i;
  }
  auto plain_state = testing_reference::SnapshotState(*plain->backend, plain_pool);
  auto padded_state = testing_reference::SnapshotState(*padded->backend, padded_pool);
  ASSERT_TRUE(plain_state.ok() && padded_state.ok());
  // Every row but the scratch row (which the padding may write and nobody reads).
  for (int64_t row = 0; row < kRows; ++row) {
    EXPECT_EQ(testing_reference::StateRow(plain_pool, *plain_state, row),
              testing_reference::StateRow(padded_pool, *padded_state, row))
        << "state row " << row;
  }
}

// The hybrid's padded decode (what a graph replays): three sequences of a nemotron-tiny
// model decode once, unpadded on one model and padded to 4 with scratch-page entries at a
// graph's capacity on the other; the real rows' logits are equal bit for bit and so is
// every KV page and state row but the scratch ones.
TEST(DecodePaddingTest, PaddedHybridDecodeKeepsTheRealRowsPagesAndStates) {
  constexpr int64_t kRows = 4;
  const TestPages pages{4, 8};  // 8 pages of 4 tokens per state row
  auto dir =
      testing_reference::WriteShape("pad_hybrid", "nemotron-tiny", checkpoint::DType::kF32, {});
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::vector<std::unique_ptr<LoadedModel>> models;
  for (int i = 0; i < 2; ++i) {
    BackendOptions options;
    options.threads = 2;
    auto loaded = testing_reference::LoadOn(*dir, *CreateBackend(BackendKind::kCpu, options), kRows,
                                            model::WeightType::kAuto, pages.Options(kRows));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    models.push_back(std::move(loaded).value());
  }
  const int32_t slots[] = {0, 1, 3};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> prefill;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(TokensBelow(250, 6 + 7 * i, 60 + i));  // contexts 6, 13 and 20 after decode
    prefill.push_back(
        RunOf(i, slots[i], prompts[i], 0, static_cast<int32_t>(prompts[i].size()) - 1));
  }
  for (auto& m : models) {
    const StepResult result = m->runner->Execute(WithPages(PlanOf(prefill, 1), pages));
    ASSERT_TRUE(result.ok) << result.error;
  }
  std::vector<ScheduledSequence> decodes;
  for (int i = 0; i < 3; ++i) {
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    decodes.push_back(RunOf(i, slots[i], prompts[i], n - 1, 1));
  }
  const KvCache& plain_cache = *models[0]->runner->kv_cache();
  auto meta = BuildStepMetadata(WithPages(PlanOf(decodes, 2), pages), 256, kRows,
                                KvPages{4, plain_cache.pages()});
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_TRUE(IsDecodeOnly(*meta));
  std::vector<float> plain_logits, padded_logits;
  ASSERT_TRUE(models[0]->runner->Forward(*meta, false, plain_logits).ok());
  StepMetadata padded = PadDecodeBatch(*meta, DecodeBucket(3), static_cast<int32_t>(kRows),
                                       static_cast<int32_t>(plain_cache.scratch_page()));
  padded.kv.max_context = 32;  // the capacity of 8 pages of 4
  ASSERT_TRUE(models[1]->runner->Forward(padded, false, padded_logits).ok());
  ASSERT_EQ(padded_logits.size(), plain_logits.size() / 3 * 4);
  for (size_t i = 0; i < plain_logits.size(); ++i) {
    ASSERT_EQ(padded_logits[i], plain_logits[i]) << "element " << i;
  }
  auto plain_pages = testing_reference::SnapshotPages(*models[0]->backend, plain_cache);
  auto padded_pages =
      testing_reference::SnapshotPages(*models[1]->backend, *models[1]->runner->kv_cache());
  ASSERT_TRUE(plain_pages.ok() && padded_pages.ok());
  EXPECT_TRUE(*plain_pages == *padded_pages) << "a KV page other than the scratch page differs";
  auto& plain_pool = const_cast<StatePool&>(models[0]->runner->state_pool());
  auto& padded_pool = const_cast<StatePool&>(models[1]->runner->state_pool());
  auto plain_state = testing_reference::SnapshotState(*models[0]->backend, plain_pool);
  auto padded_state = testing_reference::SnapshotState(*models[1]->backend, padded_pool);
  ASSERT_TRUE(plain_state.ok() && padded_state.ok());
  for (int64_t row = 0; row < kRows; ++row) {
    EXPECT_EQ(testing_reference::StateRow(plain_pool, *plain_state, row),
              testing_reference::StateRow(padded_pool, *padded_state, row))
        << "state row " << row;
  }
}

// Greedy steps take the device argmax path; the host sampler over the same step's logits
// must choose the same tokens (the real vocabulary only, lowest id among equals).
TEST(GreedyDevicePathTest, SameTokensAsTheHostSampler) {
  std::unique_ptr<LoadedModel> device = LoadTiny("greedy_device", 8);
  std::unique_ptr<LoadedModel> host = LoadTiny("greedy_host", 8);
  const int32_t vocab = static_cast<int32_t>(device->model->config().vocab_size);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> runs;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(TokensBelow(vocab, 3 + 4 * i, 70 + i));
    runs.push_back(RunOf(i, i, prompts[i], 0, static_cast<int32_t>(prompts[i].size())));
  }
  for (int step = 0; step < 4; ++step) {
    const StepPlan plan = PlanOf(runs, static_cast<uint64_t>(step + 1));
    const StepResult result = device->runner->Execute(plan);
    ASSERT_TRUE(result.ok) << result.error;
    const HostStep expected = StepOnHost(*host, plan);
    ASSERT_TRUE(Sampler::AllGreedy(expected.rows));
    runs = CompareAndDecode(result, expected, vocab, step, prompts);
  }
}

// Plain temperature steps take the device Gumbel-max path; the host sampler over the same
// step's logits must choose the same tokens, step after step (the draws depend on the seed
// and the rng step only, so both sides draw the same numbers).
TEST(GumbelDevicePathTest, SameTokensAsTheHostSampler) {
  std::unique_ptr<LoadedModel> device = LoadTiny("gumbel_device", 8);
  std::unique_ptr<LoadedModel> host = LoadTiny("gumbel_host", 8);
  const int32_t vocab = static_cast<int32_t>(device->model->config().vocab_size);
  const float temperatures[] = {0.3f, 1.0f, 2.0f, 5.0f, 0.8f};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> runs;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(TokensBelow(vocab, 3 + 4 * i, 90 + i));
    runs.push_back(RunOf(i, i, prompts[i], 0, static_cast<int32_t>(prompts[i].size())));
  }
  int differs_from_argmax = 0;
  for (int step = 0; step < 6; ++step) {
    for (ScheduledSequence& run : runs) {
      run.sampling.temperature = temperatures[run.request_id];
      run.sampling.seed = 0x9e3779b97f4a7c15ull * (run.request_id + 1);
      run.rng_step = step;
    }
    const StepPlan plan = PlanOf(runs, static_cast<uint64_t>(step + 1));
    const StepResult result = device->runner->Execute(plan);
    ASSERT_TRUE(result.ok) << result.error;
    const HostStep expected = StepOnHost(*host, plan);
    ASSERT_TRUE(Sampler::AllPlainTemperature(expected.rows));
    const int64_t width = host->model->layout().vocab.size();
    for (size_t r = 0; r < result.tokens.size() && r < expected.rows.size(); ++r) {
      const float* row = expected.logits.data() + r * width;
      differs_from_argmax += result.tokens[r].token_id !=
                             static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    runs = CompareAndDecode(result, expected, vocab, step, prompts);
  }
  // The steps really sampled (not the argmax every time).
  EXPECT_GT(differs_from_argmax, 0);
}

// A step mixing every kind of row: greedy and plain temperature rows take the device
// answers, the others (top_k, top_p, min_p, penalties, logprobs) their own logits on the
// host, each kind in its own sampler call. Tokens and logprobs must be the host sampler's
// over the whole step, in row order, step after step.
TEST(MixedStepTest, EachRowTakesItsOwnPathWithTheHostSamplersTokens) {
  std::unique_ptr<LoadedModel> device = LoadTiny("mixed_device", 8);
  std::unique_ptr<LoadedModel> host = LoadTiny("mixed_host", 8);
  const int32_t vocab = static_cast<int32_t>(device->model->config().vocab_size);
  constexpr int kRows = 7;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> runs;
  for (int i = 0; i < kRows; ++i) {
    prompts.push_back(TokensBelow(vocab, 2 + 3 * i, 130 + i));
    runs.push_back(RunOf(i, i, prompts[i], 0, static_cast<int32_t>(prompts[i].size())));
  }
  auto configure = [](ScheduledSequence& run, int step) {
    SamplingParams& s = run.sampling;
    s.seed = 0x51ed270b27a1f2c3ull * (run.request_id + 3);
    run.rng_step = step;
    switch (run.request_id) {
      case 0: break;                                        // greedy
      case 1: s.temperature = 0.9f; break;                  // plain temperature
      case 2: s.temperature = 1.3f; s.top_p = 0.8f; break;  // nucleus
      case 3: s.temperature = 0.7f; s.top_k = 5; break;
      case 4: s.repetition_penalty = 1.3f; break;           // greedy with a penalty
      case 5: s.temperature = 2.0f; break;                  // plain temperature
      default: s.temperature = 1.0f; s.min_p = 0.05f; s.top_logprobs = 2; break;
    }
  };
  for (int step = 0; step < 4; ++step) {
    for (ScheduledSequence& run : runs) configure(run, step);
    const StepPlan plan = PlanOf(runs, static_cast<uint64_t>(step + 1));
    const StepResult result = device->runner->Execute(plan);
    ASSERT_TRUE(result.ok) << result.error;
    const HostStep expected = StepOnHost(*host, plan);
    ASSERT_FALSE(Sampler::AllGreedy(expected.rows));
    ASSERT_FALSE(Sampler::AllPlainTemperature(expected.rows));
    for (size_t r = 0; r < result.tokens.size() && r < expected.tokens.size(); ++r) {
      EXPECT_EQ(result.tokens[r].logprob, expected.tokens[r].logprob) << "row " << r;
      ASSERT_EQ(result.tokens[r].top_logprobs.size(), expected.tokens[r].top_logprobs.size());
    }
    runs = CompareAndDecode(result, expected, vocab, step, prompts);
  }
}

TEST(GreedyDevicePathTest, OnlyStepsWhoseRowsAreAllPlainGreedyQualify) {
  ScheduledSequence greedy, random, penalised, logprobs;
  random.sampling.temperature = 0.7f;
  penalised.sampling.repetition_penalty = 1.2f;
  logprobs.sampling.top_logprobs = 2;
  const ScheduledSequence* all_greedy[] = {&greedy, &greedy};
  EXPECT_TRUE(Sampler::AllGreedy(all_greedy));
  for (const ScheduledSequence* other : {&random, &penalised, &logprobs}) {
    const ScheduledSequence* rows[] = {&greedy, other};
    EXPECT_FALSE(Sampler::AllGreedy(rows));
  }
}

// SampleGreedy against Sample on hand-made logits: ties, a padded id holding the largest
// value, negative values. The per-rank argmax comes from the CPU backend's Argmax over the
// real columns, as DeviceSampler takes it.
TEST(GreedyDevicePathTest, SampleGreedyAgreesWithSampleOnTiesAndPaddedIds) {
  constexpr int32_t kVocab = 13, kPadded = 16, kRows = 3;
  std::vector<float> logits(kRows * kPadded, 0.0f);
  for (int32_t i = 0; i < kPadded; ++i) {
    logits[i] = static_cast<float>(i % 5);  // ties at 4, 9: the lowest wins
    logits[kPadded + i] = i >= kVocab ? 100.0f : static_cast<float>(-i);  // padded ids largest
    logits[2 * kPadded + i] = static_cast<float>((i * 7) % 11) - 20.0f;
  }
  auto backend = CreateBackend(BackendKind::kCpu, {});
  ASSERT_TRUE(backend.ok());
  std::vector<int32_t> ids(kRows);
  std::vector<float> values(kRows);
  const Tensor all(logits.data(), DType::kF32, {kRows, kPadded}, Device::kCpu);
  ASSERT_TRUE((*backend)
                  ->Argmax(all.Columns(0, kVocab),
                           Tensor(ids.data(), DType::kI32, {kRows}, Device::kCpu),
                           Tensor(values.data(), DType::kF32, {kRows}, Device::kCpu))
                  .ok());
  comm::SingleRankCommunicator comm;
  Sampler sampler(comm, VocabRange{0, kPadded}, kVocab);
  std::vector<ScheduledSequence> seqs(kRows);
  std::vector<const ScheduledSequence*> rows;
  for (int r = 0; r < kRows; ++r) {
    seqs[r].request_id = 10 + r;
    rows.push_back(&seqs[r]);
  }
  auto greedy = sampler.SampleGreedy(rows, ids, values);
  auto expected = sampler.Sample(rows, logits.data());
  ASSERT_TRUE(greedy.ok() && expected.ok());
  for (int r = 0; r < kRows; ++r) {
    EXPECT_EQ((*greedy)[r].token_id, (*expected)[r].token_id) << "row " << r;
    EXPECT_EQ((*greedy)[r].request_id, (*expected)[r].request_id);
  }
  EXPECT_EQ((*greedy)[0].token_id, 4);
  EXPECT_EQ((*greedy)[1].token_id, 0);
}

}  // namespace
}  // namespace coil
