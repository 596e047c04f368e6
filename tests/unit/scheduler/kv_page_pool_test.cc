// The page pool: page counts are ceil(tokens / block_size) worked by hand; Grow is all or
// nothing; freed pages come back and are reused; a shared page is free only when its last
// holder lets it go.
#include "scheduler/kv_page_pool.h"

#include <set>

#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(KvPagePoolTest, PagesForRoundsUp) {
  KvPagePool pool(8, 4);
  EXPECT_EQ(pool.PagesFor(0), 0);
  EXPECT_EQ(pool.PagesFor(1), 1);
  EXPECT_EQ(pool.PagesFor(4), 1);
  EXPECT_EQ(pool.PagesFor(5), 2);
  EXPECT_EQ(pool.PagesFor(32), 8);
}

TEST(KvPagePoolTest, GrowCoversTokensAndFailsWithoutChange) {
  KvPagePool pool(5, 4);
  KvBlocks a;
  ASSERT_TRUE(pool.Grow(&a, 9));  // 3 pages
  EXPECT_EQ(a.num_pages(), 3);
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_TRUE(pool.Grow(&a, 12));  // still 3 pages: no new page
  EXPECT_EQ(a.num_pages(), 3);
  EXPECT_EQ(pool.PagesToGrow(a, 13), 1);

  KvBlocks b;
  EXPECT_FALSE(pool.Grow(&b, 12));  // needs 3, 2 free: nothing taken
  EXPECT_EQ(b.num_pages(), 0);
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_TRUE(pool.Grow(&b, 8));

  // No page is in both tables.
  std::set<int32_t> seen(a.page_ids().begin(), a.page_ids().end());
  for (int32_t page : b.page_ids()) EXPECT_TRUE(seen.insert(page).second) << page;
  EXPECT_EQ(seen.size(), 5u);

  pool.Free(&a);
  EXPECT_EQ(a.num_pages(), 0);
  EXPECT_EQ(pool.num_free(), 3);
  pool.Free(&b);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvPagePoolTest, FreedPagesAreReused) {
  KvPagePool pool(2, 1);
  KvBlocks a;
  ASSERT_TRUE(pool.Grow(&a, 2));
  const std::vector<int32_t> pages = a.page_ids();
  pool.Free(&a);
  KvBlocks b;
  ASSERT_TRUE(pool.Grow(&b, 2));
  EXPECT_EQ(std::set<int32_t>(b.page_ids().begin(), b.page_ids().end()),
            std::set<int32_t>(pages.begin(), pages.end()));
  pool.Free(&b);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(KvPagePoolTest, ASharedPageIsFreeOnlyWhenItsLastHolderLetsGo) {
  KvPagePool pool(6, 4);
  KvBlocks request;
  ASSERT_TRUE(pool.Grow(&request, 12));  // 3 pages
  KvBlocks snapshot;
  pool.Share(request, 2, &snapshot);  // the first 8 positions
  EXPECT_EQ(snapshot.page_ids(),
            std::vector<int32_t>(request.page_ids().begin(), request.page_ids().begin() + 2));
  EXPECT_EQ(pool.holders(request.page_ids()[0]), 2);
  EXPECT_EQ(pool.holders(request.page_ids()[2]), 1);
  EXPECT_EQ(pool.num_used(), 3);

  // The request ends: its third page is free, the two shared ones stay held.
  pool.Free(&request);
  EXPECT_EQ(pool.num_free(), 4);
  // A request resumed from the snapshot reads its pages and grows its own after them.
  KvBlocks resumed;
  pool.Share(snapshot, 2, &resumed);
  ASSERT_TRUE(pool.Grow(&resumed, 13));  // 4 pages: 2 shared, 2 new
  EXPECT_EQ(resumed.num_pages(), 4);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.holders(resumed.page_ids()[0]), 2);
  EXPECT_EQ(pool.holders(resumed.page_ids()[3]), 1);
  pool.Free(&snapshot);
  EXPECT_EQ(pool.num_free(), 2);
  pool.Free(&resumed);
  EXPECT_EQ(pool.num_free(), 6);
  EXPECT_EQ(pool.holders(0), 0);
}

}  // namespace
}  // namespace coil
