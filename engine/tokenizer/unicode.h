// The Unicode facts the tokenizer needs, over UTF-8 bytes: decoding one code point, the
// character classes of the GPT-2 split pattern, NFC normalization (ICU), and lossy UTF-8
// repair exactly as Rust's String::from_utf8_lossy does it (one U+FFFD per maximal invalid
// subpart), so that decoding matches the reference byte for byte.
#ifndef COIL_ENGINE_TOKENIZER_UNICODE_H_
#define COIL_ENGINE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil::tokenizer {

// The classes of the GPT-2 pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` as the reference (Oniguruma) evaluates it: kLetter is
// \p{L} (Lu Ll Lt Lm Lo), kNumber is \p{N} (Nd Nl No), kSpace is \s (the Unicode White_Space
// property), kOther everything else (marks, punctuation, symbols, controls, unassigned).
enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// The class of code point `cp` (any value up to 0x10FFFF).
CharClass ClassOf(char32_t cp);

// Decodes the code point starting at `text[pos]`, which must be valid UTF-8 (the caller
// validated it), and stores its byte length in `*length`.
inline char32_t DecodeUtf8(absl::string_view text, size_t pos, size_t* length) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  if (p[0] < 0x80) {
    *length = 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    *length = 2;
    return (char32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  }
  if (p[0] < 0xF0) {
    *length = 3;
    return (char32_t{p[0] & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
  }
  *length = 4;
  return (char32_t{p[0] & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) |
         (char32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3Fu);
}

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// The byte length of the valid UTF-8 sequence starting at `text[pos]`, or 0 when the
// bytes there are not one (a bad lead byte, a bad continuation, an overlong form, a
// surrogate, a value above U+10FFFF, or a sequence cut short by the end of `text`).
size_t ValidUtf8Length(absl::string_view text, size_t pos);

// OK when `text` is valid UTF-8; otherwise INVALID_ARGUMENT naming the first bad byte.
absl::Status CheckUtf8(absl::string_view text);

// True when every byte of `text` is ASCII.
bool IsAscii(absl::string_view text);

// True when `text` (valid UTF-8) is already in NFC, so normalizing would not change it.
bool IsNfc(absl::string_view text);

// The NFC form of `text` (valid UTF-8).
absl::StatusOr<std::string> ToNfc(absl::string_view text);

// Appends `bytes` to `out` with every maximal invalid subpart replaced by U+FFFD.
// With `final` false, an incomplete sequence at the very end (one that more bytes could
// still complete) is left unconsumed instead. Returns the number of bytes consumed.
size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out);

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_UNICODE_H_
