#include "engine/tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utypes.h>

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace coil::tokenizer {
namespace {

// ASCII classes by table: prose is mostly ASCII, and ICU's lookup is not free.
constexpr std::array<CharClass, 128> MakeAsciiClasses() {
  std::array<CharClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      classes[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = CharClass::kNumber;
    } else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) {
      classes[c] = CharClass::kSpace;
    } else {
      classes[c] = CharClass::kOther;
    }
  }
  return classes;
}
constexpr std::array<CharClass, 128> kAsciiClasses = MakeAsciiClasses();

// Letters and numbers that Unicode assigned after 15.0, the version Debian 12's ICU 72
// knows (which calls them unassigned), as the reference's Unicode 16.0 tables classify
// them: Unicode 15.1 (CJK Extension I) and 16.0 (Garay, Gurung Khema, Kirat Rai, Ol Onal,
// Sunuwar, Todhri, Tulu-Tigalari, Egyptian hieroglyphs extended, ...). Sorted, disjoint.
struct ClassRange {
  char32_t first;
  char32_t last;
  CharClass cls;
};
constexpr ClassRange kNewerThanIcu[] = {
    {0x1C89, 0x1C8A, CharClass::kLetter},   {0xA7CB, 0xA7CD, CharClass::kLetter},
    {0xA7DA, 0xA7DC, CharClass::kLetter},   {0x105C0, 0x105F3, CharClass::kLetter},
    {0x10D40, 0x10D49, CharClass::kNumber}, {0x10D4A, 0x10D65, CharClass::kLetter},
    {0x10D6F, 0x10D85, CharClass::kLetter}, {0x10EC2, 0x10EC4, CharClass::kLetter},
    {0x11380, 0x11389, CharClass::kLetter}, {0x1138B, 0x1138B, CharClass::kLetter},
    {0x1138E, 0x1138E, CharClass::kLetter}, {0x11390, 0x113B5, CharClass::kLetter},
    {0x113B7, 0x113B7, CharClass::kLetter}, {0x113D1, 0x113D1, CharClass::kLetter},
    {0x113D3, 0x113D3, CharClass::kLetter}, {0x116D0, 0x116E3, CharClass::kNumber},
    {0x11BC0, 0x11BE0, CharClass::kLetter}, {0x11BF0, 0x11BF9, CharClass::kNumber},
    {0x13460, 0x143FA, CharClass::kLetter}, {0x16100, 0x1611D, CharClass::kLetter},
    {0x16130, 0x16139, CharClass::kNumber}, {0x16D40, 0x16D6C, CharClass::kLetter},
    {0x16D70, 0x16D79, CharClass::kNumber}, {0x18CFF, 0x18CFF, CharClass::kLetter},
    {0x1CCF0, 0x1CCF9, CharClass::kNumber}, {0x1E5D0, 0x1E5ED, CharClass::kLetter},
    {0x1E5F0, 0x1E5F0, CharClass::kLetter}, {0x1E5F1, 0x1E5FA, CharClass::kNumber},
    {0x2EBF0, 0x2EE5D, CharClass::kLetter},
};

CharClass ClassOfUnassigned(char32_t cp) {
  for (const ClassRange& range : kNewerThanIcu) {
    if (cp < range.first) break;
    if (cp <= range.last) return range.cls;
  }
  return CharClass::kOther;
}

enum class SequenceKind { kValid, kInvalid, kIncomplete };

// Examines the UTF-8 sequence at p[0..n) (n >= 1). kValid: `*length` is its length.
// kInvalid: `*length` is the length of the maximal subpart to replace by one U+FFFD (the
// bytes that were a valid prefix, at least one). kIncomplete: all n bytes are a valid
// prefix of a longer sequence. The continuation ranges are those of Unicode's Table 3-7.
SequenceKind ScanSequence(const unsigned char* p, size_t n, size_t* length) {
  const unsigned char lead = p[0];
  if (lead < 0x80) {
    *length = 1;
    return SequenceKind::kValid;
  }
  size_t need;
  unsigned char low = 0x80, high = 0xBF;  // the range allowed for the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    *length = 1;
    return SequenceKind::kInvalid;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) {
      *length = n;
      return SequenceKind::kIncomplete;
    }
    const unsigned char lo = i == 1 ? low : 0x80;
    const unsigned char hi = i == 1 ? high : 0xBF;
    if (p[i] < lo || p[i] > hi) {
      *length = i;
      return SequenceKind::kInvalid;
    }
  }
  *length = need;
  return SequenceKind::kValid;
}

const icu::Normalizer2* NfcInstance(UErrorCode* error) {
  return icu::Normalizer2::getNFCInstance(*error);
}

}  // namespace

CharClass ClassOf(char32_t cp) {
  if (cp < 0x80) return kAsciiClasses[cp];
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::kNumber;
    case U_UNASSIGNED:
      return ClassOfUnassigned(cp);
    default:
      break;
  }
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE) ? CharClass::kSpace
                                                                          : CharClass::kOther;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t ValidUtf8Length(absl::string_view text, size_t pos) {
  size_t length = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  return ScanSequence(p, text.size() - pos, &length) == SequenceKind::kValid ? length : 0;
}

bool IsAscii(absl::string_view text) {
  const char* p = text.data();
  size_t n = text.size();
  // Eight bytes at a time: this check runs over every prompt.
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    if (word & 0x8080808080808080ull) return false;
    p += 8;
    n -= 8;
  }
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<unsigned char>(p[i]) >= 0x80) return false;
  }
  return true;
}

absl::Status CheckUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = ValidUtf8Length(text, pos);
    if (length == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: byte ", pos, " (0x",
                       absl::Hex(static_cast<unsigned char>(text[pos])),
                       ") does not start a complete UTF-8 sequence; send UTF-8 text"));
    }
    pos += length;
  }
  return absl::OkStatus();
}

bool IsNfc(absl::string_view text) {
  if (IsAscii(text)) return true;
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = NfcInstance(&error);
  if (U_FAILURE(error)) return false;
  const bool normalized = nfc->isNormalizedUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), error);
  return U_SUCCESS(error) && normalized;
}

absl::StatusOr<std::string> ToNfc(absl::string_view text) {
  if (IsAscii(text)) return std::string(text);
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = NfcInstance(&error);
  std::string result;
  if (U_SUCCESS(error)) {
    icu::StringByteSink<std::string> sink(&result, static_cast<int32_t>(text.size()));
    nfc->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                       nullptr, error);
  }
  if (U_FAILURE(error)) {
    return absl::InternalError(absl::StrCat("NFC normalization failed in ICU: ", u_errorName(error),
                                            "; check that the ICU data library is installed"));
  }
  return result;
}

size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t pos = 0;
  while (pos < n) {
    size_t start = pos;
    // Copy the run of valid sequences in one append.
    size_t length = 0;
    SequenceKind kind = SequenceKind::kValid;
    while (pos < n) {
      if (p[pos] < 0x80) {
        ++pos;
        continue;
      }
      kind = ScanSequence(p + pos, n - pos, &length);
      if (kind != SequenceKind::kValid) break;
      pos += length;
    }
    out->append(bytes.data() + start, pos - start);
    if (pos == n) break;
    if (kind == SequenceKind::kIncomplete && !final) return pos;
    out->append(kReplacement, 3);
    pos += length;
  }
  return n;
}

}  // namespace coil::tokenizer
