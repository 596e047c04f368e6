// coil's regular expressions: constructs on inputs whose matches were worked out by hand
// from Oniguruma's rules, the GPT-2 pattern against the hand-written scanner of
// gpt2_split.h (a second implementation) on random text, refusals, and every pattern of
// tests/data/tokenizer/regex.json against the matches the reference library reported for it
// (gen_family_vectors.mjs).
#include "engine/tokenizer/regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/gpt2_split.h"

namespace coil::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Matches = std::vector<std::pair<size_t, size_t>>;

std::unique_ptr<Regex> Compile(const std::string& pattern) {
  auto regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  return regex.ok() ? std::move(*regex) : nullptr;
}

Matches AllMatches(const Regex& regex, const std::string& text) {
  Matches matches;
  regex.ForEachMatch(text, [&](size_t start, size_t end) { matches.emplace_back(start, end); });
  return matches;
}

std::vector<std::string> Pieces(const std::string& pattern, const std::string& text) {
  std::vector<std::string> pieces;
  const auto regex = Compile(pattern);
  if (regex == nullptr) return pieces;
  for (const auto& [start, end] : AllMatches(*regex, text)) {
    pieces.push_back(text.substr(start, end - start));
  }
  return pieces;
}

constexpr char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TEST(RegexTest, AlternativesInOrderGreedyByDefault) {
  // At each position the first alternative that matches wins, not the longest.
  EXPECT_THAT(Pieces("a|ab", "ab"), ElementsAre("a"));
  EXPECT_THAT(Pieces("ab|a", "ab"), ElementsAre("ab"));
  EXPECT_THAT(Pieces("a+", "aaa"), ElementsAre("aaa"));
  EXPECT_THAT(Pieces("a+?", "aaa"), ElementsAre("a", "a", "a"));
  EXPECT_THAT(Pieces("a{2}", "aaaaa"), ElementsAre("aa", "aa"));
  EXPECT_THAT(Pieces("a{1,2}", "aaaaa"), ElementsAre("aa", "aa", "a"));
  EXPECT_THAT(Pieces("a{2,}", "aaaaa a"), ElementsAre("aaaaa"));
  EXPECT_THAT(Pieces("(?:ab)+", "ababab"), ElementsAre("ababab"));
  EXPECT_THAT(Pieces("(?:ab){1,2}?c", "ababc"), ElementsAre("ababc"));
  // Ruby syntax reads a brace that is no interval as a literal.
  EXPECT_THAT(Pieces("x{y", "x{y"), ElementsAre("x{y"));
}

TEST(RegexTest, BacktracksIntoRuns) {
  // \s*[\r\n]+ must give the newline back to [\r\n]+.
  EXPECT_THAT(Pieces(R"(\s*[\r\n]+)", "a \n\n b"), ElementsAre(" \n\n"));
  // \s+(?!\S): the run stops one short of a non-space.
  EXPECT_THAT(Pieces(R"(\s+(?!\S)|\s+)", "a   b"), ElementsAre("  ", " "));
  EXPECT_THAT(Pieces(R"(\s+(?!\S))", "x   "), ElementsAre("   "));
  EXPECT_THAT(Pieces(R"(a(?=b))", "ab ac"), ElementsAre("a"));
}

TEST(RegexTest, PossessiveAndAtomicDoNotGiveBack) {
  EXPECT_THAT(Pieces("a*+a", "aaa"), ElementsAre());
  EXPECT_THAT(Pieces("(?>a*)a", "aaa"), ElementsAre());
  EXPECT_THAT(Pieces("a*a", "aaa"), ElementsAre("aaa"));
}

TEST(RegexTest, UnicodeClasses) {
  // \p{L} takes letters of any script, \p{N} any number, \s the White_Space property.
  EXPECT_THAT(Pieces(R"(\p{L}+)", "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 42"),
              ElementsAre("h\xC3\xA9llo", "\xE4\xB8\xAD\xE6\x96\x87"));
  EXPECT_THAT(Pieces(R"(\p{N}+)", "x\xD9\xA3\xD9\xA4 \xC2\xBD"),
              ElementsAre("\xD9\xA3\xD9\xA4", "\xC2\xBD"));
  EXPECT_THAT(Pieces(R"(\s+)",
                     "a\xC2\xA0\xE3\x80\x80"
                     "b\x0B"
                     "c"),
              ElementsAre("\xC2\xA0\xE3\x80\x80", "\x0B"));
  EXPECT_THAT(Pieces(R"([^\r\n\p{L}\p{N}]?\p{L}+)", "-ab\ncd"), ElementsAre("-ab", "cd"));
  EXPECT_THAT(Pieces(R"(\p{Lu}\p{Ll}+)", "Hello World"), ElementsAre("Hello", "World"));
  EXPECT_THAT(Pieces(R"(\h+)", "0x1fG"), ElementsAre("0", "1f"));
  EXPECT_THAT(Pieces(".", "a\nb"), ElementsAre("a", "b"));
  EXPECT_THAT(Pieces("(?m:.)", "a\nb"), ElementsAre("a", "\n", "b"));
  EXPECT_THAT(Pieces(R"([a-c\d]+)", "abcd123"), ElementsAre("abc", "123"));
  EXPECT_THAT(Pieces(R"(\x{1F600}|\u00e9)", "\xC3\xA9\xF0\x9F\x98\x80"),
              ElementsAre("\xC3\xA9", "\xF0\x9F\x98\x80"));
}

TEST(RegexTest, CaseInsensitiveUsesSimpleCaseFolding) {
  // U+017F (long s) folds to s and U+212A (Kelvin) to k, so (?i) matches them too.
  EXPECT_THAT(Pieces("(?i:'s)", "'s 'S '\xC5\xBF"), ElementsAre("'s", "'S", "'\xC5\xBF"));
  EXPECT_THAT(Pieces("(?i)k", "kK\xE2\x84\xAA"), ElementsAre("k", "K", "\xE2\x84\xAA"));
  EXPECT_THAT(Pieces("(?i)[a-c]+", "AbC"), ElementsAre("AbC"));
  EXPECT_THAT(Pieces("a(?i)b", "aB AB"), ElementsAre("aB"));
}

TEST(RegexTest, Anchors) {
  // Ruby syntax: ^ and $ are line anchors; \A and \z the text's ends.
  EXPECT_THAT(Pieces("^a", "a\na"), ElementsAre("a", "a"));
  EXPECT_THAT(Pieces("a$", "a\na"), ElementsAre("a", "a"));
  EXPECT_THAT(Pieces(R"(\Aa)", "a\na"), ElementsAre("a"));
  EXPECT_THAT(Pieces(R"(a\z)", "a\na"), ElementsAre("a"));
  EXPECT_THAT(Pieces(R"(\bx)", "x ax x"), ElementsAre("x", "x"));
}

// Empty matches are reported, except one right where the previous match ended.
TEST(RegexTest, EmptyMatches) {
  const auto regex = Compile("a*");
  EXPECT_EQ(AllMatches(*regex, "baa"), (Matches{{0, 0}, {1, 3}}));
  EXPECT_EQ(AllMatches(*regex, ""), (Matches{{0, 0}}));
  EXPECT_EQ(AllMatches(*Compile("x*"), "ab"), (Matches{{0, 0}, {1, 1}, {2, 2}}));
}

TEST(RegexTest, RefusesWhatItDoesNotImplement) {
  for (const auto& [pattern, named] : std::vector<std::pair<std::string, std::string>>{
           {R"((a)\1)", "backreference"},
           {R"((?<=a)b)", "lookbehind"},
           {R"(\p{Han})", "\\p{Han}"},
           {R"([[:alpha:]])", "POSIX bracket"},
           {R"([a-z&&[^aeiou]])", "intersection"},
           {"(?i)stra\xC3\x9F"
            "e",
            "case folding is several characters"},
           {"(?i:ss)", "spells the case folding"},
           {R"((?i)\p{Lu})", "case-insensitive"},
           {"(?x)a b", "option 'x'"},
           {"(?:a*)*", "can match empty"},
       }) {
    const auto regex = Regex::Compile(pattern);
    EXPECT_EQ(regex.status().code(), absl::StatusCode::kUnimplemented) << pattern;
    EXPECT_THAT(std::string(regex.status().message()), HasSubstr(named)) << pattern;
  }
  for (const std::string malformed : {"(a", "a)", "[a", "*a", "a{2,1}", "[z-a]", "\\", "[]"}) {
    const auto regex = Regex::Compile(malformed);
    EXPECT_EQ(regex.status().code(), absl::StatusCode::kInvalidArgument) << malformed;
    EXPECT_THAT(std::string(regex.status().message()), HasSubstr("offset")) << malformed;
  }
}

// Repetitions stacked on repetitions ("0+++...", a fuzzer's find: each level emits its
// body twice, and asked for its body's first set at every level, a set of 65,536 tests) and
// unrolled repetitions of an empty group (which emit nothing, so the program never grows
// to its limit) compile in moments: the first sets are worked out once a node, and the
// code generation is bounded. Either compiles or is refused as too large, by name.
TEST(RegexTest, StackedRepetitionsCompileInMoments) {
  const std::string stacked = "0" + std::string(60, '+') + "!" + std::string(60, '+');
  std::string empty_unrolled = "(?:)";
  for (int i = 0; i < 12; ++i) empty_unrolled += "{9}";
  std::string nested_classes = "\\p{L}";
  for (int i = 0; i < 40; ++i) nested_classes = "(?:" + nested_classes + "|[a-z])+";
  for (const std::string& pattern : {stacked, empty_unrolled, nested_classes}) {
    const auto start = std::chrono::steady_clock::now();
    const auto regex = Regex::Compile(pattern);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 2.0) << pattern;
    if (!regex.ok()) {
      EXPECT_EQ(regex.status().code(), absl::StatusCode::kUnimplemented) << regex.status();
      EXPECT_THAT(std::string(regex.status().message()), HasSubstr("a pattern this large"));
    }
  }
  // A pattern inside the limits still matches as before.
  const auto a = Compile("(?:a+)+b");
  ASSERT_NE(a, nullptr);
  EXPECT_THAT(AllMatches(*a, "xaab aab"), ElementsAre(std::make_pair(1, 4), std::make_pair(5, 8)));
}

// The GPT-2 pattern through the engine gives the hand-written scanner's pieces on random
// text made of the joints that matter (spaces before marks and letters, apostrophes, ...).
TEST(RegexTest, Gpt2PatternEqualsTheHandWrittenScanner) {
  const auto regex = Compile(kGpt2);
  const std::vector<std::string> fragments = {"the",
                                              "The",
                                              "'s",
                                              "'t",
                                              "'LL",
                                              "'re",
                                              "'",
                                              " ",
                                              "  ",
                                              "\t",
                                              "\n",
                                              "\r\n",
                                              "42",
                                              "\xD9\xA3",
                                              "!?",
                                              "...",
                                              "\xC3\xA9",
                                              "e\xCC\x81",
                                              "\xCC\x81",
                                              "\xE4\xB8\xAD",
                                              "\xF0\x9F\x98\x80",
                                              "\xC2\xA0",
                                              "\xE3\x80\x80",
                                              "\x0B",
                                              "x",
                                              "_",
                                              "\xE2\x84\xAA",
                                              "\xC5\xBF"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int count = static_cast<int>(rng() % 16);
    for (int i = 0; i < count; ++i) text += fragments[rng() % fragments.size()];
    std::vector<std::string> expected;
    for (absl::string_view piece : SplitGpt2(text)) expected.emplace_back(piece);
    std::vector<std::string> got;
    for (const auto& [start, end] : AllMatches(*regex, text))
      got.push_back(text.substr(start, end - start));
    ASSERT_EQ(got, expected) << testing::PrintToString(text);
  }
}

// Worked by hand: "12345" is "123" "45" (\p{N}{1,3}); before "cats" the space joins the
// letters ([^\r\n\p{L}\p{N}]?\p{L}+); "!!" takes the newlines after it; of "  ok" the last
// space joins the word and the first is left alone by \s+(?!\S).
TEST(RegexTest, Llama3PatternOnHandWorkedText) {
  EXPECT_THAT(Pieces(kLlama3, "I'm 12345 cats!!\n\n  ok"),
              ElementsAre("I", "'m", " ", "123", "45", " cats", "!!\n\n", " ", " ok"));
  EXPECT_THAT(Pieces(kLlama3, "x\r\n\r\ny"), ElementsAre("x", "\r\n\r\n", "y"));
  EXPECT_THAT(Pieces(kLlama3, "HE'LL"), ElementsAre("HE", "'LL"));
}

// Every pattern of regex.json against the matches the reference reported (its Split keeping
// only the matches, so empty matches are not in the file).
TEST(RegexTest, MatchesLikeTheReference) {
  std::ifstream file(COIL_TOKENIZER_TEST_DATA_DIR "/regex.json");
  ASSERT_TRUE(file) << "missing regex.json";
  const nlohmann::json data = nlohmann::json::parse(file);
  const auto texts = data["texts"].get<std::vector<std::string>>();
  ASSERT_GE(data["patterns"].size(), 25u);
  for (const auto& entry : data["patterns"]) {
    const std::string pattern = entry["pattern"].get<std::string>();
    const auto regex = Compile(pattern);
    ASSERT_NE(regex, nullptr) << pattern;
    for (size_t i = 0; i < texts.size(); ++i) {
      Matches got;
      for (const auto& match : AllMatches(*regex, texts[i])) {
        if (match.second > match.first) got.push_back(match);
      }
      Matches expected;
      for (const auto& match : entry["matches"][i]) {
        expected.emplace_back(match[0].get<size_t>(), match[1].get<size_t>());
      }
      ASSERT_EQ(got, expected) << pattern << " on " << nlohmann::json(texts[i]).dump();
    }
  }
}

}  // namespace
}  // namespace coil::tokenizer
