// The backoff's schedule: spin, then sleeps doubling from first_sleep to max_sleep.
#include "workers/comm/polling_backoff.h"

#include <chrono>
#include <vector>

#include "gtest/gtest.h"

namespace coil::comm {
namespace {

using std::chrono::microseconds;

TEST(PollingBackoffTest, SpinsThenDoublesUpToTheCap) {
  BackoffOptions options;
  options.spin_polls = 3;
  options.first_sleep = microseconds(50);
  options.max_sleep = microseconds(300);
  PollingBackoff backoff(options);
  // By hand: 3 free polls, then 50, 100, 200, then capped at 300.
  const std::vector<int64_t> expected = {0, 0, 0, 50, 100, 200, 300, 300};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(backoff.NextPause().count(), expected[i]) << "poll " << i;
    backoff.Pause();
  }
  EXPECT_EQ(backoff.stats().polls, 8);
  EXPECT_EQ(backoff.stats().sleeps, 5);

  backoff.Reset();
  EXPECT_EQ(backoff.NextPause().count(), 0);
  EXPECT_EQ(backoff.stats().polls, 0);
}

TEST(PollingBackoffTest, ZeroMaxSleepNeverSleeps) {
  BackoffOptions options;
  options.spin_polls = 0;
  options.max_sleep = microseconds(0);
  PollingBackoff backoff(options);
  for (int i = 0; i < 1000; ++i) backoff.Pause();
  EXPECT_EQ(backoff.stats().polls, 1000);
  EXPECT_EQ(backoff.stats().sleeps, 0);
}

TEST(PollingBackoffTest, SleepsAtLeastTheScheduledTime) {
  BackoffOptions options;
  options.spin_polls = 0;
  options.first_sleep = microseconds(1000);
  options.max_sleep = microseconds(4000);
  PollingBackoff backoff(options);
  // 1 + 2 + 4 + 4 ms: sleep_for never returns early.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) backoff.Pause();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::milliseconds(11));
}

}  // namespace
}  // namespace coil::comm
