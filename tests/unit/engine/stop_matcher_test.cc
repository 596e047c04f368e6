// Stop strings across token boundaries: expected outputs worked out by hand for each feed,
// plus an invariant over every split of a text: emitted + flushed text is the text cut
// before the first stop string, whatever the token boundaries.
#include "engine/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(StopMatcherTest, HoldsBackAPossibleStartAndReleasesIt) {
  StopMatcher matcher({"\n\nUser:"});
  auto r = matcher.Push("Hello\n");
  EXPECT_EQ(r.emit, "Hello");  // "\n" might begin the stop
  EXPECT_FALSE(r.stopped);
  r = matcher.Push("\nUs");
  EXPECT_EQ(r.emit, "");  // "\n\nUs" still might
  r = matcher.Push("a");
  EXPECT_EQ(r.emit, "\n\nUsa");  // decided: not a stop
  EXPECT_EQ(matcher.held(), 0u);
}

TEST(StopMatcherTest, StopAcrossTokensIsCutAndNeverLeaks) {
  StopMatcher matcher({"END"});
  std::string out;
  for (const char* piece : {"The E", "N", "D of it"}) {
    auto r = matcher.Push(piece);
    out += r.emit;
    if (r.stopped) {
      EXPECT_EQ(r.matched, "END");
      break;
    }
  }
  EXPECT_EQ(out, "The ");
  EXPECT_EQ(matcher.Push("more").emit, "");  // nothing after a stop
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, EarliestStopWinsAndFlushReturnsHeldText) {
  StopMatcher matcher({"cd", "bcde"});
  auto r = matcher.Push("abcdef");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "a");  // "bcde" starts at 1, before "cd" at 2
  EXPECT_EQ(r.matched, "bcde");

  StopMatcher other({"xyz"});
  EXPECT_EQ(other.Push("abx").emit, "ab");
  EXPECT_EQ(other.Flush(), "x");
}

TEST(StopMatcherTest, MultibyteStopStrings) {
  StopMatcher matcher({"。\n"});
  auto r = matcher.Push("日本。");
  EXPECT_EQ(r.emit, "日本");
  r = matcher.Push("\n次");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

TEST(StopMatcherTest, EverySplitGivesTheSameText) {
  const std::string text = "say stop, then sto then stopper and st";
  const std::vector<std::string> stops = {"stopper", "then st"};
  const std::string expected = "say stop, ";  // "then st" first occurs at 10
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      StopMatcher matcher(stops);
      std::string out;
      bool stopped = false;
      for (auto piece : {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) {
        auto r = matcher.Push(piece);
        out += r.emit;
        stopped |= r.stopped;
      }
      out += matcher.Flush();
      EXPECT_TRUE(stopped);
      ASSERT_EQ(out, expected) << "split at " << a << ", " << b;
    }
  }
}

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher matcher({""});
  EXPECT_EQ(matcher.Push("abc").emit, "abc");
  EXPECT_EQ(matcher.held(), 0u);
}

}  // namespace
}  // namespace coil
