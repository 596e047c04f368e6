// The GPT-2 split, on inputs whose pieces were worked out by hand from the pattern
// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
#include "engine/tokenizer/gpt2_split.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace coil::tokenizer {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> pieces;
  for (absl::string_view piece : SplitGpt2(text)) pieces.emplace_back(piece);
  return pieces;
}

TEST(PreTokenizerTest, WordsKeepOneLeadingSpace) {
  EXPECT_THAT(Split("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split("a1 b2"), ElementsAre("a", "1", " b", "2"));
  EXPECT_THAT(Split(""), ElementsAre());
}

TEST(PreTokenizerTest, ContractionsAreCaseSensitive) {
  EXPECT_THAT(Split("don't"), ElementsAre("don", "'t"));
  EXPECT_THAT(Split("I'LL"), ElementsAre("I", "'", "LL"));
  EXPECT_THAT(Split("we're they've I'm he'd"),
              ElementsAre("we", "'re", " they", "'ve", " I", "'m", " he", "'d"));
  // Only at the start of a piece: the symbol run takes the apostrophe first.
  EXPECT_THAT(Split("!'s"), ElementsAre("!'", "s"));
  EXPECT_THAT(Split("'sup"), ElementsAre("'s", "up"));
}

TEST(PreTokenizerTest, WhitespaceBeforeAWordLeavesItsLastSpace) {
  // "   x": \s+(?!\S) takes two spaces, then " x".
  EXPECT_THAT(Split("a   x"), ElementsAre("a", "  ", " x"));
  // At the end, the whole run is one piece.
  EXPECT_THAT(Split("a   "), ElementsAre("a", "   "));
  // "\n" before a letter: one whitespace character cannot leave one behind, so \s+ takes it.
  EXPECT_THAT(Split("a\nb"), ElementsAre("a", "\n", "b"));
  EXPECT_THAT(Split("a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Split("x\r\n\r\ny"), ElementsAre("x", "\r\n\r", "\n", "y"));
  EXPECT_THAT(Split("\t\tx"), ElementsAre("\t", "\t", "x"));
}

TEST(PreTokenizerTest, SymbolsNumbersAndUnicodeClasses) {
  EXPECT_THAT(Split("2024-01-15"), ElementsAre("2024", "-", "01", "-", "15"));
  EXPECT_THAT(Split("wow!!! ok"), ElementsAre("wow", "!!!", " ok"));
  EXPECT_THAT(Split(" ... x"), ElementsAre(" ...", " x"));
  // U+00E9 is a letter; U+0301 (a mark) is not: it starts a symbol piece.
  EXPECT_THAT(Split("caf\xC3\xA9 e\xCC\x81"), ElementsAre("caf\xC3\xA9", " e", "\xCC\x81"));
  // U+00A0 is \s but not U+0020, so it never joins a following word.
  EXPECT_THAT(Split("a\xC2\xA0"
                    "b"),
              ElementsAre("a", "\xC2\xA0", "b"));
  // U+0663 (ARABIC-INDIC DIGIT THREE) is \p{N}.
  EXPECT_THAT(Split(" \xD9\xA3\xD9\xA3x"), ElementsAre(" \xD9\xA3\xD9\xA3", "x"));
}

// An invariant on random text from a mixed alphabet: the pieces tile the input (their
// concatenation is the input) and none is empty.
TEST(PreTokenizerTest, PiecesTileTheInput) {
  const std::vector<std::string> alphabet = {"a",
                                             "Z",
                                             "7",
                                             " ",
                                             "  ",
                                             "\t",
                                             "\n",
                                             "'",
                                             "s",
                                             "ll",
                                             "!",
                                             "\xC3\xA9",
                                             "\xCC\x81",
                                             "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80",
                                             "\xC2\xA0"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int count = static_cast<int>(rng() % 20);
    for (int i = 0; i < count; ++i) text += alphabet[rng() % alphabet.size()];
    std::string joined;
    for (absl::string_view piece : SplitGpt2(text)) {
      ASSERT_FALSE(piece.empty()) << text;
      joined.append(piece.data(), piece.size());
    }
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace coil::tokenizer
