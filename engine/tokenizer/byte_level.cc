#include "engine/tokenizer/byte_level.h"

#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {
namespace {

// GPT-2's bytes_to_unicode(): bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF keep their own code
// point; the others, in increasing order, take 256, 257, ...
constexpr std::array<char32_t, 256> MakeByteToCodePoint() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}
constexpr std::array<char32_t, 256> kByteToCodePoint = MakeByteToCodePoint();

// The inverse over U+0000..U+0143 (the largest code point used is 256 + 67); -1: none.
constexpr std::array<int, 324> MakeCodePointToByte() {
  std::array<int, 324> table{};
  for (int& entry : table) entry = -1;
  for (int b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = b;
  return table;
}
constexpr std::array<int, 324> kCodePointToByte = MakeCodePointToByte();

}  // namespace

char32_t ByteToCodePoint(unsigned char byte) { return kByteToCodePoint[byte]; }

std::optional<std::string> ByteLevelToBytes(absl::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    size_t length = 0;
    const char32_t cp = DecodeUtf8(token, pos, &length);
    if (cp >= kCodePointToByte.size() || kCodePointToByte[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(kCodePointToByte[cp]));
    pos += length;
  }
  return bytes;
}

std::string BytesToByteLevel(absl::string_view bytes) {
  std::string text;
  text.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(kByteToCodePoint[static_cast<unsigned char>(c)], &text);
  return text;
}

}  // namespace coil::tokenizer
