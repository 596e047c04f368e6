// The Unicode facts the tokenizer needs, over UTF-8 bytes: decoding one code point, the
// character properties the reference library's components test, normalization, lowercasing
// and lossy UTF-8 repair exactly as Rust's String::from_utf8_lossy does it (one U+FFFD per
// maximal invalid subpart). ICU (Debian 12: ICU 72, Unicode 15.0) supplies the data; each
// function adjusts it to the Unicode version of the reference component it stands for, since
// the reference mixes versions: its regular expressions (Oniguruma) know Unicode 16.0, Rust's
// char methods 17.0, its normalization tables 9.0 and its punctuation table 8.0.
#ifndef COIL_ENGINE_TOKENIZER_UNICODE_H_
#define COIL_ENGINE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil::tokenizer {

// General categories, in the order of ICU's UCharCategory (so converting is a cast).
enum class Category : uint8_t {
  kCn = 0,
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMe,
  kMc,
  kNd,
  kNl,
  kNo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCo,
  kCs,
  kPd,
  kPs,
  kPe,
  kPc,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kPi,
  kPf,
};
inline constexpr int kCategoryCount = 30;

// The general category of `cp` in Unicode 16.0, as the reference's regular expressions
// (Oniguruma) see it.
Category CategoryOf(char32_t cp);

// The two-letter name of `category` ("Lu").
absl::string_view CategoryName(Category category);

// The White_Space property (the same in every Unicode version since 6.3): Oniguruma's \s and
// Rust's char::is_whitespace.
bool IsWhiteSpace(char32_t cp);

// Rust's char::is_numeric (categories Nd, Nl, No in Unicode 17.0): the Digits pre-tokenizer.
bool IsNumeric(char32_t cp);

// The Punctuation pre-tokenizer's test: ASCII punctuation, or a character of categories
// Pc Pd Ps Pe Pi Pf Po in Unicode 8.0 (the reference's unicode_categories tables).
bool IsPunctuation(char32_t cp);

// Rust regex's \w (the Whitespace pre-tokenizer, added tokens' single_word): Alphabetic,
// Mark, Decimal_Number, Connector_Punctuation or Join_Control, in Unicode 16.0.
bool IsWordCharacter(char32_t cp);

// Oniguruma's \w: the same but for Join_Control, which it leaves out, and for the Latin-1
// superscript digits and fractions, which its Latin-1 table has as word characters.
bool IsRegexWordCharacter(char32_t cp);

// Appends Rust's char::to_lowercase of `cp` (Unicode 17.0; one to three code points, no
// context: a final sigma is not special).
void AppendLowercase(char32_t cp, std::string* out);

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

// The byte length of the UTF-8 sequence whose lead byte is `lead` (valid UTF-8 assumed).
inline size_t Utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The start of the code point that ends at `text[pos - 1]` (pos > 0, valid UTF-8).
inline size_t PreviousCodePoint(absl::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
  return pos;
}

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// The byte length of the valid UTF-8 sequence starting at `text[pos]`, or 0 when the
// bytes there are not one (a bad lead byte, a bad continuation, an overlong form, a
// surrogate, a value above U+10FFFF, or a sequence cut short by the end of `text`).
size_t ValidUtf8Length(absl::string_view text, size_t pos);

// OK when `text` is valid UTF-8; otherwise INVALID_ARGUMENT naming the first bad byte.
absl::Status CheckUtf8(absl::string_view text);

// Whether `bytes` are UTF-8: all valid, valid but for an unfinished sequence at the end, or
// invalid (no bytes appended can make them valid).
enum class Utf8Prefix : uint8_t { kComplete, kUnfinished, kInvalid };
Utf8Prefix ClassifyUtf8(absl::string_view bytes);

// True when `text` is valid UTF-8 (CheckUtf8 without the message).
bool IsValidUtf8(absl::string_view text);

// True when every byte of `text` is ASCII.
bool IsAscii(absl::string_view text);

// The Unicode normalization forms, with the reference's data: Unicode 9.0, so characters
// assigned later are left as they are and never combine (ICU alone would compose or reorder
// some of them).
enum class NormalForm : uint8_t { kNfc, kNfd, kNfkc, kNfkd };

// True when normalizing `text` (valid UTF-8) to `form` would not change it.
bool IsNormalized(NormalForm form, absl::string_view text);

// The `form` of `text` (valid UTF-8).
absl::StatusOr<std::string> Normalize(NormalForm form, absl::string_view text);

// NFC, the form GPT-NeoX uses.
inline bool IsNfc(absl::string_view text) { return IsNormalized(NormalForm::kNfc, text); }
inline absl::StatusOr<std::string> ToNfc(absl::string_view text) {
  return Normalize(NormalForm::kNfc, text);
}

// Appends `bytes` to `out` with every maximal invalid subpart replaced by U+FFFD.
// With `final` false, an incomplete sequence at the very end (one that more bytes could
// still complete) is left unconsumed instead. Returns the number of bytes consumed.
size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out);

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_UNICODE_H_
