// Dashed flag names become Abseil's underscore names; values and positional arguments are
// left alone (expected arrays written by hand).
#include "common/command_line.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace coil {
namespace {

std::vector<std::string> Rewrite(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  return DashedFlagsToUnderscores(static_cast<int>(argv.size()), argv.data());
}

TEST(CommandLineTest, NamesLoseTheirDashesValuesKeepThem) {
  EXPECT_EQ(Rewrite({"coil-run", "--max-tokens", "16", "--stop=a-b", "-top-k=3", "x-y"}),
            (std::vector<std::string>{"coil-run", "--max_tokens", "16", "--stop=a-b",
                                      "-top_k=3", "x-y"}));
}

TEST(CommandLineTest, NothingAfterDoubleDashChanges) {
  EXPECT_EQ(Rewrite({"p", "--a-b", "--", "--c-d"}),
            (std::vector<std::string>{"p", "--a_b", "--", "--c-d"}));
}

TEST(CommandLineTest, NegativeNumbersAndSingleDashStay) {
  // "-1" is a name position only by shape; it has no dash inside, so it is unchanged.
  EXPECT_EQ(Rewrite({"p", "-1", "-", "--x=-3"}), (std::vector<std::string>{"p", "-1", "-", "--x=-3"}));
}

}  // namespace
}  // namespace coil
