// The scheduler with the prefix cache on, one hand-built scenario each: where a prompt is
// split for its snapshot, which rows the snapshot and restore copies name, what a later
// prompt resumes from, how snapshots give their rows (and a hybrid's pages) back before
// anybody waits or is preempted, and which pages a hybrid's snapshot shares.
// Expected plans are worked out by hand in the comments (chunk size 4; rows are handed
// out lowest first).
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"

namespace coil {
namespace {

using ::testing::HasSubstr;

SchedulerConfig CacheConfig(int32_t state_rows) {
  SchedulerConfig config;
  config.max_num_seqs = state_rows;
  config.state_rows = state_rows;
  config.max_batched_tokens = 64;
  config.max_model_len = 64;
  config.max_queue = 16;
  config.ssd_chunk_size = 4;
  config.prefix_cache = true;
  return config;
}

std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(config);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return std::move(scheduler).value();
}

// A "system prompt" 100, 101, ... shared by requests, then the request's own tokens.
std::vector<int32_t> Prompt(int32_t shared, std::vector<int32_t> own) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < shared; ++i) prompt.push_back(100 + i);
  prompt.insert(prompt.end(), own.begin(), own.end());
  return prompt;
}

NewRequest Req(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens = 1) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = std::move(prompt);
  request.max_tokens = max_tokens;
  return request;
}

StepResult Answer(const StepPlan& plan) {
  StepResult result;
  result.step_id = plan.step_id;
  for (const ScheduledSequence& sequence : plan.sequences) {
    if (!sequence.sample) continue;
    SampledToken token;
    token.request_id = sequence.request_id;
    token.token_id = 7;
    result.tokens.push_back(token);
  }
  return result;
}

std::vector<RequestUpdate> Apply(Scheduler& scheduler, const StepPlan& plan) {
  absl::StatusOr<std::vector<RequestUpdate>> updates = scheduler.Update(plan, Answer(plan));
  EXPECT_TRUE(updates.ok()) << updates.status();
  return updates.ok() ? *std::move(updates) : std::vector<RequestUpdate>();
}

void Drain(Scheduler& scheduler) {
  for (int step = 0; step < 100 && scheduler.HasUnfinishedRequests(); ++step) {
    Apply(scheduler, scheduler.Schedule());
  }
  EXPECT_FALSE(scheduler.HasUnfinishedRequests());
}

MATCHER_P2(CopyOf, from, to, "") { return arg.from_slot == from && arg.to_slot == to; }

TEST(SchedulerPrefixTest, SnapshotsTheLastWholeChunkAndResumesALaterPromptThere) {
  auto scheduler = Make(CacheConfig(4));
  // 8 shared tokens and 2 own: the last whole chunk ends at 8, so the prompt runs as
  // [0, 8) then [8, 10), and after the first run row 0 is copied to row 1.
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {1, 2}))).ok());
  StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].token_ids.size(), 8u);
  EXPECT_FALSE(plan.sequences[0].sample);
  EXPECT_TRUE(plan.restores.empty());
  EXPECT_THAT(plan.snapshots, ::testing::ElementsAre(CopyOf(0, 1)));
  EXPECT_EQ(scheduler->counters().prefix_cache_rows, 1);
  EXPECT_EQ(scheduler->counters().rows_used, 1);
  Apply(*scheduler, plan);
  plan = scheduler->Schedule();
  EXPECT_EQ(plan.sequences[0].start_position, 8);
  EXPECT_TRUE(plan.snapshots.empty());
  std::vector<RequestUpdate> updates = Apply(*scheduler, plan);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].num_cached_tokens, 0);

  // The same 8 tokens and 3 others: the snapshot in row 1 is copied to the new request's
  // row (0, the lowest free) and the run starts at 8, not fresh; 8 is cached, so nothing
  // is split or snapshotted.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(8, {5, 6, 7}))).ok());
  plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  const ScheduledSequence& resumed = plan.sequences[0];
  EXPECT_FALSE(resumed.fresh);
  EXPECT_EQ(resumed.state_slot, 0);
  EXPECT_EQ(resumed.start_position, 8);
  EXPECT_EQ(resumed.token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(resumed.sample);
  EXPECT_THAT(plan.restores, ::testing::ElementsAre(CopyOf(1, 0)));
  EXPECT_TRUE(plan.snapshots.empty());
  updates = Apply(*scheduler, plan);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].num_cached_tokens, 8);
  EXPECT_EQ(updates[0].num_prompt_tokens, 11);

  const SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.prefix_cache_hits, 1);
  EXPECT_EQ(counters.prefix_cache_hit_tokens, 8);
  EXPECT_EQ(counters.prefix_cache_misses, 1);
  EXPECT_EQ(counters.prefix_cache_rows, 1);
  EXPECT_EQ(counters.rows_free, 3);
}

TEST(SchedulerPrefixTest, APromptAlwaysComputesItsLastToken) {
  auto scheduler = Make(CacheConfig(4));
  // 8 tokens: snapshot at 8, the whole prompt.
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {}))).ok());
  Drain(*scheduler);
  EXPECT_EQ(scheduler->counters().prefix_cache_rows, 1);
  // The same 8 tokens again: resuming at 8 would leave nothing whose logits to sample,
  // and 4 has no snapshot, so it misses. 9 tokens resume at 8 and compute one: a decode.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(8, {}))).ok());
  StepPlan plan = scheduler->Schedule();
  EXPECT_TRUE(plan.sequences[0].fresh);
  EXPECT_EQ(plan.sequences[0].token_ids.size(), 8u);
  Apply(*scheduler, plan);
  ASSERT_TRUE(scheduler->AddRequest(Req(3, Prompt(9, {}))).ok());
  plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.num_decodes, 1);
  EXPECT_EQ(plan.sequences[0].start_position, 8);
  EXPECT_EQ(plan.restores.size(), 1u);
  Apply(*scheduler, plan);
  EXPECT_EQ(scheduler->counters().prefix_cache_misses, 2);
  EXPECT_EQ(scheduler->counters().prefix_cache_hits, 1);
}

TEST(SchedulerPrefixTest, AnAskedForCutIsSnapshottedToo) {
  auto scheduler = Make(CacheConfig(4));
  // 14 tokens with a cut after 7: snapshots at 4 (the cut, rounded down) and 12, so the
  // runs are [0, 4), [4, 12), [12, 14), in rows 1 and then 2.
  NewRequest first = Req(1, Prompt(7, {1, 2, 3, 4, 5, 6, 7}));
  first.cache_prefix_tokens = 7;
  ASSERT_TRUE(scheduler->AddRequest(first).ok());
  std::vector<int32_t> ends;
  std::vector<StateCopy> snapshots;
  for (int step = 0; step < 10 && scheduler->HasUnfinishedRequests(); ++step) {
    const StepPlan plan = scheduler->Schedule();
    ends.push_back(plan.sequences[0].start_position + plan.sequences[0].token_ids.size());
    snapshots.insert(snapshots.end(), plan.snapshots.begin(), plan.snapshots.end());
    Apply(*scheduler, plan);
  }
  EXPECT_EQ(ends, (std::vector<int32_t>{4, 12, 14}));
  EXPECT_THAT(snapshots, ::testing::ElementsAre(CopyOf(0, 1), CopyOf(0, 2)));
  // Another question after the same 7 shared tokens resumes at 4.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(7, {9, 9}))).ok());
  const StepPlan plan = scheduler->Schedule();
  EXPECT_EQ(plan.sequences[0].start_position, 4);
  EXPECT_THAT(plan.restores, ::testing::ElementsAre(CopyOf(1, 0)));
  Apply(*scheduler, plan);
}

TEST(SchedulerPrefixTest, ACutOutsideThePromptIsRefused) {
  auto scheduler = Make(CacheConfig(4));
  NewRequest request = Req(1, Prompt(5, {}));
  request.cache_prefix_tokens = 6;
  const absl::Status refused = scheduler->AddRequest(request);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("cache_prefix_tokens is 6; the prompt has 5 tokens"));
  request.cache_prefix_tokens = -1;
  EXPECT_EQ(scheduler->AddRequest(request).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchedulerPrefixTest, SnapshotRowsAreTakenBackBeforeARequestWaits) {
  auto scheduler = Make(CacheConfig(2));
  // Request 1 leaves a snapshot at 4 in row 1 and frees row 0.
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(5, {}))).ok());
  Drain(*scheduler);
  ASSERT_EQ(scheduler->counters().prefix_cache_rows, 1);
  // Two requests with other prompts arrive together: both run at once, the second in the
  // snapshot's row, and neither can keep a snapshot (no row is left).
  ASSERT_TRUE(scheduler->AddRequest(Req(2, {1, 2, 3, 4, 5}, 3)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(3, {6, 7, 8, 9, 10}, 3)).ok());
  StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_EQ(plan.sequences[0].state_slot, 0);
  EXPECT_EQ(plan.sequences[1].state_slot, 1);
  EXPECT_TRUE(plan.snapshots.empty());
  SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.prefix_cache_evictions, 1);
  EXPECT_EQ(counters.prefix_cache_rows, 0);
  EXPECT_EQ(counters.waiting, 0);
  Apply(*scheduler, plan);
  Drain(*scheduler);
  counters = scheduler->counters();
  EXPECT_EQ(counters.rows_free + counters.prefix_cache_rows, 2);
}

TEST(SchedulerPrefixTest, AHitWhoseRowIsTheOnlyOneLeftIsResumedInPlace) {
  auto scheduler = Make(CacheConfig(2));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {1}))).ok());
  Drain(*scheduler);  // snapshot at 8 in row 1
  // Request 2 (another prompt, generating for a while) holds row 0.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, {1, 2, 3}, 20)).ok());
  Apply(*scheduler, scheduler->Schedule());
  // Request 3 shares the 8 tokens: the only row to take is the snapshot's own, which
  // holds its state already: no copy, and the snapshot is gone.
  ASSERT_TRUE(scheduler->AddRequest(Req(3, Prompt(8, {4, 5}))).ok());
  const StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 2u);
  const ScheduledSequence& resumed = plan.sequences[1];
  EXPECT_EQ(resumed.request_id, 3u);
  EXPECT_EQ(resumed.state_slot, 1);
  EXPECT_EQ(resumed.start_position, 8);
  EXPECT_FALSE(resumed.fresh);
  EXPECT_TRUE(plan.restores.empty());
  const SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.prefix_cache_rows, 0);
  EXPECT_EQ(counters.prefix_cache_hits, 1);
  EXPECT_EQ(counters.prefix_cache_evictions, 1);
  Apply(*scheduler, plan);
  Drain(*scheduler);
}

TEST(SchedulerPrefixTest, ASourceCancelledWhileItsStepRunsLeavesAValidSnapshot) {
  auto scheduler = Make(CacheConfig(4));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {1, 2}), 5)).ok());
  const StepPlan plan = scheduler->Schedule();
  ASSERT_THAT(plan.snapshots, ::testing::ElementsAre(CopyOf(0, 1)));
  // The client goes away while the workers run the plan (and take the snapshot).
  ASSERT_TRUE(scheduler->Cancel(1).ok());
  EXPECT_TRUE(Apply(*scheduler, plan).empty());
  EXPECT_EQ(scheduler->counters().prefix_cache_rows, 1);
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(8, {3}))).ok());
  const StepPlan resumed = scheduler->Schedule();
  EXPECT_EQ(resumed.sequences[0].start_position, 8);
  EXPECT_THAT(resumed.restores, ::testing::ElementsAre(CopyOf(1, 0)));
  Apply(*scheduler, resumed);
}

TEST(SchedulerPrefixTest, AFailedStepDropsItsSnapshots) {
  auto scheduler = Make(CacheConfig(4));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {1, 2}))).ok());
  const StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.snapshots.size(), 1u);
  StepResult failed;
  failed.step_id = plan.step_id;
  failed.ok = false;
  failed.error = "boom";
  ASSERT_TRUE(scheduler->Update(plan, failed).ok());
  const SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.prefix_cache_rows, 0);
  EXPECT_EQ(counters.rows_free, 4);
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(8, {3}))).ok());
  EXPECT_TRUE(scheduler->Schedule().sequences[0].fresh);
}

TEST(SchedulerPrefixTest, TheRowCapEvictsTheOldestSnapshotForANewOne) {
  SchedulerConfig config = CacheConfig(4);
  config.prefix_cache_max_rows = 1;
  auto scheduler = Make(config);
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(4, {1}))).ok());
  Drain(*scheduler);
  // Another prompt's snapshot takes the one row the cap allows: the first one's row.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, {5, 6, 7, 8, 9})).ok());
  const StepPlan plan = scheduler->Schedule();
  EXPECT_THAT(plan.snapshots, ::testing::ElementsAre(CopyOf(0, 1)));
  Apply(*scheduler, plan);
  Drain(*scheduler);
  SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.prefix_cache_rows, 1);
  EXPECT_EQ(counters.prefix_cache_evictions, 1);
  // The first prompt's prefix is gone; the second's is there.
  ASSERT_TRUE(scheduler->AddRequest(Req(3, Prompt(4, {2}))).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(4, {5, 6, 7, 8, 1, 2})).ok());
  const StepPlan both = scheduler->Schedule();
  ASSERT_EQ(both.sequences.size(), 2u);
  EXPECT_TRUE(both.sequences[0].fresh);
  EXPECT_EQ(both.sequences[1].start_position, 4);
  Apply(*scheduler, both);
}

TEST(SchedulerPrefixTest, TwoRequestsWithOnePrefixInOneStepKeepOneSnapshot) {
  auto scheduler = Make(CacheConfig(4));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(4, {1}))).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(4, {2}))).ok());
  const StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_THAT(plan.snapshots, ::testing::ElementsAre(CopyOf(0, 2)));
  Apply(*scheduler, plan);
  Drain(*scheduler);
  EXPECT_EQ(scheduler->counters().prefix_cache_rows, 1);
}

// A hybrid model: 2-token pages, 4-token chunks.
SchedulerConfig HybridCacheConfig(int32_t state_rows, int32_t kv_pages) {
  SchedulerConfig config = CacheConfig(state_rows);
  config.num_attention_layers = 2;
  config.block_size = 2;
  config.kv_pages = kv_pages;
  return config;
}

TEST(SchedulerPrefixTest, AHybridSnapshotSharesItsPagesWithTheRequestsResumedFromIt) {
  auto scheduler = Make(HybridCacheConfig(4, 16));
  // [0, 8) on pages 0-3 (handed out lowest first), which the snapshot shares; [8, 10) on
  // page 4, freed when request 1 ends.
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {1, 2}))).ok());
  StepPlan plan = scheduler->Schedule();
  EXPECT_EQ(plan.sequences[0].kv_block_table, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(scheduler->counters().prefix_cache_pages, 4);
  Apply(*scheduler, plan);
  Drain(*scheduler);
  SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.pages_used, 4);
  EXPECT_EQ(counters.prefix_cache_pages, 4);
  // Request 2 resumes at 8: the shared pages first, then page 4 (the most recently freed)
  // and page 5 for positions 8-10.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(8, {5, 6, 7}))).ok());
  plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].start_position, 8);
  EXPECT_EQ(plan.sequences[0].kv_block_table, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(scheduler->counters().pages_used, 6);
  Apply(*scheduler, plan);
  Drain(*scheduler);
  counters = scheduler->counters();
  EXPECT_EQ(counters.pages_used, 4);
  EXPECT_EQ(counters.pages_free, 12);
}

TEST(SchedulerPrefixTest, ASnapshotGivesBackItsPagesBeforeAnyoneIsPreempted) {
  auto scheduler = Make(HybridCacheConfig(4, 8));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, Prompt(8, {1}))).ok());
  Drain(*scheduler);  // a snapshot on pages 0-3; pages 4-7 free
  // Three prompt tokens and 9 outputs: positions up to 10, six pages; at position 8 the
  // fifth page is the snapshot's to give.
  ASSERT_TRUE(scheduler->AddRequest(Req(2, {1, 2, 3}, 9)).ok());
  Drain(*scheduler);
  const SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.preemptions, 0);
  EXPECT_EQ(counters.prefix_cache_evictions, 1);
  EXPECT_EQ(counters.prefix_cache_rows, 0);
  EXPECT_EQ(counters.pages_free, 8);
}

TEST(SchedulerPrefixTest, APreemptedSourceLeavesItsSnapshotToResumeFrom) {
  auto scheduler = Make(HybridCacheConfig(4, 10));
  // Request 1 (older) decodes from a 3-token prompt; request 2 (newer) snapshots its 8-token
  // prompt on the pages it shares with the snapshot, then decodes until the pool runs dry:
  // its snapshot cannot help (request 2 holds its pages too), so request 2, the newest, is
  // preempted, and the snapshot keeps its pages.
  ASSERT_TRUE(scheduler->AddRequest(Req(1, {1, 2, 3}, 8)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, Prompt(8, {}), 10)).ok());
  StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 2u);
  ASSERT_EQ(plan.snapshots.size(), 1u);
  const int32_t snapshot_row = plan.snapshots[0].to_slot;
  const std::vector<int32_t> prefix_pages(plan.sequences[1].kv_block_table.begin(),
                                          plan.sequences[1].kv_block_table.begin() + 4);
  Apply(*scheduler, plan);
  int step = 0;
  for (; step < 20 && scheduler->counters().preemptions == 0; ++step) {
    Apply(*scheduler, scheduler->Schedule());
  }
  ASSERT_EQ(scheduler->counters().preemptions, 1);
  ASSERT_EQ(scheduler->Phase(2), RequestPhase::kWaiting);
  EXPECT_EQ(scheduler->counters().prefix_cache_rows, 1);
  // When request 1 has made room, request 2 is recomputed from its snapshot: its state row
  // restored, the prefix's pages shared again, the run starting at 8.
  for (; step < 40; ++step) {
    plan = scheduler->Schedule();
    const ScheduledSequence* resumed = nullptr;
    for (const ScheduledSequence& sequence : plan.sequences) {
      if (sequence.request_id == 2) resumed = &sequence;
    }
    if (resumed != nullptr) {
      EXPECT_EQ(resumed->start_position, 8);
      EXPECT_FALSE(resumed->fresh);
      EXPECT_EQ(std::vector<int32_t>(resumed->kv_block_table.begin(),
                                     resumed->kv_block_table.begin() + 4),
                prefix_pages);
      EXPECT_THAT(plan.restores, ::testing::ElementsAre(CopyOf(snapshot_row, resumed->state_slot)));
      Apply(*scheduler, plan);
      break;
    }
    Apply(*scheduler, plan);
  }
  ASSERT_LT(step, 40) << "request 2 never resumed";
  EXPECT_EQ(scheduler->counters().prefix_cache_hits, 1);
  Drain(*scheduler);
  const SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.pages_free + counters.prefix_cache_pages, 10);
}

TEST(SchedulerPrefixTest, AHybridCacheNeedsPagesThatDivideTheChunk) {
  SchedulerConfig config = HybridCacheConfig(4, 16);
  config.block_size = 3;
  const absl::Status refused = config.Validate();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("the KV page size must divide the chunk size"));
}

}  // namespace
}  // namespace coil
