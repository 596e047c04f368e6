// Tests of the Unicode layer: the split pattern's character classes against the reference's
// own classification of every code point, UTF-8 decoding, validation and lossy repair.
#include "engine/tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_level.h"

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
