// Tests of the Unicode layer: every code point's properties against the reference's own
// answers (unicode_properties.json, gpt_neox_char_classes.json), UTF-8 decoding, validation
// and lossy repair.
#include "engine/tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/regex.h"

namespace coil::tokenizer {
namespace {

// gpt_neox_char_classes.json was produced by probing the reference pre-tokenizer with
// every code point (tests/data/tokenizer/gen_vectors.mjs); code points in no run are "P".
TEST(CharClassTest, EveryCodePointMatchesTheReference) {
  std::ifstream file(COIL_TOKENIZER_TEST_DATA_DIR "/gpt_neox_char_classes.json");
  ASSERT_TRUE(file) << "missing gpt_neox_char_classes.json";
  const nlohmann::json runs = nlohmann::json::parse(file);
  std::vector<CharClass> expected(0x110000, CharClass::kOther);
  for (const auto& run : runs) {
    const std::string cls = run[2].get<std::string>();
    const CharClass value = cls == "L"   ? CharClass::kLetter
                            : cls == "N" ? CharClass::kNumber
                                         : CharClass::kSpace;
    ASSERT_TRUE(cls == "L" || cls == "N" || cls == "S") << cls;
    for (char32_t cp = run[0].get<char32_t>(); cp <= run[1].get<char32_t>(); ++cp) {
      expected[cp] = value;
    }
  }
  int mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (ClassOf(cp) != expected[cp] && ++mismatches <= 10) {
      ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(cp) << ": class "
                    << static_cast<int>(ClassOf(cp)) << ", reference "
                    << static_cast<int>(expected[cp]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// unicode_properties.json was produced by probing the reference with every code point
// (tests/data/tokenizer/gen_family_vectors.mjs).
class UnicodePropertiesTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream file(COIL_TOKENIZER_TEST_DATA_DIR "/unicode_properties.json");
    ASSERT_TRUE(file) << "missing unicode_properties.json";
    properties_ = new nlohmann::json(nlohmann::json::parse(file));
  }
  static std::vector<bool> Members(const nlohmann::json& runs) {
    std::vector<bool> members(0x110000, false);
    for (const auto& run : runs) {
      for (char32_t cp = run[0].get<char32_t>(); cp <= run[1].get<char32_t>(); ++cp)
        members[cp] = true;
    }
    return members;
  }
  static bool IsScalar(char32_t cp) { return cp < 0xD800 || cp > 0xDFFF; }
  // Checks `test` against the runs of `key`; reports mismatches as ranges.
  template <typename Test>
  static void ExpectSame(const nlohmann::json& runs, Test test, const std::string& what) {
    const std::vector<bool> expected = Members(runs);
    int mismatches = 0;
    for (char32_t cp = 0; cp < 0x110000; ++cp) {
      if (!IsScalar(cp) || test(cp) == expected[cp]) continue;
      if (++mismatches <= 10) {
        ADD_FAILURE() << what << ": U+" << std::hex << static_cast<uint32_t>(cp) << " is "
                      << (expected[cp] ? "in" : "not in") << " it for the reference";
      }
    }
    EXPECT_EQ(mismatches, 0) << what;
  }
  static nlohmann::json* properties_;
};
nlohmann::json* UnicodePropertiesTest::properties_ = nullptr;

// The general categories of the reference's regular expressions (Unicode 16.0). A mismatch
// is printed as an entry of unicode.cc's kUnicode16 table, to update it with.
TEST_F(UnicodePropertiesTest, CategoriesOfEveryCodePoint) {
  std::vector<int> expected(0x110000, -1);
  for (const auto& [name, runs] : (*properties_)["regex_categories"].items()) {
    int category = -1;
    for (int c = 0; c < kCategoryCount; ++c) {
      if (CategoryName(static_cast<Category>(c)) == name) category = c;
    }
    ASSERT_GE(category, 0) << name;
    for (const auto& run : runs) {
      for (char32_t cp = run[0].get<char32_t>(); cp <= run[1].get<char32_t>(); ++cp)
        expected[cp] = category;
    }
  }
  int mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (!IsScalar(cp)) continue;
    const int got = static_cast<int>(CategoryOf(cp));
    if (got != expected[cp] && ++mismatches <= 20) {
      ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(cp) << " is "
                    << CategoryName(static_cast<Category>(got)) << "; the reference has {0x"
                    << static_cast<uint32_t>(cp) << ", 0x" << static_cast<uint32_t>(cp)
                    << ", Category::k"
                    << (expected[cp] < 0
                            ? "?"
                            : std::string(CategoryName(static_cast<Category>(expected[cp]))))
                    << "}";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Each class through coil's regular expressions: the code points a pattern matching one
// character of the class finds in the text of all code points.
TEST_F(UnicodePropertiesTest, RegexClassesOfEveryCodePoint) {
  std::string all;
  std::vector<char32_t> at;  // the code point starting at each byte offset
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (!IsScalar(cp)) continue;
    const size_t start = all.size();
    AppendUtf8(cp, &all);
    at.resize(all.size(), 0);
    at[start] = cp;
  }
  std::vector<std::pair<std::string, const nlohmann::json*>> classes;
  for (const auto& [name, runs] : (*properties_)["regex_classes"].items()) {
    classes.emplace_back(name, &runs);
  }
  for (const auto& [name, runs] : (*properties_)["regex_categories"].items()) {
    classes.emplace_back("\\p{" + name + "}", &runs);
  }
  for (const auto& [pattern, runs] : classes) {
    const auto regex = Regex::Compile(pattern);
    ASSERT_TRUE(regex.ok()) << regex.status();
    std::vector<bool> matched(0x110000, false);
    (*regex)->ForEachMatch(all, [&](size_t start, size_t end) {
      if (end > start) matched[at[start]] = true;
    });
    ExpectSame(
        *runs, [&](char32_t cp) { return static_cast<bool>(matched[cp]); }, pattern);
  }
}

TEST_F(UnicodePropertiesTest, PreTokenizerPredicatesOfEveryCodePoint) {
  ExpectSame((*properties_)["punctuation"], IsPunctuation, "Punctuation");
  ExpectSame((*properties_)["numeric"], IsNumeric, "Digits (is_numeric)");
  ExpectSame((*properties_)["whitespace"], IsWhiteSpace, "WhitespaceSplit (is_whitespace)");
  ExpectSame((*properties_)["rust_word"], IsWordCharacter, "Whitespace (\\w)");
}

TEST_F(UnicodePropertiesTest, LowercaseOfEveryCodePoint) {
  std::vector<std::u32string> expected(0x110000);
  for (const auto& entry : (*properties_)["lowercase"]) {
    std::u32string lower;
    for (const auto& cp : entry[1]) lower.push_back(cp.get<char32_t>());
    expected[entry[0].get<char32_t>()] = lower;
  }
  int mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (!IsScalar(cp)) continue;
    std::string got;
    AppendLowercase(cp, &got);
    std::string want;
    if (expected[cp].empty()) {
      AppendUtf8(cp, &want);
    } else {
      for (const char32_t c : expected[cp]) AppendUtf8(c, &want);
    }
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << "lowercase of U+" << std::hex << static_cast<uint32_t>(cp);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// FNV-1a of each block of 4096 code points' normalized forms, each normalized alone (between
// U+E000, which never combines), computed here as gen_family_vectors.mjs computes it.
TEST_F(UnicodePropertiesTest, NormalizationOfEveryCodePoint) {
  const std::pair<const char*, NormalForm> forms[] = {{"NFC", NormalForm::kNfc},
                                                      {"NFD", NormalForm::kNfd},
                                                      {"NFKC", NormalForm::kNfkc},
                                                      {"NFKD", NormalForm::kNfkd}};
  for (const auto& [name, form] : forms) {
    const auto& hashes = (*properties_)["normalization_fnv1a_per_4096"][name];
    ASSERT_EQ(hashes.size(), 0x110u);
    for (char32_t block = 0; block < 0x110000; block += 4096) {
      std::string text;
      for (char32_t cp = block; cp < block + 4096; ++cp) {
        if (!IsScalar(cp) || cp == 0xE000) continue;
        if (!text.empty()) AppendUtf8(0xE000, &text);
        AppendUtf8(cp, &text);
      }
      const absl::StatusOr<std::string> normalized = Normalize(form, text);
      ASSERT_TRUE(normalized.ok()) << normalized.status();
      uint64_t hash = 0xcbf29ce484222325ull;
      for (const char c : *normalized) {
        hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
      }
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
      EXPECT_EQ(hex, hashes[block / 4096].get<std::string>())
          << name << " of the block at U+" << std::hex << static_cast<uint32_t>(block);
    }
  }
}

// Encoding then decoding every scalar value gives it back, with the length UTF-8 defines
// (1 byte below U+0080, 2 below U+0800, 3 below U+10000, else 4).
TEST(Utf8Test, EncodeDecodeEveryScalarValue) {
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string bytes;
    AppendUtf8(cp, &bytes);
    const size_t expected_length = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(bytes.size(), expected_length);
    ASSERT_EQ(ValidUtf8Length(bytes, 0), expected_length);
    size_t length = 0;
    ASSERT_EQ(DecodeUtf8(bytes, 0, &length), cp);
    ASSERT_EQ(length, expected_length);
  }
}

TEST(Utf8Test, RejectsInvalidSequences) {
  // Each is invalid by a rule of Unicode's Table 3-7.
  for (const std::string bad :
       {"\x80", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF0\x80\x80\xAF",
        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xE2\x82", "\xC3"}) {
    EXPECT_EQ(ValidUtf8Length(bad, 0), 0u) << testing::PrintToString(bad);
    const absl::Status status = CheckUtf8("ok " + bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("byte 3"), absl::string_view::npos) << status.message();
  }
  EXPECT_TRUE(CheckUtf8("plain ASCII, caf\xC3\xA9, \xF0\x9F\x98\x80").ok());
}

// The example of Unicode's section 3.9 (Table 3-8, "U+FFFD for each maximal subpart"):
// 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
TEST(Utf8LossyTest, ReplacesEachMaximalSubpart) {
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  std::string text;
  EXPECT_EQ(AppendUtf8Lossy(bytes, /*final=*/true, &text), bytes.size());
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(text, "a" + r + r + r + "b" + r + "c" + r + r + "d");
}

TEST(Utf8LossyTest, HoldsBackAnUnfinishedSequenceUnlessFinal) {
  const std::string smile = "\xF0\x9F\x98\x80";  // U+1F600
  for (size_t cut = 1; cut < smile.size(); ++cut) {
    std::string text;
    const std::string bytes = "ab" + smile.substr(0, cut);
    EXPECT_EQ(AppendUtf8Lossy(bytes, /*final=*/false, &text), 2u);
    EXPECT_EQ(text, "ab");
    text.clear();
    EXPECT_EQ(AppendUtf8Lossy(bytes, /*final=*/true, &text), bytes.size());
    EXPECT_EQ(text, "ab\xEF\xBF\xBD");  // one U+FFFD for the whole cut sequence
  }
}

// NFC by hand: e + U+0301 composes to U+00E9; the Angstrom sign U+212B is replaced by
// U+00C5; U+0323 (ccc 220) is ordered before U+0307 (ccc 230) and q has no precomposed form.
TEST(NfcTest, ComposesAndReorders) {
  EXPECT_EQ(*ToNfc("cafe\xCC\x81"), "caf\xC3\xA9");
  EXPECT_EQ(*ToNfc("\xE2\x84\xAB"), "\xC3\x85");
  EXPECT_EQ(*ToNfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
  EXPECT_FALSE(IsNfc("cafe\xCC\x81"));
  EXPECT_TRUE(IsNfc("caf\xC3\xA9"));
  EXPECT_TRUE(IsNfc("plain"));
}

// GPT-2's table worked out for a few bytes: printable bytes keep their code point; the
// others in order take U+0100 on: 0x00..0x20 are U+0100..U+0120 (the space is 'Ġ'), 0x7F is
// U+0121, 0x80..0xA0 are U+0122..U+0142, 0xAD is U+0143.
TEST(ByteLevelTest, AlphabetAndInverse) {
  EXPECT_EQ(ByteToCodePoint('a'), U'a');
  EXPECT_EQ(ByteToCodePoint(0x00), 0x100u);
  EXPECT_EQ(ByteToCodePoint(' '), 0x120u);
  EXPECT_EQ(ByteToCodePoint(0x7F), 0x121u);
  EXPECT_EQ(ByteToCodePoint(0xAD), 0x143u);
  EXPECT_EQ(ByteToCodePoint(0xFF), 0xFFu);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ByteLevelToBytes(BytesToByteLevel(all)), all);
  EXPECT_EQ(ByteLevelToBytes("\xC4\xA0world"), " world");
  EXPECT_EQ(ByteLevelToBytes("  "), std::nullopt);  // U+0020 is not in the alphabet
}

}  // namespace
}  // namespace coil::tokenizer
