// The row pool hands out the lowest free slot, never one slot twice, and takes rows back.
// Expected slots are worked out by hand from "lowest free first".
#include "scheduler/state_row_pool.h"

#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(StateRowPoolTest, HandsOutLowestFreeSlotUntilEmpty) {
  StateRowPool pool(3);
  EXPECT_EQ(pool.num_total(), 3);
  std::optional<StateRow> a = pool.Allocate();
  std::optional<StateRow> b = pool.Allocate();
  std::optional<StateRow> c = pool.Allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->slot(), 0);
  EXPECT_EQ(b->slot(), 1);
  EXPECT_EQ(c->slot(), 2);
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 3);

  // Freeing the middle row makes it the next one handed out, ahead of any later free.
  pool.Free(&*b);
  EXPECT_FALSE(b->held());
  pool.Free(&*c);
  std::optional<StateRow> again = pool.Allocate();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->slot(), 1);

  pool.Free(&*a);
  pool.Free(&*again);
  EXPECT_EQ(pool.num_free(), 3);
}

TEST(StateRowPoolTest, DefaultRowHoldsNothing) {
  StateRow row;
  EXPECT_FALSE(row.held());
}

TEST(StateRowPoolDeathTest, FreeingTwiceAborts) {
  StateRowPool pool(2);
  StateRow row = *pool.Allocate();
  StateRow copy = row;  // a second handle to the same slot: a caller bug
  pool.Free(&row);
  EXPECT_DEATH(pool.Free(&copy), "freed twice");
}

}  // namespace
}  // namespace coil
