// The scheduler's rules, one hand-built scenario each, through the public API only.
// Expected plans are worked out by hand in the comments from the rules (decodes first,
// FCFS admission, chunk multiples, newest preempted). Tokens come from a fake model whose
// token for (request, rng step) is fixed, so a recompute draws what it drew before. Every
// test ends with both pools full again.
#include "scheduler/scheduler.h"

#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using TokenFn = std::function<int32_t(uint64_t request_id, int32_t rng_step)>;

// The fake model's default draw: distinct per request and per output index.
int32_t DefaultToken(uint64_t request_id, int32_t rng_step) {
  return static_cast<int32_t>(1000 + 10 * request_id + rng_step);
}

SchedulerConfig SmallConfig() {
  SchedulerConfig config;
  config.max_num_seqs = 4;
  config.state_rows = 4;
  config.max_batched_tokens = 64;
  config.max_model_len = 64;
  config.max_queue = 16;
  config.ssd_chunk_size = 4;
  return config;
}

SchedulerConfig HybridConfig(int32_t kv_pages) {
  SchedulerConfig config = SmallConfig();
  config.num_attention_layers = 2;
  config.block_size = 2;
  config.kv_pages = kv_pages;
  return config;
}

std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(config);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return std::move(scheduler).value();
}

// Prompt tokens id * 100 + i: distinct, so a run's tokens show where they came from.
std::vector<int32_t> Prompt(uint64_t id, int32_t length) {
  std::vector<int32_t> prompt(length);
  for (int32_t i = 0; i < length; ++i) prompt[i] = static_cast<int32_t>(id * 100 + i);
  return prompt;
}

NewRequest Req(uint64_t id, int32_t prompt_length, int32_t max_tokens) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = Prompt(id, prompt_length);
  request.max_tokens = max_tokens;
  return request;
}

StepResult Answer(const StepPlan& plan, const TokenFn& token_fn = DefaultToken) {
  StepResult result;
  result.step_id = plan.step_id;
  for (const ScheduledSequence& sequence : plan.sequences) {
    if (!sequence.sample) continue;
    SampledToken token;
    token.request_id = sequence.request_id;
    token.token_id = token_fn(sequence.request_id, sequence.rng_step);
    result.tokens.push_back(token);
  }
  return result;
}

std::vector<RequestUpdate> Apply(Scheduler& scheduler, const StepPlan& plan,
                                 const TokenFn& token_fn = DefaultToken) {
  absl::StatusOr<std::vector<RequestUpdate>> updates =
      scheduler.Update(plan, Answer(plan, token_fn));
  EXPECT_TRUE(updates.ok()) << updates.status();
  return updates.ok() ? *std::move(updates) : std::vector<RequestUpdate>();
}

std::vector<uint64_t> Ids(const StepPlan& plan) {
  std::vector<uint64_t> ids;
  for (const ScheduledSequence& sequence : plan.sequences) ids.push_back(sequence.request_id);
  return ids;
}

const RequestUpdate* Find(const std::vector<RequestUpdate>& updates, uint64_t id) {
  for (const RequestUpdate& update : updates) {
    if (update.request_id == id) return &update;
  }
  return nullptr;
}

// Steps until no request is left (bounded), returning every update in order.
std::vector<RequestUpdate> Drain(Scheduler& scheduler, const TokenFn& token_fn = DefaultToken) {
  std::vector<RequestUpdate> all;
  for (int step = 0; step < 1000 && scheduler.HasUnfinishedRequests(); ++step) {
    StepPlan plan = scheduler.Schedule();
    for (RequestUpdate& update : Apply(scheduler, plan, token_fn)) all.push_back(update);
  }
  EXPECT_FALSE(scheduler.HasUnfinishedRequests());
  return all;
}

void ExpectPoolsFull(const Scheduler& scheduler) {
  const SchedulerCounters counters = scheduler.counters();
  EXPECT_EQ(counters.rows_free, scheduler.config().state_rows);
  EXPECT_EQ(counters.rows_used, 0);
  EXPECT_EQ(counters.pages_free,
            scheduler.config().uses_kv_pages() ? scheduler.config().kv_pages : 0);
  EXPECT_EQ(counters.pages_used, 0);
  EXPECT_EQ(counters.running, 0);
  EXPECT_EQ(counters.waiting, 0);
}

TEST(SchedulerTest, RefusesRequestsThatCanNeverRunAndAFullQueueDistinctly) {
  SchedulerConfig config = HybridConfig(/*kv_pages=*/4);  // 4 pages of 2 tokens: 8 tokens
  config.max_model_len = 16;
  config.max_queue = 2;
  auto scheduler = Make(config);

  EXPECT_EQ(scheduler->AddRequest(Req(1, 0, 1)).code(), absl::StatusCode::kInvalidArgument);
  absl::Status too_long = scheduler->AddRequest(Req(2, 16, 1));  // at max_model_len
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("16 tokens"));
  // 5 + 4 = 9 tokens need 5 pages; the pool has 4, which hold 8 tokens: max_tokens <= 3.
  absl::Status no_pages = scheduler->AddRequest(Req(3, 5, 4));
  EXPECT_EQ(no_pages.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_pages.message(), HasSubstr("needs 5 kv pages; the pool has 4"));
  EXPECT_THAT(no_pages.message(), HasSubstr("at most 3"));
  // max_tokens 0 means up to max_model_len: 16 tokens, 8 pages.
  EXPECT_EQ(scheduler->AddRequest(Req(4, 5, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->AddRequest(Req(5, 5, -1)).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(scheduler->AddRequest(Req(6, 5, 3)).ok());  // exactly 8 tokens: fits
  EXPECT_EQ(scheduler->AddRequest(Req(6, 1, 1)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(scheduler->AddRequest(Req(7, 1, 1)).ok());
  absl::Status full = scheduler->AddRequest(Req(8, 1, 1));  // 2 already wait
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("queue is full"));
  EXPECT_EQ(scheduler->counters().waiting, 2);

  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, ThreeRowsFiveRequestsFourthAdmittedAfterFirstFinishes) {
  SchedulerConfig config = SmallConfig();
  config.state_rows = 3;
  config.max_num_seqs = 3;
  auto scheduler = Make(config);
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 2, 1)).ok());  // finishes after its first token
  for (uint64_t id = 2; id <= 5; ++id) ASSERT_TRUE(scheduler->AddRequest(Req(id, 2, 3)).ok());

  // Step 1: three rows, three fresh prefills in slots 0, 1, 2; 4 and 5 wait.
  StepPlan first = scheduler->Schedule();
  EXPECT_THAT(Ids(first), ElementsAre(1, 2, 3));
  EXPECT_EQ(first.num_decodes, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(first.sequences[i].fresh);
    EXPECT_EQ(first.sequences[i].state_slot, i);
  }
  EXPECT_EQ(scheduler->counters().waiting, 2);
  EXPECT_EQ(scheduler->counters().rows_free, 0);
  std::vector<RequestUpdate> updates = Apply(*scheduler, first);
  ASSERT_NE(Find(updates, 1), nullptr);
  EXPECT_EQ(Find(updates, 1)->finish_reason, FinishReason::kLength);
  EXPECT_EQ(scheduler->counters().rows_free, 1);  // freed at once

  // Step 2: decodes of 2 and 3 first, then 4 admitted fresh into the freed slot 0.
  StepPlan second = scheduler->Schedule();
  EXPECT_THAT(Ids(second), ElementsAre(2, 3, 4));
  EXPECT_EQ(second.num_decodes, 2);
  EXPECT_TRUE(second.sequences[2].fresh);
  EXPECT_EQ(second.sequences[2].state_slot, 0);
  EXPECT_EQ(scheduler->Phase(5), RequestPhase::kWaiting);
  Apply(*scheduler, second);

  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, MaxNumSeqsBoundsRunningRequests) {
  SchedulerConfig config = SmallConfig();
  config.state_rows = 8;
  config.max_num_seqs = 2;
  auto scheduler = Make(config);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(scheduler->AddRequest(Req(id, 2, 2)).ok());
  StepPlan plan = scheduler->Schedule();
  EXPECT_THAT(Ids(plan), ElementsAre(1, 2));
  EXPECT_EQ(scheduler->counters().rows_free, 6);
  Apply(*scheduler, plan);
  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, LongPromptSplitsAtChunkMultiplesBesideDecodes) {
  SchedulerConfig config = SmallConfig();
  config.max_num_seqs = 2;
  config.max_batched_tokens = 10;  // chunk 4: at least 1 + 4
  auto scheduler = Make(config);
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 2, 10)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 23, 1)).ok());
  const std::vector<int32_t> prompt = Prompt(2, 23);

  // Step 1: request 1 takes its whole 2-token prompt; 8 tokens left, and 8 is a chunk
  // multiple, so request 2's first piece is [0, 8), fresh, not sampled.
  StepPlan s1 = scheduler->Schedule();
  ASSERT_THAT(Ids(s1), ElementsAre(1, 2));
  EXPECT_EQ(s1.num_decodes, 0);
  EXPECT_EQ(s1.NumTokens(), 10);
  EXPECT_TRUE(s1.sequences[0].sample);
  EXPECT_EQ(s1.sequences[0].rng_step, 0);
  const ScheduledSequence& a = s1.sequences[1];
  EXPECT_TRUE(a.fresh);
  EXPECT_FALSE(a.sample);
  EXPECT_EQ(a.start_position, 0);
  EXPECT_EQ(a.token_ids, std::vector<int32_t>(prompt.begin(), prompt.begin() + 8));
  Apply(*scheduler, s1);

  // Step 2: request 1 decodes first (1 token: its first output), leaving 9; 8 + 9 = 17
  // rounds down to 16: the piece [8, 16).
  StepPlan s2 = scheduler->Schedule();
  ASSERT_THAT(Ids(s2), ElementsAre(1, 2));
  EXPECT_EQ(s2.num_decodes, 1);
  EXPECT_THAT(s2.sequences[0].token_ids, ElementsAre(DefaultToken(1, 0)));
  EXPECT_EQ(s2.sequences[0].start_position, 2);
  EXPECT_FALSE(s2.sequences[0].fresh);
  EXPECT_EQ(s2.sequences[0].rng_step, 1);
  const ScheduledSequence& b = s2.sequences[1];
  EXPECT_FALSE(b.fresh);
  EXPECT_FALSE(b.sample);
  EXPECT_EQ(b.start_position, 8);
  EXPECT_EQ(b.token_ids, std::vector<int32_t>(prompt.begin() + 8, prompt.begin() + 16));
  EXPECT_EQ(b.state_slot, a.state_slot);  // its state carries in its own row
  Apply(*scheduler, s2);

  // Step 3: the last piece [16, 23) is 7 tokens, not a multiple: allowed, and sampled.
  StepPlan s3 = scheduler->Schedule();
  ASSERT_THAT(Ids(s3), ElementsAre(1, 2));
  const ScheduledSequence& c = s3.sequences[1];
  EXPECT_EQ(c.start_position, 16);
  EXPECT_EQ(c.token_ids, std::vector<int32_t>(prompt.begin() + 16, prompt.end()));
  EXPECT_TRUE(c.sample);
  EXPECT_EQ(c.rng_step, 0);
  std::vector<RequestUpdate> updates = Apply(*scheduler, s3);
  ASSERT_NE(Find(updates, 2), nullptr);
  EXPECT_EQ(Find(updates, 2)->token->token_id, DefaultToken(2, 0));
  EXPECT_EQ(Find(updates, 2)->finish_reason, FinishReason::kLength);  // max_tokens 1

  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, TokenBudgetAdmitsFirstComeFirstServed) {
  SchedulerConfig config = SmallConfig();
  config.max_batched_tokens = 10;  // 4 running: at least 3 + 4
  auto scheduler = Make(config);
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 3, 2)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 5, 2)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(3, 6, 2)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(4, 1, 2)).ok());

  // 3 + 5 leave 2: request 3 (6 tokens) has no chunk multiple in 2, so it waits, and so
  // does request 4 behind it although its single token would fit.
  StepPlan s1 = scheduler->Schedule();
  EXPECT_THAT(Ids(s1), ElementsAre(1, 2));
  EXPECT_EQ(s1.NumTokens(), 8);
  EXPECT_EQ(scheduler->counters().tokens_scheduled_last_step, 8);
  EXPECT_EQ(scheduler->counters().waiting, 2);
  Apply(*scheduler, s1);

  // Two decodes, then 6 + 1 in the 8 left.
  StepPlan s2 = scheduler->Schedule();
  EXPECT_THAT(Ids(s2), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(s2.num_decodes, 2);
  EXPECT_EQ(s2.NumTokens(), 9);
  Apply(*scheduler, s2);
  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, PreemptsNewestWhenAPageRunsOutAndResumesWithItsTokens) {
  // 4 pages of 2 tokens. A: 3 + 5 tokens (4 pages at most); B: 3 + 3 (3 pages at most).
  auto scheduler = Make(HybridConfig(/*kv_pages=*/4));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 3, 5)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 3, 3)).ok());
  std::vector<RequestUpdate> all;
  auto step = [&](const StepPlan& plan) {
    for (RequestUpdate& update : Apply(*scheduler, plan)) all.push_back(update);
  };

  // Step 1: both prompts, 2 pages each: the pool is empty.
  StepPlan s1 = scheduler->Schedule();
  EXPECT_THAT(Ids(s1), ElementsAre(1, 2));
  EXPECT_EQ(s1.sequences[0].kv_block_table.size(), 2u);
  EXPECT_EQ(s1.sequences[1].kv_block_table.size(), 2u);
  EXPECT_EQ(scheduler->counters().pages_free, 0);
  step(s1);
  // Step 2: positions 3 still fit in the second page of each.
  StepPlan s2 = scheduler->Schedule();
  EXPECT_THAT(Ids(s2), ElementsAre(1, 2));
  EXPECT_EQ(s2.num_decodes, 2);
  step(s2);

  // Step 3: A's position 4 needs a third page; none is free, so B (the newest) is
  // preempted: its 2 pages and its row return, A takes one page. Nobody is admitted.
  StepPlan s3 = scheduler->Schedule();
  EXPECT_THAT(Ids(s3), ElementsAre(1));
  EXPECT_EQ(s3.sequences[0].kv_block_table.size(), 3u);
  EXPECT_EQ(scheduler->counters().preemptions, 1);
  EXPECT_EQ(scheduler->Phase(2), RequestPhase::kWaiting);
  EXPECT_EQ(scheduler->counters().pages_free, 1);
  EXPECT_EQ(scheduler->counters().rows_used, 1);
  step(s3);

  // Steps 4 and 5: B needs ceil(5 / 2) = 3 pages, only 1 is free: A runs alone until its
  // fifth token finishes it.
  for (int i = 0; i < 2; ++i) {
    StepPlan plan = scheduler->Schedule();
    EXPECT_THAT(Ids(plan), ElementsAre(1));
    step(plan);
  }
  EXPECT_EQ(scheduler->Phase(1), std::nullopt);

  // Step 6: B recomputes prompt + its 2 outputs from zero state and samples output 2.
  StepPlan s6 = scheduler->Schedule();
  ASSERT_THAT(Ids(s6), ElementsAre(2));
  const ScheduledSequence& b = s6.sequences[0];
  EXPECT_TRUE(b.fresh);
  EXPECT_EQ(b.start_position, 0);
  EXPECT_THAT(b.token_ids, ElementsAre(200, 201, 202, DefaultToken(2, 0), DefaultToken(2, 1)));
  EXPECT_TRUE(b.sample);
  EXPECT_EQ(b.rng_step, 2);
  EXPECT_EQ(b.kv_block_table.size(), 3u);
  step(s6);

  // Each token reached the client once, in order, preemption invisible.
  std::vector<int32_t> streamed_b;
  for (const RequestUpdate& update : all) {
    if (update.request_id == 2 && update.token) streamed_b.push_back(update.token->token_id);
  }
  EXPECT_THAT(streamed_b, ElementsAre(DefaultToken(2, 0), DefaultToken(2, 1), DefaultToken(2, 2)));
  EXPECT_EQ(all.back().finish_reason, FinishReason::kLength);
  EXPECT_FALSE(scheduler->HasUnfinishedRequests());
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, NewestRequestNeedingAPagePreemptsItself) {
  // 4 pages of 2 tokens. A: prompt 4 (2 pages), B: prompt 1 (1 page).
  auto scheduler = Make(HybridConfig(/*kv_pages=*/4));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 4, 3)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 1, 5)).ok());
  Apply(*scheduler, scheduler->Schedule());  // 2 + 1 pages
  // A's position 4 takes the last page; B's position 1 is in its first page.
  StepPlan s2 = scheduler->Schedule();
  EXPECT_THAT(Ids(s2), ElementsAre(1, 2));
  EXPECT_EQ(scheduler->counters().pages_free, 0);
  Apply(*scheduler, s2);
  // B's position 2 needs a second page: B is the newest, so it preempts itself; A runs.
  StepPlan s3 = scheduler->Schedule();
  EXPECT_THAT(Ids(s3), ElementsAre(1));
  EXPECT_EQ(scheduler->counters().preemptions, 1);
  EXPECT_EQ(scheduler->counters().pages_free, 1);
  Apply(*scheduler, s3);  // A's third token: finished
  StepPlan s4 = scheduler->Schedule();
  ASSERT_THAT(Ids(s4), ElementsAre(2));
  EXPECT_TRUE(s4.sequences[0].fresh);
  EXPECT_THAT(s4.sequences[0].token_ids, ElementsAre(200, DefaultToken(2, 0), DefaultToken(2, 1)));
  Apply(*scheduler, s4);
  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, FinishesOnEosUnlessIgnoredAndOnStopTokens) {
  SchedulerConfig config = SmallConfig();
  config.eos_token_id = 7;
  auto scheduler = Make(config);
  // Every request draws EOS as its second token and 9 as its third.
  TokenFn token_fn = [](uint64_t id, int32_t rng_step) {
    return rng_step == 1 ? 7 : rng_step == 2 ? 9 : DefaultToken(id, rng_step);
  };
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 2, 10)).ok());
  NewRequest ignoring = Req(2, 2, 4);
  ignoring.ignore_eos = true;
  ASSERT_TRUE(scheduler->AddRequest(ignoring).ok());
  NewRequest stopping = Req(3, 2, 10);
  stopping.ignore_eos = true;
  stopping.stop_token_ids = {5, 9};
  ASSERT_TRUE(scheduler->AddRequest(stopping).ok());

  std::vector<RequestUpdate> all = Drain(*scheduler, token_fn);
  auto final_update = [&](uint64_t id) {
    const RequestUpdate* last = nullptr;
    for (const RequestUpdate& update : all) {
      if (update.request_id == id) last = &update;
    }
    return last;
  };
  ASSERT_NE(final_update(1), nullptr);
  EXPECT_EQ(final_update(1)->finish_reason, FinishReason::kEos);
  EXPECT_EQ(final_update(1)->num_output_tokens, 2);
  EXPECT_EQ(final_update(2)->finish_reason, FinishReason::kLength);  // max_tokens 4
  EXPECT_EQ(final_update(2)->num_output_tokens, 4);
  EXPECT_EQ(final_update(3)->finish_reason, FinishReason::kStop);
  EXPECT_EQ(final_update(3)->matched_stop_token_id, 9);
  EXPECT_EQ(final_update(3)->num_output_tokens, 3);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, FinishesAtMaxModelLen) {
  SchedulerConfig config = SmallConfig();
  config.max_model_len = 8;
  auto scheduler = Make(config);
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 5, 0)).ok());   // up to the limit: 3 outputs
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 5, 10)).ok());  // capped by the limit: 3
  ASSERT_TRUE(scheduler->AddRequest(Req(3, 5, 2)).ok());   // max_tokens first: 2
  ASSERT_TRUE(scheduler->AddRequest(Req(4, 7, 0)).ok());   // the longest prompt: 1 output
  std::vector<RequestUpdate> all = Drain(*scheduler);
  int32_t outputs[5] = {0, 0, 0, 0, 0};
  for (const RequestUpdate& update : all) {
    if (update.token) ++outputs[update.request_id];
    if (update.finish_reason != FinishReason::kNone) {
      EXPECT_EQ(update.finish_reason, FinishReason::kLength);
      EXPECT_EQ(update.num_prompt_tokens, update.request_id == 4 ? 7 : 5);
    }
  }
  EXPECT_EQ(outputs[1], 3);
  EXPECT_EQ(outputs[2], 3);
  EXPECT_EQ(outputs[3], 2);
  EXPECT_EQ(outputs[4], 1);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, CancelFreesRowAndPagesAtOnce) {
  auto scheduler = Make(HybridConfig(/*kv_pages=*/8));
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(scheduler->AddRequest(Req(id, 3, 4)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(4, 3, 4)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(5, 3, 4)).ok());  // 4 rows: waits

  Apply(*scheduler, scheduler->Schedule());
  EXPECT_EQ(scheduler->counters().pages_used, 8);  // 4 requests x ceil(3 / 2)
  ASSERT_TRUE(scheduler->Cancel(5).ok());          // waiting
  EXPECT_EQ(scheduler->counters().waiting, 0);
  ASSERT_TRUE(scheduler->Cancel(2).ok());  // running: row and 2 pages back now
  EXPECT_EQ(scheduler->counters().rows_free, 1);
  EXPECT_EQ(scheduler->counters().pages_used, 6);
  EXPECT_EQ(scheduler->Cancel(2).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler->Finish(1, FinishReason::kNone).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Mid-step: 3 is cancelled after the plan was made; its result is skipped. The engine
  // ends 4 for a stop string the same way.
  StepPlan plan = scheduler->Schedule();
  EXPECT_THAT(Ids(plan), ElementsAre(1, 3, 4));
  ASSERT_TRUE(scheduler->Cancel(3).ok());
  absl::StatusOr<RequestUpdate> stopped = scheduler->Finish(4, FinishReason::kStop);
  ASSERT_TRUE(stopped.ok());
  // Its final update: no token, the engine's reason, usage of 3 prompt + 1 output tokens.
  EXPECT_FALSE(stopped->token.has_value());
  EXPECT_EQ(stopped->finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped->num_prompt_tokens, 3);
  EXPECT_EQ(stopped->num_output_tokens, 1);
  std::vector<RequestUpdate> updates = Apply(*scheduler, plan);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].request_id, 1u);
  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, FailedStepFailsItsRequestsNamingTheRank) {
  auto scheduler = Make(HybridConfig(/*kv_pages=*/8));
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 3, 4)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 3, 4)).ok());
  StepPlan plan = scheduler->Schedule();
  StepResult result;
  result.step_id = plan.step_id;
  result.ok = false;
  result.failed_rank = 2;
  result.error = "ssm_scan: slot 9 out of range [0, 8)";
  absl::StatusOr<std::vector<RequestUpdate>> updates = scheduler->Update(plan, result);
  ASSERT_TRUE(updates.ok()) << updates.status();
  ASSERT_EQ(updates->size(), 2u);
  for (const RequestUpdate& update : *updates) {
    EXPECT_EQ(update.finish_reason, FinishReason::kError);
    EXPECT_EQ(update.error.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(update.error.message(), HasSubstr("rank 2"));
    EXPECT_THAT(update.error.message(), HasSubstr("slot 9"));
  }
  EXPECT_FALSE(scheduler->HasUnfinishedRequests());
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, ResultNotMatchingThePlanFailsTheStep) {
  auto scheduler = Make(SmallConfig());
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 3, 4)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 3, 4)).ok());
  StepPlan plan = scheduler->Schedule();
  StepResult result = Answer(plan);
  result.tokens.pop_back();  // request 2's token is missing

  StepPlan stale = plan;
  stale.step_id += 1;
  EXPECT_EQ(scheduler->Update(stale, result).status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::vector<RequestUpdate>> updates = scheduler->Update(plan, result);
  ASSERT_TRUE(updates.ok());
  ASSERT_EQ(updates->size(), 2u);
  EXPECT_EQ((*updates)[0].error.code(), absl::StatusCode::kInternal);
  // The plan was answered: a second Update of it is refused.
  EXPECT_EQ(scheduler->Update(plan, result).status().code(), absl::StatusCode::kFailedPrecondition);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, SampledSequencesCarryParamsRngStepAndPenaltyHistory) {
  auto scheduler = Make(SmallConfig());
  NewRequest penalized = Req(1, 2, 3);
  penalized.sampling.temperature = 0.5f;
  penalized.sampling.seed = 42;
  penalized.sampling.repetition_penalty = 1.2f;
  ASSERT_TRUE(scheduler->AddRequest(penalized).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 2, 3)).ok());  // no penalty: no history

  for (int32_t rng_step = 0; rng_step < 3; ++rng_step) {
    StepPlan plan = scheduler->Schedule();
    ASSERT_EQ(plan.sequences.size(), 2u);
    const ScheduledSequence& a = plan.sequences[0];
    EXPECT_TRUE(a.sample);
    EXPECT_EQ(a.rng_step, rng_step);
    EXPECT_EQ(a.sampling.seed, 42u);
    EXPECT_FLOAT_EQ(a.sampling.temperature, 0.5f);
    // The prompt, then every output so far: the sampler's penalty input.
    std::vector<int32_t> history = {100, 101};
    for (int32_t i = 0; i < rng_step; ++i) history.push_back(DefaultToken(1, i));
    EXPECT_EQ(a.history, history);
    EXPECT_EQ(a.num_prompt_tokens, 2);
    EXPECT_TRUE(plan.sequences[1].history.empty());
    Apply(*scheduler, plan);
  }
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, CountersFollowTheSteps) {
  auto scheduler = Make(SmallConfig());
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 5, 2)).ok());
  ASSERT_TRUE(scheduler->AddRequest(Req(2, 3, 1)).ok());
  SchedulerCounters counters = scheduler->counters();
  EXPECT_EQ(counters.waiting, 2);
  EXPECT_EQ(counters.running, 0);
  // Step 1: prompts 5 + 3 = 8 tokens; request 2 finishes with its only token.
  Apply(*scheduler, scheduler->Schedule());
  // Step 2: one decode of request 1, its last token.
  Apply(*scheduler, scheduler->Schedule());
  scheduler->Schedule();  // nothing left: an empty plan, not a step
  counters = scheduler->counters();
  EXPECT_EQ(counters.steps, 2);
  EXPECT_EQ(counters.tokens_scheduled, 9);
  EXPECT_EQ(counters.tokens_scheduled_last_step, 0);
  EXPECT_EQ(counters.preemptions, 0);
  EXPECT_FALSE(scheduler->HasUnfinishedRequests());
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, PureMambaModelUsesNoPages) {
  auto scheduler = Make(SmallConfig());
  ASSERT_TRUE(scheduler->AddRequest(Req(1, 40, 2)).ok());
  StepPlan plan = scheduler->Schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_TRUE(plan.sequences[0].kv_block_table.empty());
  EXPECT_EQ(scheduler->counters().pages_used, 0);
  Apply(*scheduler, plan);
  Drain(*scheduler);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, EmptySchedulerPlansNothingAndShutdownPlanIsMarked) {
  auto scheduler = Make(SmallConfig());
  StepPlan empty = scheduler->Schedule();
  EXPECT_TRUE(empty.sequences.empty());
  EXPECT_FALSE(empty.shutdown);
  StepPlan next = scheduler->Schedule();  // an empty plan awaits no Update
  StepPlan shutdown = scheduler->ShutdownPlan();
  EXPECT_TRUE(shutdown.shutdown);
  EXPECT_TRUE(shutdown.sequences.empty());
  EXPECT_LT(empty.step_id, next.step_id);
  EXPECT_LT(next.step_id, shutdown.step_id);
  ExpectPoolsFull(*scheduler);
}

TEST(SchedulerTest, RefusesAnInvalidConfig) {
  SchedulerConfig config = SmallConfig();
  config.max_batched_tokens = 3;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(config);
  EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scheduler.status().message(), HasSubstr("scheduler config: max_batched_tokens"));
}

}  // namespace
}  // namespace coil
