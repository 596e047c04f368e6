// A plan survives encoding field for field (compared with the original, not with another
// encoding), and malformed bytes or plans are refused before any rank runs them.
#include "workers/plan_codec.h"

#include "coil/v1/step.pb.h"
#include "gtest/gtest.h"

namespace coil {
namespace {

StepPlan SamplePlan() {
  StepPlan plan;
  plan.step_id = 77;
  plan.num_decodes = 1;
  ScheduledSequence decode;
  decode.request_id = 5;
  decode.state_slot = 3;
  decode.token_ids = {42};
  decode.start_position = 19;
  decode.kv_block_table = {7, 1};
  decode.sample = true;
  decode.sampling.temperature = 0.7f;
  decode.sampling.top_k = 40;
  decode.sampling.top_p = 0.9f;
  decode.sampling.min_p = 0.05f;
  decode.sampling.presence_penalty = 0.5f;
  decode.sampling.frequency_penalty = 0.25f;
  decode.sampling.repetition_penalty = 1.1f;
  decode.sampling.seed = 0xFFFFFFFFFFFFull;
  decode.sampling.logprobs = true;
  decode.sampling.top_logprobs = 3;
  decode.rng_step = 4;
  decode.history = {1, 2, 3, 42};
  decode.num_prompt_tokens = 3;
  ScheduledSequence prefill;
  prefill.request_id = 9;
  prefill.state_slot = 0;
  prefill.fresh = true;
  prefill.token_ids = {10, 11, 12, 13};
  plan.sequences = {decode, prefill};
  plan.restores = {{6, 0}};
  plan.snapshots = {{0, 2}, {3, 6}};
  return plan;
}

TEST(PlanCodecTest, RoundTripKeepsEveryField) {
  const StepPlan plan = SamplePlan();
  auto decoded = DecodeStepPlan(EncodeStepPlan(plan));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->step_id, 77u);
  EXPECT_FALSE(decoded->shutdown);
  EXPECT_EQ(decoded->num_decodes, 1);
  ASSERT_EQ(decoded->sequences.size(), 2u);
  const ScheduledSequence& d = decoded->sequences[0];
  EXPECT_EQ(d.request_id, 5u);
  EXPECT_EQ(d.state_slot, 3);
  EXPECT_FALSE(d.fresh);
  EXPECT_EQ(d.token_ids, std::vector<int32_t>({42}));
  EXPECT_EQ(d.start_position, 19);
  EXPECT_EQ(d.kv_block_table, std::vector<int32_t>({7, 1}));
  EXPECT_TRUE(d.sample);
  EXPECT_EQ(d.sampling.temperature, 0.7f);
  EXPECT_EQ(d.sampling.top_k, 40);
  EXPECT_EQ(d.sampling.top_p, 0.9f);
  EXPECT_EQ(d.sampling.min_p, 0.05f);
  EXPECT_EQ(d.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(d.sampling.frequency_penalty, 0.25f);
  EXPECT_EQ(d.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(d.sampling.seed, 0xFFFFFFFFFFFFull);
  EXPECT_TRUE(d.sampling.logprobs);
  EXPECT_EQ(d.sampling.top_logprobs, 3);
  EXPECT_EQ(d.rng_step, 4);
  EXPECT_EQ(d.history, std::vector<int32_t>({1, 2, 3, 42}));
  EXPECT_EQ(d.num_prompt_tokens, 3);
  const ScheduledSequence& p = decoded->sequences[1];
  EXPECT_TRUE(p.fresh);
  EXPECT_FALSE(p.sample);
  EXPECT_EQ(p.token_ids, std::vector<int32_t>({10, 11, 12, 13}));
  ASSERT_EQ(decoded->restores.size(), 1u);
  EXPECT_EQ(decoded->restores[0].from_slot, 6);
  EXPECT_EQ(decoded->restores[0].to_slot, 0);
  ASSERT_EQ(decoded->snapshots.size(), 2u);
  EXPECT_EQ(decoded->snapshots[0].from_slot, 0);
  EXPECT_EQ(decoded->snapshots[0].to_slot, 2);
  EXPECT_EQ(decoded->snapshots[1].from_slot, 3);
  EXPECT_EQ(decoded->snapshots[1].to_slot, 6);
}

TEST(PlanCodecTest, ShutdownPlanRoundTrips) {
  StepPlan plan;
  plan.step_id = 3;
  plan.shutdown = true;
  auto decoded = DecodeStepPlan(EncodeStepPlan(plan));
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->shutdown);
  EXPECT_TRUE(decoded->sequences.empty());
}

TEST(PlanCodecTest, MalformedPlansAreRefused) {
  EXPECT_EQ(DecodeStepPlan(std::string("\xff\xff\xff", 3)).status().code(),
            absl::StatusCode::kInternal);

  StepPlan plan = SamplePlan();
  plan.num_decodes = 3;  // more decodes than sequences
  EXPECT_NE(DecodeStepPlan(EncodeStepPlan(plan)).status().message().find("num_decodes"),
            std::string::npos);

  plan = SamplePlan();
  plan.sequences[1].token_ids.clear();
  EXPECT_NE(DecodeStepPlan(EncodeStepPlan(plan)).status().message().find("no tokens"),
            std::string::npos);

  plan = SamplePlan();
  plan.sequences[0].token_ids = {1, 2};  // a decode with two tokens
  EXPECT_EQ(DecodeStepPlan(EncodeStepPlan(plan)).status().code(), absl::StatusCode::kInternal);

  plan = SamplePlan();
  plan.sequences[1].start_position = 4;  // fresh but not at position 0
  EXPECT_NE(DecodeStepPlan(EncodeStepPlan(plan)).status().message().find("fresh"),
            std::string::npos);

  plan = SamplePlan();
  plan.restores[0].from_slot = 0;  // a row onto itself
  EXPECT_EQ(DecodeStepPlan(EncodeStepPlan(plan)).status().message(),
            "step 77: restore copies state row 0 to 0");
  plan = SamplePlan();
  plan.snapshots[1].to_slot = -2;
  EXPECT_EQ(DecodeStepPlan(EncodeStepPlan(plan)).status().message(),
            "step 77: snapshot copies state row 3 to -2");
}

}  // namespace
}  // namespace coil
