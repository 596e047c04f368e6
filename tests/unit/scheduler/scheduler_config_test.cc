// Config validation: each bad field is refused with a message naming it; the token-budget
// rule (running - 1 + ssd_chunk_size) is worked out by hand at its boundary.
#include "scheduler/scheduler_config.h"

#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(SchedulerConfigTest, DefaultsAreValid) { EXPECT_TRUE(SchedulerConfig().Validate().ok()); }

TEST(SchedulerConfigTest, RefusesBadFieldsNamingThem) {
  struct Case {
    void (*mutate)(SchedulerConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](SchedulerConfig& c) { c.max_num_seqs = 0; }, "max_num_seqs"},
      {[](SchedulerConfig& c) { c.state_rows = 0; }, "state_rows"},
      {[](SchedulerConfig& c) { c.max_model_len = 1; }, "max_model_len"},
      {[](SchedulerConfig& c) { c.max_queue = -1; }, "max_queue"},
      {[](SchedulerConfig& c) { c.block_size = 0; }, "block_size"},
      {[](SchedulerConfig& c) { c.ssd_chunk_size = 0; }, "ssd_chunk_size"},
      {[](SchedulerConfig& c) { c.num_attention_layers = 2; }, "kv_pages"},
      {[](SchedulerConfig& c) { c.prefix_cache_max_rows = -1; }, "prefix_cache_max_rows"},
      {[](SchedulerConfig& c) {
         c.prefix_cache = true;
         c.num_attention_layers = 2;
         c.kv_pages = 8;
         c.block_size = 24;  // does not divide the chunk size, 256
       },
       "prefix_cache"},
  };
  for (const Case& test_case : cases) {
    SchedulerConfig config;
    test_case.mutate(config);
    absl::Status status = config.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << test_case.field;
    EXPECT_NE(status.message().find(test_case.field), absl::string_view::npos) << status;
  }
}

TEST(SchedulerConfigTest, TokenBudgetMustLeaveRoomForOneChunkBesideDecodes) {
  SchedulerConfig config;
  config.max_num_seqs = 8;
  config.state_rows = 16;  // running is bounded by the smaller: 8
  config.ssd_chunk_size = 64;
  config.max_batched_tokens = 7 + 64;  // 7 decodes + one chunk
  EXPECT_TRUE(config.Validate().ok());
  config.max_batched_tokens = 7 + 63;
  absl::Status status = config.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("at least 71"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace coil
