#include "engine/tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/utypes.h>

#include <array>
#include <cstring>
#include <iterator>
#include <memory>

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

// The categories Unicode 15.1 and 16.0 gave code points that ICU 72 (Unicode 15.0) has as
// unassigned, plus U+1171E, whose category 16.0 changed from Mn to Mc. Taken from the
// reference's own answers for every code point (tests/data/tokenizer/gen_family_vectors.mjs
// writes them; unicode_test.cc checks this table against them). Sorted, disjoint.
struct CategoryRange {
  char32_t first;
  char32_t last;
  Category category;
};
constexpr CategoryRange kUnicode16[] = {
    {0x897, 0x897, Category::kMn},     {0x1B4E, 0x1B4F, Category::kPo},
    {0x1B7F, 0x1B7F, Category::kPo},   {0x1C89, 0x1C89, Category::kLu},
    {0x1C8A, 0x1C8A, Category::kLl},   {0x2427, 0x2429, Category::kSo},
    {0x2FFC, 0x2FFF, Category::kSo},   {0x31E4, 0x31E5, Category::kSo},
    {0x31EF, 0x31EF, Category::kSo},   {0xA7CB, 0xA7CC, Category::kLu},
    {0xA7CD, 0xA7CD, Category::kLl},   {0xA7DA, 0xA7DA, Category::kLu},
    {0xA7DB, 0xA7DB, Category::kLl},   {0xA7DC, 0xA7DC, Category::kLu},
    {0x105C0, 0x105F3, Category::kLo}, {0x10D40, 0x10D49, Category::kNd},
    {0x10D4A, 0x10D4D, Category::kLo}, {0x10D4E, 0x10D4E, Category::kLm},
    {0x10D4F, 0x10D4F, Category::kLo}, {0x10D50, 0x10D65, Category::kLu},
    {0x10D69, 0x10D6D, Category::kMn}, {0x10D6E, 0x10D6E, Category::kPd},
    {0x10D6F, 0x10D6F, Category::kLm}, {0x10D70, 0x10D85, Category::kLl},
    {0x10D8E, 0x10D8F, Category::kSm}, {0x10EC2, 0x10EC4, Category::kLo},
    {0x10EFC, 0x10EFC, Category::kMn}, {0x11380, 0x11389, Category::kLo},
    {0x1138B, 0x1138B, Category::kLo}, {0x1138E, 0x1138E, Category::kLo},
    {0x11390, 0x113B5, Category::kLo}, {0x113B7, 0x113B7, Category::kLo},
    {0x113B8, 0x113BA, Category::kMc}, {0x113BB, 0x113C0, Category::kMn},
    {0x113C2, 0x113C2, Category::kMc}, {0x113C5, 0x113C5, Category::kMc},
    {0x113C7, 0x113CA, Category::kMc}, {0x113CC, 0x113CD, Category::kMc},
    {0x113CE, 0x113CE, Category::kMn}, {0x113CF, 0x113CF, Category::kMc},
    {0x113D0, 0x113D0, Category::kMn}, {0x113D1, 0x113D1, Category::kLo},
    {0x113D2, 0x113D2, Category::kMn}, {0x113D3, 0x113D3, Category::kLo},
    {0x113D4, 0x113D5, Category::kPo}, {0x113D7, 0x113D8, Category::kPo},
    {0x113E1, 0x113E2, Category::kMn}, {0x116D0, 0x116E3, Category::kNd},
    {0x1171E, 0x1171E, Category::kMc}, {0x11BC0, 0x11BE0, Category::kLo},
    {0x11BE1, 0x11BE1, Category::kPo}, {0x11BF0, 0x11BF9, Category::kNd},
    {0x11F5A, 0x11F5A, Category::kMn}, {0x13460, 0x143FA, Category::kLo},
    {0x16100, 0x1611D, Category::kLo}, {0x1611E, 0x16129, Category::kMn},
    {0x1612A, 0x1612C, Category::kMc}, {0x1612D, 0x1612F, Category::kMn},
    {0x16130, 0x16139, Category::kNd}, {0x16D40, 0x16D42, Category::kLm},
    {0x16D43, 0x16D6A, Category::kLo}, {0x16D6B, 0x16D6C, Category::kLm},
    {0x16D6D, 0x16D6F, Category::kPo}, {0x16D70, 0x16D79, Category::kNd},
    {0x18CFF, 0x18CFF, Category::kLo}, {0x1CC00, 0x1CCEF, Category::kSo},
    {0x1CCF0, 0x1CCF9, Category::kNd}, {0x1CD00, 0x1CEB3, Category::kSo},
    {0x1E5D0, 0x1E5ED, Category::kLo}, {0x1E5EE, 0x1E5EF, Category::kMn},
    {0x1E5F0, 0x1E5F0, Category::kLo}, {0x1E5F1, 0x1E5FA, Category::kNd},
    {0x1E5FF, 0x1E5FF, Category::kPo}, {0x1F8B2, 0x1F8BB, Category::kSo},
    {0x1F8C0, 0x1F8C1, Category::kSo}, {0x1FA89, 0x1FA89, Category::kSo},
    {0x1FA8F, 0x1FA8F, Category::kSo}, {0x1FABE, 0x1FABE, Category::kSo},
    {0x1FAC6, 0x1FAC6, Category::kSo}, {0x1FADC, 0x1FADC, Category::kSo},
    {0x1FADF, 0x1FADF, Category::kSo}, {0x1FAE9, 0x1FAE9, Category::kSo},
    {0x1FBCB, 0x1FBEF, Category::kSo}, {0x2EBF0, 0x2EE5D, Category::kLo},
};

// Code points whose case or numeric properties Unicode 16.0 and 17.0 added, for Rust's char
// methods (Unicode 17.0): numbers, and lowercase mappings (each upper case letter of a range
// maps to itself plus `offset`, or to `target` when it is set).
struct NumericRange {
  char32_t first;
  char32_t last;
};
constexpr NumericRange kNumericAfter16[] = {{0x11DE0, 0x11DE9}, {0x16FF4, 0x16FF6}};
struct LowercaseRange {
  char32_t first;
  char32_t last;
  char32_t offset;
  char32_t target;
};
constexpr LowercaseRange kLowercaseAfter15[] = {
    {0x1C89, 0x1C89, 1, 0},      {0xA7CB, 0xA7CB, 0, 0x0264}, {0xA7CC, 0xA7CC, 1, 0},
    {0xA7CE, 0xA7CE, 1, 0},      {0xA7D2, 0xA7D2, 1, 0},      {0xA7D4, 0xA7D4, 1, 0},
    {0xA7DA, 0xA7DA, 1, 0},      {0xA7DC, 0xA7DC, 0, 0x019B}, {0x10D50, 0x10D65, 0x20, 0},
    {0x16EA0, 0x16EB8, 0x1B, 0},
};

// The category kUnicode16 gives `cp`, or kCn.
Category CategoryAfter15(char32_t cp) {
  size_t lo = 0, hi = std::size(kUnicode16);
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kUnicode16[mid].last < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < std::size(kUnicode16) && kUnicode16[lo].first <= cp) return kUnicode16[lo].category;
  return Category::kCn;
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

// The normalizers with the reference's Unicode 9.0 data: ICU's, applied only to the code
// points Unicode 9.0 had assigned. A later code point is passed through untouched and, as
// an unknown character is for the reference, it starts a new segment, so nothing composes
// or reorders across it.
class Normalizers {
 public:
  static const Normalizers& Get() {
    static const Normalizers* const normalizers = new Normalizers();
    return *normalizers;
  }
  const icu::Normalizer2* form(NormalForm form) const {
    return filtered_[static_cast<int>(form)].get();
  }
  UErrorCode status() const { return status_; }

 private:
  Normalizers() {
    UErrorCode error = U_ZERO_ERROR;
    assigned_in_9_.applyPattern(icu::UnicodeString(u"[:age=9.0:]"), error);
    assigned_in_9_.freeze();
    const icu::Normalizer2* base[4] = {
        icu::Normalizer2::getNFCInstance(error), icu::Normalizer2::getNFDInstance(error),
        icu::Normalizer2::getNFKCInstance(error), icu::Normalizer2::getNFKDInstance(error)};
    status_ = error;
    if (U_FAILURE(error)) return;
    for (int i = 0; i < 4; ++i) {
      filtered_[i] = std::make_unique<icu::FilteredNormalizer2>(*base[i], assigned_in_9_);
    }
  }
  icu::UnicodeSet assigned_in_9_;
  std::unique_ptr<icu::FilteredNormalizer2> filtered_[4];
  UErrorCode status_ = U_ZERO_ERROR;
};

// Punctuation as Unicode 8.0 had it: ICU's P categories restricted to code points assigned by
// 8.0, plus the two that 8.0 called punctuation and later versions moved (U+166D to So in
// 12.0, U+111C9 to Mn in 13.0).
class Punctuation8 {
 public:
  static const icu::UnicodeSet& Get() {
    static const icu::UnicodeSet* const set = [] {
      UErrorCode error = U_ZERO_ERROR;
      auto* result = new icu::UnicodeSet(icu::UnicodeString(u"[[:P:]&[:age=8.0:]]"), error);
      result->add(0x166D).add(0x111C9).freeze();
      return result;
    }();
    return *set;
  }
};

}  // namespace

Category CategoryOf(char32_t cp) {
  const auto category = static_cast<Category>(u_charType(static_cast<UChar32>(cp)));
  if (category == Category::kCn || cp == 0x1171E) {
    const Category newer = CategoryAfter15(cp);
    if (newer != Category::kCn) return newer;
  }
  return category;
}

absl::string_view CategoryName(Category category) {
  static constexpr const char* kNames[kCategoryCount] = {
      "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Me", "Mc", "Nd", "Nl", "No", "Zs", "Zl", "Zp",
      "Cc", "Cf", "Co", "Cs", "Pd", "Ps", "Pe", "Pc", "Po", "Sm", "Sc", "Sk", "So", "Pi", "Pf"};
  return kNames[static_cast<int>(category)];
}

bool IsWhiteSpace(char32_t cp) {
  if (cp < 0x80) return kAsciiClasses[cp] == CharClass::kSpace;
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

bool IsNumeric(char32_t cp) {
  switch (CategoryOf(cp)) {
    case Category::kNd:
    case Category::kNl:
    case Category::kNo:
      return true;
    default:
      break;
  }
  for (const NumericRange& range : kNumericAfter16) {
    if (cp >= range.first && cp <= range.last) return true;
  }
  return false;
}

bool IsPunctuation(char32_t cp) {
  if (cp < 0x80) return cp > 0x20 && cp < 0x7F && kAsciiClasses[cp] == CharClass::kOther;
  return Punctuation8::Get().contains(static_cast<UChar32>(cp));
}

bool IsWordCharacter(char32_t cp) {
  if (cp < 0x80) {
    return kAsciiClasses[cp] == CharClass::kLetter || kAsciiClasses[cp] == CharClass::kNumber ||
           cp == '_';
  }
  const UChar32 c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  switch (CategoryOf(cp)) {
    case Category::kMn:
    case Category::kMc:
    case Category::kMe:
    case Category::kNd:
    case Category::kPc:
      return true;
    case Category::kLu:
    case Category::kLl:
    case Category::kLt:
    case Category::kLm:
    case Category::kLo:
    case Category::kNl:
      // Letters ICU 72 does not know yet are Alphabetic in Unicode 16.0.
      return u_charType(c) == U_UNASSIGNED;
    default:
      return false;
  }
}

bool IsRegexWordCharacter(char32_t cp) {
  switch (cp) {
    case 0xB2:
    case 0xB3:
    case 0xB9:
    case 0xBC:
    case 0xBD:
    case 0xBE:
      return true;
    case 0x200C:
    case 0x200D:
      return false;
    default:
      return IsWordCharacter(cp);
  }
}

void AppendLowercase(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    return;
  }
  for (const LowercaseRange& range : kLowercaseAfter15) {
    if (cp >= range.first && cp <= range.last) {
      AppendUtf8(range.target != 0 ? range.target : cp + range.offset, out);
      return;
    }
  }
  // The full lowercase mapping of the character alone (no neighbours, so no final-sigma
  // rule): what char::to_lowercase gives.
  UChar source[2];
  int32_t source_length = 0;
  U16_APPEND_UNSAFE(source, source_length, static_cast<UChar32>(cp));
  UChar lower[8];
  UErrorCode error = U_ZERO_ERROR;
  const int32_t length = u_strToLower(lower, 8, source, source_length, "", &error);
  if (U_FAILURE(error)) {
    AppendUtf8(cp, out);
    return;
  }
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U16_NEXT(lower, i, length, c);
    AppendUtf8(static_cast<char32_t>(c), out);
  }
}

CharClass ClassOf(char32_t cp) {
  if (cp < 0x80) return kAsciiClasses[cp];
  switch (CategoryOf(cp)) {
    case Category::kLu:
    case Category::kLl:
    case Category::kLt:
    case Category::kLm:
    case Category::kLo:
      return CharClass::kLetter;
    case Category::kNd:
    case Category::kNl:
    case Category::kNo:
      return CharClass::kNumber;
    default:
      break;
  }
  return IsWhiteSpace(cp) ? CharClass::kSpace : CharClass::kOther;
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

Utf8Prefix ClassifyUtf8(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t pos = 0;
  while (pos < n) {
    if (p[pos] < 0x80) {
      ++pos;
      continue;
    }
    size_t length = 0;
    switch (ScanSequence(p + pos, n - pos, &length)) {
      case SequenceKind::kValid:
        pos += length;
        break;
      case SequenceKind::kIncomplete:
        return Utf8Prefix::kUnfinished;
      case SequenceKind::kInvalid:
        return Utf8Prefix::kInvalid;
    }
  }
  return Utf8Prefix::kComplete;
}

bool IsValidUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = ValidUtf8Length(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

bool IsNormalized(NormalForm form, absl::string_view text) {
  if (IsAscii(text)) return true;
  const Normalizers& normalizers = Normalizers::Get();
  if (U_FAILURE(normalizers.status())) return false;
  UErrorCode error = U_ZERO_ERROR;
  const bool normalized = normalizers.form(form)->isNormalizedUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), error);
  return U_SUCCESS(error) && normalized;
}

absl::StatusOr<std::string> Normalize(NormalForm form, absl::string_view text) {
  if (IsAscii(text)) return std::string(text);
  const Normalizers& normalizers = Normalizers::Get();
  UErrorCode error = normalizers.status();
  std::string result;
  if (U_SUCCESS(error)) {
    icu::StringByteSink<std::string> sink(&result, static_cast<int32_t>(text.size()));
    normalizers.form(form)->normalizeUTF8(
        0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, error);
  }
  if (U_FAILURE(error)) {
    return absl::InternalError(
        absl::StrCat("Unicode normalization failed in ICU: ", u_errorName(error),
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
