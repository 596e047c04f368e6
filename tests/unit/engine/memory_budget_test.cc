// The split of --memory-budget between state rows and KV pages, against numbers worked out
// by hand: a 10 MiB state row, 64 KiB pages of 16 tokens, max_model_len 4096 (256 pages, so
// 26 MiB per full-length request) and a 2 GiB budget.
#include "engine/memory_budget.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coil {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1024 * 1024;

BudgetRequest Hybrid() {
  BudgetRequest r;
  r.budget_bytes = 2048 * kMiB;
  r.row_bytes = 10 * kMiB;
  r.page_bytes = 64 * 1024;
  r.block_size = 16;
  r.max_model_len = 4096;
  r.max_num_seqs = 256;
  return r;
}

TEST(MemoryBudgetTest, AHybridGetsARowPerFullLengthRequestAndTheRestInPages) {
  absl::StatusOr<Budgets> b = SplitMemoryBudget(Hybrid());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->state_rows, 78);                             // 2048 / 26
  EXPECT_EQ(b->kv_pages, (2048 - 780) * 16);                // 20288: the rest, 16 pages a MiB
  EXPECT_EQ(b->bytes, 79 * 10 * kMiB + 20289 * 64 * 1024);  // with the scratch row and page
  EXPECT_THAT(b->description, HasSubstr("78 state rows"));
  EXPECT_THAT(b->description, HasSubstr("20288 KV pages"));
}

TEST(MemoryBudgetTest, RowsBeyondMaxNumSeqsGoToPages) {
  BudgetRequest r = Hybrid();
  r.max_num_seqs = 8;
  absl::StatusOr<Budgets> b = SplitMemoryBudget(r);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->state_rows, 8);
  EXPECT_EQ(b->kv_pages, (2048 - 80) * 16);
}

TEST(MemoryBudgetTest, AFlagFixesOneAndTheRestGoesToTheOther) {
  BudgetRequest r = Hybrid();
  r.state_rows = 4;
  EXPECT_EQ(SplitMemoryBudget(r)->kv_pages, (2048 - 40) * 16);
  r.state_rows = 0;
  r.kv_pages = 1000;  // 62.5 MiB: 1985.5 MiB left, 198 rows
  EXPECT_EQ(SplitMemoryBudget(r)->state_rows, 198);
  EXPECT_EQ(SplitMemoryBudget(r)->kv_pages, 1000);
  r.state_rows = 3;  // both given: taken as they are
  EXPECT_EQ(SplitMemoryBudget(r)->state_rows, 3);
  EXPECT_EQ(SplitMemoryBudget(r)->kv_pages, 1000);
}

TEST(MemoryBudgetTest, AMamba2ModelGetsRowsOnly) {
  BudgetRequest r = Hybrid();
  r.page_bytes = 0;
  absl::StatusOr<Budgets> b = SplitMemoryBudget(r);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->state_rows, 204);  // 2048 / 10
  EXPECT_EQ(b->kv_pages, 0);
  EXPECT_EQ(b->bytes, 205 * 10 * kMiB);
  r.kv_pages = 10;
  EXPECT_THAT(std::string(SplitMemoryBudget(r).status().message()), HasSubstr("--kv-pages"));
}

TEST(MemoryBudgetTest, DerivedRowsStopAtMaxNumSeqsPlusThePrefixCachesRows) {
  BudgetRequest r = Hybrid();
  r.page_bytes = 0;
  r.max_num_seqs = 8;
  EXPECT_EQ(SplitMemoryBudget(r)->state_rows, 8);  // no prefix cache
  r.spare_rows = 100;
  EXPECT_EQ(SplitMemoryBudget(r)->state_rows, 108);  // its cap
  r.spare_rows = INT32_MAX;
  EXPECT_EQ(SplitMemoryBudget(r)->state_rows, 204);  // all the budget holds
}

TEST(MemoryBudgetTest, BudgetsTooSmallNameTheFlagToChange) {
  BudgetRequest r = Hybrid();
  r.budget_bytes = 20 * kMiB;  // less than one full-length request
  EXPECT_THAT(std::string(SplitMemoryBudget(r).status().message()), HasSubstr("--max-model-len"));
  r.state_rows = 2;  // 20 MiB of rows: no page left
  EXPECT_THAT(std::string(SplitMemoryBudget(r).status().message()), HasSubstr("--state-rows"));
  r.state_rows = 0;
  r.kv_pages = 400;  // 25 MiB of pages
  EXPECT_THAT(std::string(SplitMemoryBudget(r).status().message()), HasSubstr("--kv-pages"));
  r.kv_pages = -1;
  EXPECT_THAT(std::string(SplitMemoryBudget(r).status().message()), HasSubstr("--kv-pages"));
}

TEST(MemoryBudgetTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("2GiB", "--memory-budget"), 2048 * kMiB);
  EXPECT_EQ(*ParseByteSize("512mib", "--memory-budget"), 512 * kMiB);
  EXPECT_EQ(*ParseByteSize("1.5G", "--memory-budget"), 1536 * kMiB);
  EXPECT_EQ(*ParseByteSize("1000000", "--memory-budget"), 1000000);
  EXPECT_EQ(*ParseByteSize("1kb", "--memory-budget"), 1000);
  EXPECT_THAT(std::string(ParseByteSize("lots", "--memory-budget").status().message()),
              HasSubstr("--memory-budget is 'lots'"));
  EXPECT_FALSE(ParseByteSize("-1GiB", "--memory-budget").ok());
}

}  // namespace
}  // namespace coil
