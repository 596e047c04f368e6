#include "common/logging.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(LoggingTest, LineHasSeverityBaseNamePrefixAndOneNewline) {
  const std::string line =
      FormatLogLine(LogSeverity::kWarning, "/src/coil/engine/server.cc", 42, "rank 1", "hello");
  // "W HH:MM:SS.mmm rank 1 server.cc:42] hello\n"
  ASSERT_GE(line.size(), 15u);
  EXPECT_EQ(line[0], 'W');
  EXPECT_EQ(line[4], ':');
  EXPECT_EQ(line[7], ':');
  EXPECT_EQ(line[10], '.');
  EXPECT_EQ(line.substr(15), "rank 1 server.cc:42] hello\n");
}

TEST(LoggingTest, FilteredMessagesDoNotEvaluateArguments) {
  const LogSeverity saved = MinLogSeverity();
  SetMinLogSeverity(LogSeverity::kError);
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  COIL_LOG(INFO) << count();
  EXPECT_EQ(evaluated, 0);
  testing::internal::CaptureStderr();
  COIL_LOG(ERROR) << "value " << count();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
  EXPECT_NE(err.find("logging_test.cc"), std::string::npos);
  EXPECT_NE(err.find("] value 1\n"), std::string::npos);
  SetMinLogSeverity(saved);
}

TEST(LoggingDeathTest, CheckAbortsWithTheCondition) {
  EXPECT_DEATH({ COIL_CHECK(1 + 1 == 3) << "arithmetic"; }, "check failed: 1 \\+ 1 == 3 arithmetic");
}

}  // namespace
}  // namespace coil

namespace coil {
namespace {

// One event per interval gets through; the next one that does reports how many did not.
TEST(LogRateLimiterTest, LetsOnePerIntervalThroughAndCountsTheRest) {
  LogRateLimiter limiter(std::chrono::milliseconds(200));
  int64_t suppressed = -1;
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(&suppressed));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 5);
  EXPECT_FALSE(limiter.Allow(&suppressed));
}

}  // namespace
}  // namespace coil
