// The prefix index on its own: longest match at chunk multiples, a mismatch anywhere in a
// chunk stopping the walk, duplicates refused, least-recently-used eviction and the
// pruning of nodes no snapshot needs. Expected values are worked out by hand from the
// token lists in each test (chunk size 4).
#include "scheduler/prefix_cache.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/kv_page_pool.h"
#include "scheduler/state_row_pool.h"

namespace coil {
namespace {

// 0, 1, 2, ... n - 1: distinct tokens, so a changed position is easy to name.
std::vector<int32_t> Count(int32_t n) {
  std::vector<int32_t> tokens(n);
  for (int32_t i = 0; i < n; ++i) tokens[i] = i;
  return tokens;
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  StateRow Row() { return *rows_.Allocate(); }
  StateRowPool rows_{16};
  PrefixCache cache_{4};
};

TEST_F(PrefixCacheTest, FindsTheLongestSnapshotWithinTheLimit) {
  const std::vector<int32_t> tokens = Count(30);
  const StateRow at8 = Row(), at24 = Row();
  EXPECT_FALSE(cache_.Insert(tokens, 8, {at8, {}}).has_value());
  EXPECT_FALSE(cache_.Insert(tokens, 24, {at24, {}}).has_value());
  EXPECT_EQ(cache_.num_snapshots(), 2);
  EXPECT_EQ(cache_.num_nodes(), 6);  // chunks 1..6 of the longer prefix

  PrefixCache::Match match = cache_.Find(tokens, 100);
  EXPECT_EQ(match.length, 24);
  EXPECT_EQ(match.slot, at24.slot());
  // A limit short of 24 (a prompt of 24 tokens must compute its last one) gives 8.
  match = cache_.Find(tokens, 23);
  EXPECT_EQ(match.length, 8);
  EXPECT_EQ(match.slot, at8.slot());
  EXPECT_EQ(cache_.Find(tokens, 7).length, 0);
  EXPECT_EQ(cache_.Find(std::vector<int32_t>(tokens.begin(), tokens.begin() + 20), 100).length, 8);
  EXPECT_TRUE(cache_.Contains(tokens, 8));
  EXPECT_FALSE(cache_.Contains(tokens, 12));  // a node, not a snapshot
  EXPECT_FALSE(cache_.Contains(tokens, 10));  // not a chunk multiple
}

TEST_F(PrefixCacheTest, OneChangedTokenEndsTheMatchAtTheChunkBefore) {
  const std::vector<int32_t> tokens = Count(30);
  ASSERT_FALSE(cache_.Insert(tokens, 24, {Row(), {}}).has_value());
  ASSERT_FALSE(cache_.Insert(tokens, 12, {Row(), {}}).has_value());
  for (const int32_t changed : {0, 3, 11, 12, 13, 20, 23, 24}) {
    std::vector<int32_t> other = tokens;
    other[changed] = 99;
    // Snapshots end at 12 and 24: the longest one before the changed position.
    const int32_t expected = changed >= 24 ? 24 : changed >= 12 ? 12 : 0;
    EXPECT_EQ(cache_.Find(other, 100).length, expected) << "token " << changed << " changed";
  }
}

TEST_F(PrefixCacheTest, ASecondSnapshotOfAPrefixIsRefused) {
  const std::vector<int32_t> tokens = Count(12);
  const StateRow first = Row(), second = Row();
  ASSERT_FALSE(cache_.Insert(tokens, 8, {first, {}}).has_value());
  const std::optional<Snapshot> back = cache_.Insert(tokens, 8, {second, {}});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->row.slot(), second.slot());
  EXPECT_EQ(cache_.Find(tokens, 100).slot, first.slot());
  // A snapshot on a node that so far only led to a longer one is taken.
  ASSERT_FALSE(cache_.Insert(tokens, 12, {Row(), {}}).has_value());
  ASSERT_FALSE(cache_.Insert(tokens, 4, {Row(), {}}).has_value());
  EXPECT_EQ(cache_.num_snapshots(), 3);
  EXPECT_EQ(cache_.num_nodes(), 3);
}

TEST_F(PrefixCacheTest, EvictsLeastRecentlyUsedAndPrunesWhatNoSnapshotNeeds) {
  // Two prompts sharing their first chunk: a tree of 1 + 2 + 2 nodes.
  const std::vector<int32_t> a = Count(12);
  std::vector<int32_t> b = a;
  b[5] = 77;
  const StateRow row_a = Row(), row_b = Row(), row_shared = Row();
  ASSERT_FALSE(cache_.Insert(a, 12, {row_a, {}}).has_value());
  ASSERT_FALSE(cache_.Insert(b, 12, {row_b, {}}).has_value());
  ASSERT_FALSE(cache_.Insert(a, 4, {row_shared, {}}).has_value());
  EXPECT_EQ(cache_.num_nodes(), 5);
  // Use a's snapshot: b's is now the oldest, then the shared one, then a's.
  cache_.Touch(cache_.Find(a, 100));

  std::optional<Snapshot> evicted = cache_.EvictLeastRecent();
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(evicted->row.slot(), row_b.slot());
  EXPECT_EQ(cache_.num_nodes(), 3);  // b's two own chunks go; the shared one stays
  EXPECT_EQ(cache_.Find(b, 100).length, 4);

  evicted = cache_.EvictLeastRecent();
  EXPECT_EQ(evicted->row.slot(), row_shared.slot());
  EXPECT_EQ(cache_.num_nodes(), 3);  // still on a's path
  EXPECT_EQ(cache_.Find(b, 100).length, 0);
  EXPECT_EQ(cache_.Find(a, 100).length, 12);

  evicted = cache_.EvictLeastRecent();
  EXPECT_EQ(evicted->row.slot(), row_a.slot());
  EXPECT_EQ(cache_.num_nodes(), 0);
  EXPECT_EQ(cache_.num_snapshots(), 0);
  EXPECT_FALSE(cache_.EvictLeastRecent().has_value());
}

TEST_F(PrefixCacheTest, EvictionSkipsTheKeptSnapshotAndHandsBackItsPages) {
  KvPagePool pool(4, 4);
  KvBlocks request;
  ASSERT_TRUE(pool.Grow(&request, 8));
  const std::vector<int32_t> a = Count(8);
  std::vector<int32_t> b = Count(8);
  b[0] = 50;
  Snapshot with_pages{Row(), {}};
  pool.Share(request, 2, &with_pages.pages);
  ASSERT_FALSE(cache_.Insert(a, 8, std::move(with_pages)).has_value());
  const StateRow row_b = Row();
  ASSERT_FALSE(cache_.Insert(b, 4, {row_b, {}}).has_value());
  const PrefixCache::Match match = cache_.Find(a, 100);
  ASSERT_EQ(match.length, 8);
  ASSERT_NE(match.pages, nullptr);
  EXPECT_EQ(match.pages->page_ids(), request.page_ids());
  // a's snapshot is the older, but it is kept: b's goes.
  std::optional<Snapshot> evicted = cache_.EvictLeastRecent(match.key);
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(evicted->row.slot(), row_b.slot());
  EXPECT_FALSE(cache_.EvictLeastRecent(match.key).has_value());  // only the kept one is left
  evicted = cache_.EvictLeastRecent();
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(evicted->pages.page_ids(), request.page_ids());
  pool.Free(&evicted->pages);
  pool.Free(&request);
  EXPECT_EQ(pool.num_free(), 4);
}

TEST_F(PrefixCacheTest, ATokenListShorterThanTheLimitStopsAtItsEnd) {
  const std::vector<int32_t> tokens = Count(16);
  ASSERT_FALSE(cache_.Insert(tokens, 16, {Row(), {}}).has_value());
  EXPECT_EQ(cache_.Find(std::vector<int32_t>(tokens.begin(), tokens.begin() + 15), 100).length, 0);
  EXPECT_EQ(cache_.Find(tokens, 16).length, 16);
}

}  // namespace
}  // namespace coil
