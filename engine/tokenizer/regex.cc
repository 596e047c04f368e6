#include "engine/tokenizer/regex.h"

#include <unicode/uniset.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {
namespace {

constexpr uint32_t kUnlimited = std::numeric_limits<uint32_t>::max();
// Bounds a pattern's program: counted repetitions of groups are unrolled.
constexpr size_t kMaxInstructions = 1 << 16;
// Bounds the nodes code generation visits, which unrolled repetitions of constructs that
// emit no instruction (an empty group, "(?:){9}{9}{9}...") multiply without growing the
// program.
constexpr size_t kMaxEmittedNodes = 1 << 20;

uint32_t CategoryBit(Category category) { return 1u << static_cast<int>(category); }

constexpr uint32_t kLetterMask = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5);
constexpr uint32_t kCasedLetterMask = (1u << 1) | (1u << 2) | (1u << 3);

// The general-category names Oniguruma accepts after \p, short and long, compared after
// dropping case, spaces, hyphens and underscores as Oniguruma does.
struct CategoryAlias {
  const char* name;
  uint32_t mask;
};
uint32_t Mask(std::initializer_list<Category> categories) {
  uint32_t mask = 0;
  for (const Category category : categories) mask |= CategoryBit(category);
  return mask;
}
const std::vector<CategoryAlias>& CategoryAliases() {
  using C = Category;
  static const std::vector<CategoryAlias>* const names = new std::vector<CategoryAlias>{
      {"l", kLetterMask},
      {"letter", kLetterMask},
      {"lc", kCasedLetterMask},
      {"l&", kCasedLetterMask},
      {"casedletter", kCasedLetterMask},
      {"lu", Mask({C::kLu})},
      {"uppercaseletter", Mask({C::kLu})},
      {"ll", Mask({C::kLl})},
      {"lowercaseletter", Mask({C::kLl})},
      {"lt", Mask({C::kLt})},
      {"titlecaseletter", Mask({C::kLt})},
      {"lm", Mask({C::kLm})},
      {"modifierletter", Mask({C::kLm})},
      {"lo", Mask({C::kLo})},
      {"otherletter", Mask({C::kLo})},
      {"m", Mask({C::kMn, C::kMc, C::kMe})},
      {"mark", Mask({C::kMn, C::kMc, C::kMe})},
      {"combiningmark", Mask({C::kMn, C::kMc, C::kMe})},
      {"mn", Mask({C::kMn})},
      {"nonspacingmark", Mask({C::kMn})},
      {"mc", Mask({C::kMc})},
      {"spacingmark", Mask({C::kMc})},
      {"me", Mask({C::kMe})},
      {"enclosingmark", Mask({C::kMe})},
      {"n", Mask({C::kNd, C::kNl, C::kNo})},
      {"number", Mask({C::kNd, C::kNl, C::kNo})},
      {"nd", Mask({C::kNd})},
      {"decimalnumber", Mask({C::kNd})},
      {"digit", Mask({C::kNd})},
      {"nl", Mask({C::kNl})},
      {"letternumber", Mask({C::kNl})},
      {"no", Mask({C::kNo})},
      {"othernumber", Mask({C::kNo})},
      {"p", Mask({C::kPc, C::kPd, C::kPs, C::kPe, C::kPi, C::kPf, C::kPo})},
      {"punctuation", Mask({C::kPc, C::kPd, C::kPs, C::kPe, C::kPi, C::kPf, C::kPo})},
      {"punct", Mask({C::kPc, C::kPd, C::kPs, C::kPe, C::kPi, C::kPf, C::kPo})},
      {"pc", Mask({C::kPc})},
      {"connectorpunctuation", Mask({C::kPc})},
      {"pd", Mask({C::kPd})},
      {"dashpunctuation", Mask({C::kPd})},
      {"ps", Mask({C::kPs})},
      {"openpunctuation", Mask({C::kPs})},
      {"pe", Mask({C::kPe})},
      {"closepunctuation", Mask({C::kPe})},
      {"pi", Mask({C::kPi})},
      {"initialpunctuation", Mask({C::kPi})},
      {"pf", Mask({C::kPf})},
      {"finalpunctuation", Mask({C::kPf})},
      {"po", Mask({C::kPo})},
      {"otherpunctuation", Mask({C::kPo})},
      {"s", Mask({C::kSm, C::kSc, C::kSk, C::kSo})},
      {"symbol", Mask({C::kSm, C::kSc, C::kSk, C::kSo})},
      {"sm", Mask({C::kSm})},
      {"mathsymbol", Mask({C::kSm})},
      {"sc", Mask({C::kSc})},
      {"currencysymbol", Mask({C::kSc})},
      {"sk", Mask({C::kSk})},
      {"modifiersymbol", Mask({C::kSk})},
      {"so", Mask({C::kSo})},
      {"othersymbol", Mask({C::kSo})},
      {"z", Mask({C::kZs, C::kZl, C::kZp})},
      {"separator", Mask({C::kZs, C::kZl, C::kZp})},
      {"zs", Mask({C::kZs})},
      {"spaceseparator", Mask({C::kZs})},
      {"zl", Mask({C::kZl})},
      {"lineseparator", Mask({C::kZl})},
      {"zp", Mask({C::kZp})},
      {"paragraphseparator", Mask({C::kZp})},
      {"c", Mask({C::kCc, C::kCf, C::kCs, C::kCo, C::kCn})},
      {"other", Mask({C::kCc, C::kCf, C::kCs, C::kCo, C::kCn})},
      {"cc", Mask({C::kCc})},
      {"control", Mask({C::kCc})},
      {"cntrl", Mask({C::kCc})},
      {"cf", Mask({C::kCf})},
      {"format", Mask({C::kCf})},
      {"cs", Mask({C::kCs})},
      {"surrogate", Mask({C::kCs})},
      {"co", Mask({C::kCo})},
      {"privateuse", Mask({C::kCo})},
      {"cn", Mask({C::kCn})},
      {"unassigned", Mask({C::kCn})},
  };
  return *names;
}

using Item = CodePointSet::Item;

Item RangeItem(char32_t first, char32_t last) {
  Item item;
  item.kind = Item::Kind::kRange;
  item.first = first;
  item.last = last;
  return item;
}

Item KindItem(Item::Kind kind, bool negated) {
  Item item;
  item.kind = kind;
  item.negated = negated;
  return item;
}

Item CategoriesItem(uint32_t mask, bool negated) {
  Item item;
  item.kind = Item::Kind::kCategories;
  item.categories = mask;
  item.negated = negated;
  return item;
}

// The characters whose full case folding is more than one code point ("ß" -> "ss"), as
// their folded strings, for refusing case-insensitive literals Oniguruma would match
// across several characters.
const std::vector<std::u32string>& MultiCharacterFolds() {
  static const std::vector<std::u32string>* const folds = [] {
    auto* result = new std::vector<std::u32string>();
    for (UChar32 cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      UChar source[2];
      int32_t length = 0;
      U16_APPEND_UNSAFE(source, length, cp);
      UChar folded[8];
      UErrorCode error = U_ZERO_ERROR;
      const int32_t folded_length =
          u_strFoldCase(folded, 8, source, length, U_FOLD_CASE_DEFAULT, &error);
      if (U_FAILURE(error)) continue;
      std::u32string code_points;
      for (int32_t i = 0; i < folded_length;) {
        UChar32 c;
        U16_NEXT(folded, i, folded_length, c);
        code_points.push_back(static_cast<char32_t>(c));
      }
      if (code_points.size() > 1) result->push_back(std::move(code_points));
    }
    return result;
  }();
  return *folds;
}

// The simple case folding of `cp`.
char32_t FoldCase(char32_t cp) {
  return static_cast<char32_t>(u_foldCase(static_cast<UChar32>(cp), U_FOLD_CASE_DEFAULT));
}

}  // namespace

// ---- CodePointSet ----

bool CodePointSet::ItemContains(const Item& item, char32_t cp) {
  bool in = false;
  switch (item.kind) {
    case Item::Kind::kRange:
      in = cp >= item.first && cp <= item.last;
      break;
    case Item::Kind::kCategories:
      in = (item.categories >> static_cast<int>(CategoryOf(cp))) & 1;
      break;
    case Item::Kind::kWhiteSpace:
      in = IsWhiteSpace(cp);
      break;
    case Item::Kind::kWord:
      in = IsRegexWordCharacter(cp);
      break;
    case Item::Kind::kAny:
      in = true;
      break;
  }
  return in != item.negated;
}

CodePointSet::CodePointSet(std::vector<Item> items, bool negated)
    : items_(std::move(items)), negated_(negated), bmp_(1024, 0) {
  for (char32_t cp = 0; cp < 0x10000; ++cp) {
    if (ContainsAbove(cp)) bmp_[cp >> 6] |= uint64_t{1} << (cp & 63);
  }
}

CodePointSet CodePointSet::FromBitmap(std::vector<uint64_t> bmp, bool above) {
  CodePointSet set;
  set.bmp_ = std::move(bmp);
  if (above) set.items_.push_back(KindItem(Item::Kind::kAny, false));
  return set;
}

bool CodePointSet::ContainsAbove(char32_t cp) const {
  bool in = false;
  for (const Item& item : items_) {
    if (ItemContains(item, cp)) {
      in = true;
      break;
    }
  }
  return in != negated_;
}

// ---- the parser and compiler ----

class RegexCompiler {
 public:
  explicit RegexCompiler(absl::string_view pattern) : pattern_(pattern) {}

  absl::StatusOr<std::unique_ptr<Regex>> Compile() {
    if (!IsValidUtf8(pattern_)) return Invalid(0, "the pattern is not valid UTF-8");
    Flags flags;
    auto root = ParseAlternation(flags);
    if (!root.ok()) return root.status();
    if (pos_ < pattern_.size()) {
      return Invalid(pos_, "unbalanced ')'");
    }
    regex_ = std::unique_ptr<Regex>(new Regex());
    regex_->pattern_ = std::string(pattern_);
    for (const SetSpec& spec : sets_) regex_->sets_.emplace_back(spec.items, spec.negated);
    const absl::Status emitted = EmitProgram(**root);
    if (!emitted.ok()) return emitted;
    regex_->first_set_ = FirstSetOf(**root);
    return std::move(regex_);
  }

 private:
  struct Flags {
    bool ignore_case = false;
    bool dot_all = false;  // Ruby's (?m): '.' also matches a newline
  };

  struct Node {
    enum class Kind { kEmpty, kSet, kConcat, kAlternate, kRepeat, kAssert, kLook, kAtomic };
    Kind kind = Kind::kEmpty;
    int32_t set = -1;
    char32_t literal = 0;      // kSet from a literal character (0: not one)
    bool ignore_case = false;  // kSet from a literal character under (?i)
    std::vector<std::unique_ptr<Node>> children;
    uint32_t min = 0;
    uint32_t max = 0;
    bool greedy = true;
    bool possessive = false;
    Regex::Assertion assertion = Regex::Assertion::kTextStart;
    bool negate = false;
    size_t offset = 0;  // where the construct starts in the pattern
  };
  using NodePtr = std::unique_ptr<Node>;

  struct SetSpec {
    std::vector<Item> items;
    bool negated = false;
  };

  // What a node can start with: a bitmap over the BMP, whether a code point above it can
  // come first, and whether the node can match without consuming anything.
  struct First {
    std::vector<uint64_t> bmp = std::vector<uint64_t>(1024, 0);
    bool above = false;
    bool nullable = false;
  };

  absl::Status Invalid(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regular expression \"", pattern_, "\": ", what, " at offset ", at));
  }
  absl::Status Unsupported(size_t at, absl::string_view what) const {
    return absl::UnimplementedError(
        absl::StrCat("regular expression \"", pattern_, "\": ", what, " (at offset ", at,
                     ") is not implemented by coil's regular expressions"));
  }

  bool AtEnd() const { return pos_ >= pattern_.size(); }
  char Peek() const { return pattern_[pos_]; }
  bool LookingAt(absl::string_view s) const {
    return pattern_.substr(pos_).substr(0, s.size()) == s;
  }
  char32_t NextCodePoint() {
    size_t length = 0;
    const char32_t cp = DecodeUtf8(pattern_, pos_, &length);
    pos_ += length;
    return cp;
  }

  NodePtr MakeNode(Node::Kind kind) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->offset = pos_;
    return node;
  }

  int32_t AddSet(std::vector<Item> items, bool negated) {
    sets_.push_back(SetSpec{std::move(items), negated});
    return static_cast<int32_t>(sets_.size()) - 1;
  }

  // ---- parsing ----

  absl::StatusOr<NodePtr> ParseAlternation(Flags& flags) {
    std::vector<NodePtr> branches;
    const size_t start = pos_;
    for (;;) {
      auto branch = ParseConcat(flags);
      if (!branch.ok()) return branch.status();
      branches.push_back(*std::move(branch));
      if (!AtEnd() && Peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (branches.size() == 1) return std::move(branches[0]);
    auto node = MakeNode(Node::Kind::kAlternate);
    node->offset = start;
    node->children = std::move(branches);
    return node;
  }

  absl::StatusOr<NodePtr> ParseConcat(Flags& flags) {
    auto node = MakeNode(Node::Kind::kConcat);
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      // (?i) without a colon changes the flags for the rest of the enclosing group, the
      // alternatives after it included: Oniguruma parses the rest as a group.
      if (LookingAt("(?") && IsFlagGroupWithoutColon()) {
        const size_t at = pos_;
        Flags inner = flags;
        COIL_RETURN_IF_ERROR(ParseFlags(&inner));
        ++pos_;  // ')'
        auto rest = ParseAlternation(inner);
        if (!rest.ok()) return rest.status();
        (*rest)->offset = at;
        node->children.push_back(*std::move(rest));
        break;
      }
      auto atom = ParseQuantified(flags);
      if (!atom.ok()) return atom.status();
      node->children.push_back(*std::move(atom));
    }
    COIL_RETURN_IF_ERROR(CheckCaseInsensitiveLiterals(*node));
    if (node->children.size() == 1) return std::move(node->children[0]);
    return node;
  }

  bool IsFlagGroupWithoutColon() const {
    size_t p = pos_ + 2;
    while (p < pattern_.size() && (absl::ascii_isalpha(pattern_[p]) || pattern_[p] == '-')) ++p;
    return p > pos_ + 2 && p < pattern_.size() && pattern_[p] == ')';
  }

  // Reads flag letters after "(?" up to ':' or ')' (not consumed).
  absl::Status ParseFlags(Flags* flags) {
    pos_ += 2;
    bool on = true;
    while (!AtEnd() && Peek() != ':' && Peek() != ')') {
      const char c = Peek();
      if (c == '-') {
        on = false;
      } else if (c == 'i') {
        flags->ignore_case = on;
      } else if (c == 'm') {
        flags->dot_all = on;
      } else {
        return Unsupported(pos_, absl::StrCat("the option '", std::string(1, c), "'"));
      }
      ++pos_;
    }
    if (AtEnd()) return Invalid(pos_, "an unterminated group");
    return absl::OkStatus();
  }

  absl::StatusOr<NodePtr> ParseQuantified(Flags& flags) {
    auto atom = ParseAtom(flags);
    if (!atom.ok()) return atom.status();
    NodePtr node = *std::move(atom);
    for (;;) {
      if (AtEnd()) break;
      const size_t at = pos_;
      uint32_t min = 0, max = 0;
      const char c = Peek();
      if (c == '*') {
        min = 0, max = kUnlimited;
        ++pos_;
      } else if (c == '+') {
        min = 1, max = kUnlimited;
        ++pos_;
      } else if (c == '?') {
        min = 0, max = 1;
        ++pos_;
      } else if (c == '{' && ParseInterval(&min, &max)) {
        // consumed by ParseInterval
      } else {
        break;
      }
      if (node->kind == Node::Kind::kAssert || node->kind == Node::Kind::kLook) {
        return Unsupported(at, "a quantifier on an assertion");
      }
      if (min > max) return Invalid(at, "a repetition whose minimum exceeds its maximum");
      auto repeat = MakeNode(Node::Kind::kRepeat);
      repeat->offset = at;
      repeat->min = min;
      repeat->max = max;
      if (!AtEnd() && Peek() == '?') {
        repeat->greedy = false;
        ++pos_;
      } else if (!AtEnd() && Peek() == '+' && c != '{') {
        // Ruby syntax: *+ ++ ?+ are possessive; {n,m}+ is a repetition of a repetition.
        repeat->possessive = true;
        ++pos_;
      }
      repeat->children.push_back(std::move(node));
      node = std::move(repeat);
    }
    return node;
  }

  // {n}, {n,}, {n,m}, {,m}; false (nothing consumed) when the text is not an interval, which
  // Ruby syntax then reads as a literal '{'.
  bool ParseInterval(uint32_t* min, uint32_t* max) {
    size_t p = pos_ + 1;
    auto read_number = [&](uint32_t* value) {
      const size_t start = p;
      uint64_t v = 0;
      while (p < pattern_.size() && absl::ascii_isdigit(pattern_[p]) && v < 100000) {
        v = v * 10 + static_cast<uint64_t>(pattern_[p] - '0');
        ++p;
      }
      *value = static_cast<uint32_t>(v);
      return p > start;
    };
    uint32_t low = 0, high = 0;
    const bool has_low = read_number(&low);
    if (p < pattern_.size() && pattern_[p] == '}') {
      if (!has_low) return false;
      *min = *max = low;
      pos_ = p + 1;
      return true;
    }
    if (p >= pattern_.size() || pattern_[p] != ',') return false;
    ++p;
    const bool has_high = read_number(&high);
    if (p >= pattern_.size() || pattern_[p] != '}') return false;
    if (!has_low && !has_high) return false;
    *min = has_low ? low : 0;
    *max = has_high ? high : kUnlimited;
    pos_ = p + 1;
    return true;
  }

  absl::StatusOr<NodePtr> ParseAtom(Flags& flags) {
    const size_t at = pos_;
    const char c = Peek();
    switch (c) {
      case '(':
        return ParseGroup(flags);
      case '[': {
        auto set = ParseClass(flags);
        if (!set.ok()) return set.status();
        auto node = MakeNode(Node::Kind::kSet);
        node->offset = at;
        node->set = *set;
        return node;
      }
      case '.': {
        ++pos_;
        auto node = MakeNode(Node::Kind::kSet);
        node->offset = at;
        node->set = flags.dot_all ? AddSet({KindItem(Item::Kind::kAny, false)}, false)
                                  : AddSet({RangeItem('\n', '\n')}, true);
        return node;
      }
      case '^':
      case '$': {
        ++pos_;
        auto node = MakeNode(Node::Kind::kAssert);
        node->offset = at;
        node->assertion = c == '^' ? Regex::Assertion::kLineStart : Regex::Assertion::kLineEnd;
        return node;
      }
      case '*':
      case '+':
      case '?':
        return Invalid(at, "a quantifier with nothing to repeat");
      case '\\':
        return ParseEscapeAtom(flags);
      default:
        break;
    }
    if (c == '{') {
      uint32_t min, max;
      const size_t saved = pos_;
      if (ParseInterval(&min, &max)) {
        pos_ = saved;
        return Invalid(at, "a quantifier with nothing to repeat");
      }
    }
    return LiteralNode(NextCodePoint(), flags, at);
  }

  NodePtr LiteralNode(char32_t cp, const Flags& flags, size_t at) {
    auto node = MakeNode(Node::Kind::kSet);
    node->offset = at;
    node->literal = cp;
    node->ignore_case = flags.ignore_case;
    std::vector<Item> items = {RangeItem(cp, cp)};
    if (flags.ignore_case) CloseOverCase(&items);
    node->set = AddSet(std::move(items), false);
    return node;
  }

  absl::StatusOr<NodePtr> ParseGroup(Flags& flags) {
    const size_t at = pos_;
    Flags inner = flags;
    NodePtr wrapper;
    if (LookingAt("(?")) {
      const char kind = pos_ + 2 < pattern_.size() ? pattern_[pos_ + 2] : '\0';
      if (kind == ':') {
        pos_ += 3;
      } else if (kind == '=' || kind == '!') {
        pos_ += 3;
        wrapper = MakeNode(Node::Kind::kLook);
        wrapper->negate = kind == '!';
      } else if (kind == '>') {
        pos_ += 3;
        wrapper = MakeNode(Node::Kind::kAtomic);
      } else if (kind == '<' && pos_ + 3 < pattern_.size() &&
                 (pattern_[pos_ + 3] == '=' || pattern_[pos_ + 3] == '!')) {
        return Unsupported(at, "a lookbehind");
      } else if (kind == '<' || kind == '\'' || kind == 'P') {
        // A named group: captures do not matter here, so it is a plain group.
        const char close = kind == '\'' ? '\'' : '>';
        const size_t name_end = pattern_.find(close, pos_ + 3);
        if (name_end == absl::string_view::npos) return Invalid(at, "an unterminated group name");
        pos_ = name_end + 1;
      } else if (kind == '#') {
        const size_t end = pattern_.find(')', pos_);
        if (end == absl::string_view::npos) return Invalid(at, "an unterminated comment");
        pos_ = end + 1;
        auto empty = MakeNode(Node::Kind::kEmpty);
        return empty;
      } else if (absl::ascii_isalpha(kind) || kind == '-') {
        COIL_RETURN_IF_ERROR(ParseFlags(&inner));
        if (Peek() != ':') return Invalid(at, "a malformed group");
        ++pos_;
      } else {
        return Unsupported(at, absl::StrCat("the group \"(?", std::string(1, kind), "\""));
      }
    } else {
      ++pos_;  // a capturing group: captures do not matter here
    }
    auto body = ParseAlternation(inner);
    if (!body.ok()) return body.status();
    if (AtEnd() || Peek() != ')') return Invalid(at, "an unterminated group");
    ++pos_;
    if (wrapper == nullptr) return body;
    wrapper->offset = at;
    wrapper->children.push_back(*std::move(body));
    return wrapper;
  }

  // A hexadecimal number of up to `max_digits` digits; false when there is none.
  bool ReadHex(size_t max_digits, char32_t* value) {
    size_t digits = 0;
    uint32_t v = 0;
    while (digits < max_digits && !AtEnd() && absl::ascii_isxdigit(Peek())) {
      const char c = absl::ascii_tolower(Peek());
      v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
      ++pos_;
      ++digits;
    }
    *value = v;
    return digits > 0;
  }

  // Reads the escape after a backslash that stands for one code point (\n, \x41, \u00e9,
  // \. ...); false when the escape is a class or an assertion instead.
  absl::StatusOr<bool> ReadEscapedCodePoint(char32_t* cp, bool in_class) {
    const size_t at = pos_ - 1;
    const char c = Peek();
    switch (c) {
      case 't':
        ++pos_, *cp = '\t';
        return true;
      case 'n':
        ++pos_, *cp = '\n';
        return true;
      case 'r':
        ++pos_, *cp = '\r';
        return true;
      case 'f':
        ++pos_, *cp = '\f';
        return true;
      case 'v':
        ++pos_, *cp = '\v';
        return true;
      case 'a':
        ++pos_, *cp = 0x07;
        return true;
      case 'e':
        ++pos_, *cp = 0x1B;
        return true;
      case 'x': {
        ++pos_;
        if (!AtEnd() && Peek() == '{') {
          ++pos_;
          if (!ReadHex(8, cp) || AtEnd() || Peek() != '}')
            return Invalid(at, "a malformed \\x{...}");
          ++pos_;
        } else if (!ReadHex(2, cp)) {
          return Invalid(at, "a malformed \\x escape");
        }
        if (*cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) {
          return Invalid(at, "an escape that names no Unicode scalar value");
        }
        return true;
      }
      case 'u': {
        ++pos_;
        const size_t start = pos_;
        if (!ReadHex(4, cp) || pos_ - start != 4) return Invalid(at, "a malformed \\u escape");
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return Invalid(at, "a \\u escape naming a surrogate");
        return true;
      }
      case 'b':
        if (in_class) {
          ++pos_, *cp = 0x08;
          return true;
        }
        return false;
      default:
        break;
    }
    if (absl::ascii_isdigit(c)) {
      if (c == '0' && !in_class) {
        // \0 and \0oo: octal.
        ++pos_;
        uint32_t v = 0;
        for (int i = 0; i < 2 && !AtEnd() && Peek() >= '0' && Peek() <= '7'; ++i, ++pos_) {
          v = v * 8 + static_cast<uint32_t>(Peek() - '0');
        }
        *cp = v;
        return true;
      }
      return Unsupported(at, "a backreference or octal escape");
    }
    if (absl::ascii_isalpha(c)) return false;
    *cp = NextCodePoint();  // an escaped symbol stands for itself
    return true;
  }

  // Reads a class escape after the backslash (\d \s \w \h \p{..} and their negations) into
  // `item`; false when the escape is not one.
  absl::StatusOr<bool> ReadClassEscape(Item* item, bool ignore_case) {
    const size_t at = pos_ - 1;
    const char c = Peek();
    const bool negated = absl::ascii_isupper(c);
    switch (absl::ascii_tolower(c)) {
      case 'd':
        ++pos_;
        *item = CategoriesItem(CategoryBit(Category::kNd), negated);
        return true;
      case 's':
        ++pos_;
        *item = KindItem(Item::Kind::kWhiteSpace, negated);
        return true;
      case 'w':
        ++pos_;
        *item = KindItem(Item::Kind::kWord, negated);
        return true;
      case 'p': {
        ++pos_;
        if (AtEnd() || Peek() != '{') return Invalid(at, "\\p without {name}");
        ++pos_;
        bool property_negated = negated;
        if (!AtEnd() && Peek() == '^') {
          property_negated = !property_negated;
          ++pos_;
        }
        const size_t end = pattern_.find('}', pos_);
        if (end == absl::string_view::npos) return Invalid(at, "an unterminated \\p{");
        const std::string raw(pattern_.substr(pos_, end - pos_));
        pos_ = end + 1;
        std::string name;
        for (const char ch : raw) {
          if (ch == ' ' || ch == '_' || ch == '-') continue;
          name.push_back(absl::ascii_tolower(ch));
        }
        if (name == "any") {
          *item = KindItem(Item::Kind::kAny, property_negated);
          return true;
        }
        if (name == "space" || name == "whitespace") {
          *item = KindItem(Item::Kind::kWhiteSpace, property_negated);
          return true;
        }
        if (name == "word") {
          *item = KindItem(Item::Kind::kWord, property_negated);
          return true;
        }
        for (const CategoryAlias& known : CategoryAliases()) {
          if (name == known.name) {
            if (ignore_case && !ClosedUnderCaseFolding(known.mask)) {
              return Unsupported(at, absl::StrCat("\\p{", raw, "} in a case-insensitive part"));
            }
            *item = CategoriesItem(known.mask, property_negated);
            return true;
          }
        }
        return Unsupported(at, absl::StrCat("the property \\p{", raw,
                                            "} (general categories, Any, Space and Word are)"));
      }
      default:
        return false;
    }
  }

  // Under (?i) a category set must be closed under case folding to mean the same with and
  // without case: Lu, Ll and Lt only together, and no Mn (U+0345 folds to a letter).
  static bool ClosedUnderCaseFolding(uint32_t mask) {
    const uint32_t cased = mask & kCasedLetterMask;
    if (cased != 0 && cased != kCasedLetterMask) return false;
    return (mask & CategoryBit(Category::kMn)) == 0;
  }

  absl::StatusOr<NodePtr> ParseEscapeAtom(Flags& flags) {
    const size_t at = pos_;
    ++pos_;  // backslash
    if (AtEnd()) return Invalid(at, "a pattern ending in a backslash");
    const char c = Peek();
    // Assertions.
    const auto assertion = [&](Regex::Assertion kind) {
      ++pos_;
      auto node = MakeNode(Node::Kind::kAssert);
      node->offset = at;
      node->assertion = kind;
      return node;
    };
    switch (c) {
      case 'A':
        return assertion(Regex::Assertion::kTextStart);
      case 'z':
        return assertion(Regex::Assertion::kTextEnd);
      case 'Z':
        return assertion(Regex::Assertion::kTextEndOrFinalNewline);
      case 'b':
        return assertion(Regex::Assertion::kWordBoundary);
      case 'B':
        return assertion(Regex::Assertion::kNotWordBoundary);
      case 'h':
      case 'H': {
        ++pos_;
        auto node = MakeNode(Node::Kind::kSet);
        node->offset = at;
        node->set = AddSet(HexDigitItems(), c == 'H');
        return node;
      }
      default:
        break;
    }
    Item item;
    auto is_class = ReadClassEscape(&item, flags.ignore_case);
    if (!is_class.ok()) return is_class.status();
    if (*is_class) {
      auto node = MakeNode(Node::Kind::kSet);
      node->offset = at;
      node->set = AddSet({item}, false);
      return node;
    }
    char32_t cp = 0;
    auto is_code_point = ReadEscapedCodePoint(&cp, /*in_class=*/false);
    if (!is_code_point.ok()) return is_code_point.status();
    if (*is_code_point) return LiteralNode(cp, flags, at);
    return Unsupported(at, absl::StrCat("the escape \\", std::string(1, c)));
  }

  static std::vector<Item> HexDigitItems() {
    return {RangeItem('0', '9'), RangeItem('A', 'F'), RangeItem('a', 'f')};
  }

  // Parses a bracketed class; returns its set.
  absl::StatusOr<int32_t> ParseClass(const Flags& flags) {
    std::vector<Item> items;
    bool negated = false;
    COIL_RETURN_IF_ERROR(ParseClassInto(flags, &items, &negated));
    if (flags.ignore_case) {
      // The case closure of a negated class is the complement of the closure of its
      // members, which is what closing the members gives.
      CloseOverCase(&items);
    }
    return AddSet(std::move(items), negated);
  }

  absl::Status ParseClassInto(const Flags& flags, std::vector<Item>* items, bool* negated) {
    const size_t at = pos_;
    ++pos_;  // '['
    if (!AtEnd() && Peek() == '^') {
      *negated = true;
      ++pos_;
    }
    if (LookingAt(":")) {
      const size_t close = pattern_.find(":]", pos_);
      if (close != absl::string_view::npos) return Unsupported(at, "a POSIX bracket [:name:]");
    }
    bool first = true;
    for (;;) {
      if (AtEnd()) return Invalid(at, "an unterminated character class");
      const size_t item_at = pos_;
      const char c = Peek();
      if (c == ']' && !first) {
        ++pos_;
        return absl::OkStatus();
      }
      if (c == ']') return Invalid(item_at, "an empty character class");
      first = false;
      if (LookingAt("&&")) return Unsupported(item_at, "a class intersection &&");
      if (c == '[') {
        // A nested class: its members join this one's.
        std::vector<Item> nested;
        bool nested_negated = false;
        COIL_RETURN_IF_ERROR(ParseClassInto(flags, &nested, &nested_negated));
        if (nested_negated) {
          return Unsupported(item_at, "a negated class nested in a class");
        }
        items->insert(items->end(), nested.begin(), nested.end());
        continue;
      }
      // One member: a code point (maybe the start of a range) or a class escape.
      char32_t low = 0;
      if (c == '\\') {
        ++pos_;
        if (AtEnd()) return Invalid(item_at, "a class ending in a backslash");
        const char e = Peek();
        if (e == 'h' || e == 'H') {
          ++pos_;
          if (e == 'H') return Unsupported(item_at, "\\H inside a class");
          for (const Item& hex : HexDigitItems()) items->push_back(hex);
          continue;
        }
        Item item;
        auto is_class = ReadClassEscape(&item, flags.ignore_case);
        if (!is_class.ok()) return is_class.status();
        if (*is_class) {
          items->push_back(item);
          continue;
        }
        auto is_code_point = ReadEscapedCodePoint(&low, /*in_class=*/true);
        if (!is_code_point.ok()) return is_code_point.status();
        if (!*is_code_point) {
          return Unsupported(item_at,
                             absl::StrCat("the escape \\", std::string(1, e), " in a class"));
        }
      } else {
        low = NextCodePoint();
      }
      char32_t high = low;
      if (!AtEnd() && Peek() == '-' && pos_ + 1 < pattern_.size() && pattern_[pos_ + 1] != ']') {
        ++pos_;
        const size_t high_at = pos_;
        if (Peek() == '\\') {
          ++pos_;
          if (AtEnd()) return Invalid(high_at, "a class ending in a backslash");
          auto is_code_point = ReadEscapedCodePoint(&high, /*in_class=*/true);
          if (!is_code_point.ok()) return is_code_point.status();
          if (!*is_code_point) return Invalid(high_at, "a range ending in a class escape");
        } else if (Peek() == '[') {
          return Invalid(high_at, "a range ending in a class");
        } else {
          high = NextCodePoint();
        }
        if (high < low) return Invalid(item_at, "a range out of order");
      }
      if (flags.ignore_case) {
        COIL_RETURN_IF_ERROR(CheckNoMultiCharacterFold(low, high, item_at));
      }
      items->push_back(RangeItem(low, high));
    }
  }

  // Adds to the range items of `items` every code point that folds to the same simple case
  // folding as one of their members (s: S and U+017F; k: K and U+212A).
  static void CloseOverCase(std::vector<Item>* items) {
    icu::UnicodeSet set;
    for (const Item& item : *items) {
      if (item.kind == Item::Kind::kRange) {
        set.add(static_cast<UChar32>(item.first), static_cast<UChar32>(item.last));
      }
    }
    if (set.isEmpty()) return;
    icu::UnicodeSet closed(set);
    closed.closeOver(USET_CASE_INSENSITIVE);
    closed.removeAllStrings();
    // Keep only code points whose simple folding equals one of the originals' foldings:
    // USET_CASE_INSENSITIVE also adds characters related by full folding.
    icu::UnicodeSet folds;
    for (int32_t r = 0; r < set.getRangeCount(); ++r) {
      for (UChar32 c = set.getRangeStart(r); c <= set.getRangeEnd(r); ++c) {
        folds.add(static_cast<UChar32>(FoldCase(static_cast<char32_t>(c))));
      }
    }
    for (int32_t r = 0; r < closed.getRangeCount(); ++r) {
      for (UChar32 c = closed.getRangeStart(r); c <= closed.getRangeEnd(r); ++c) {
        if (set.contains(c)) continue;
        if (folds.contains(static_cast<UChar32>(FoldCase(static_cast<char32_t>(c))))) {
          items->push_back(RangeItem(static_cast<char32_t>(c), static_cast<char32_t>(c)));
        }
      }
    }
  }

  absl::Status CheckNoMultiCharacterFold(char32_t low, char32_t high, size_t at) const {
    // A member whose own folding is several characters would match those characters as a
    // string in Oniguruma (ß matches "ss").
    for (char32_t cp = low; cp <= high && cp - low < 0x10000; ++cp) {
      if (HasMultiCharacterFold(cp)) {
        return Unsupported(at,
                           "a case-insensitive character whose case folding is several "
                           "characters (such as \u00DF)");
      }
    }
    return absl::OkStatus();
  }

  static bool HasMultiCharacterFold(char32_t cp) {
    UChar source[2];
    int32_t length = 0;
    U16_APPEND_UNSAFE(source, length, static_cast<UChar32>(cp));
    UChar folded[8];
    UErrorCode error = U_ZERO_ERROR;
    const int32_t folded_length =
        u_strFoldCase(folded, 8, source, length, U_FOLD_CASE_DEFAULT, &error);
    return U_SUCCESS(error) && u_countChar32(folded, folded_length) > 1;
  }

  // Oniguruma matches a case-insensitive literal string against case foldings of several
  // characters (ß against "ss", ﬁ against "fi"); coil does not, so such literals are refused.
  absl::Status CheckCaseInsensitiveLiterals(const Node& concat) const {
    std::u32string run;
    size_t run_at = 0;
    const auto check = [&]() -> absl::Status {
      for (const std::u32string& fold : MultiCharacterFolds()) {
        if (run.find(fold) != std::u32string::npos) {
          return Unsupported(run_at,
                             "a case-insensitive literal that spells the case folding "
                             "of another character (such as \"ss\" for \u00DF)");
        }
      }
      run.clear();
      return absl::OkStatus();
    };
    for (const NodePtr& child : concat.children) {
      if (child->kind == Node::Kind::kSet && child->literal != 0 && child->ignore_case) {
        if (HasMultiCharacterFold(child->literal)) {
          return Unsupported(child->offset,
                             "a case-insensitive character whose case folding is several "
                             "characters (such as \u00DF)");
        }
        if (run.empty()) run_at = child->offset;
        run.push_back(FoldCase(child->literal));
        continue;
      }
      if (run.size() > 1) COIL_RETURN_IF_ERROR(check());
      run.clear();
    }
    if (run.size() > 1) COIL_RETURN_IF_ERROR(check());
    return absl::OkStatus();
  }

  // ---- analysis ----

  // Memoized per node: a node reached again (a repetition unrolled, a nested one asking
  // for its body's set at every level) costs nothing more; a set's bitmap is 65,536 tests.
  const First& FirstOf(const Node& node) {
    auto cached = first_of_.find(&node);
    if (cached != first_of_.end()) return cached->second;
    First first;
    switch (node.kind) {
      case Node::Kind::kEmpty:
      case Node::Kind::kAssert:
      case Node::Kind::kLook:
        first.nullable = true;
        break;
      case Node::Kind::kSet: {
        const CodePointSet& set = regex_->sets_[node.set];
        for (char32_t cp = 0; cp < 0x10000; ++cp) {
          if (set.Contains(cp)) first.bmp[cp >> 6] |= uint64_t{1} << (cp & 63);
        }
        first.above = true;
        break;
      }
      case Node::Kind::kConcat: {
        first.nullable = true;
        for (const NodePtr& child : node.children) {
          const First& next = FirstOf(*child);
          Merge(next, &first);
          if (!next.nullable) {
            first.nullable = false;
            break;
          }
        }
        break;
      }
      case Node::Kind::kAlternate:
        for (const NodePtr& child : node.children) {
          const First& next = FirstOf(*child);
          Merge(next, &first);
          first.nullable = first.nullable || next.nullable;
        }
        break;
      case Node::Kind::kRepeat:
      case Node::Kind::kAtomic: {
        const First& inner = FirstOf(*node.children[0]);
        Merge(inner, &first);
        first.nullable = inner.nullable || (node.kind == Node::Kind::kRepeat && node.min == 0);
        break;
      }
    }
    return first_of_.emplace(&node, std::move(first)).first->second;
  }

  static void Merge(const First& from, First* into) {
    for (size_t i = 0; i < into->bmp.size(); ++i) into->bmp[i] |= from.bmp[i];
    into->above = into->above || from.above;
  }

  int32_t AddFirstSet(const First& first) {
    regex_->sets_.push_back(CodePointSet::FromBitmap(first.bmp, first.above));
    return static_cast<int32_t>(regex_->sets_.size()) - 1;
  }

  // The first set of `node` for pruning a branch, or -1 when the branch can match empty;
  // one set per node, however often the node is emitted.
  int32_t FirstSetOf(const Node& node) {
    auto cached = first_set_of_.find(&node);
    if (cached != first_set_of_.end()) return cached->second;
    const First& first = FirstOf(node);
    const int32_t set = first.nullable ? -1 : AddFirstSet(first);
    first_set_of_.emplace(&node, set);
    return set;
  }

  // ---- code generation ----

  absl::Status EmitProgram(const Node& root) {
    COIL_RETURN_IF_ERROR(Emit(root));
    Append(Regex::Inst{});  // kMatch
    // Lookaheads and atomic groups run their own sub-programs, placed after the main one.
    while (!pending_.empty()) {
      const Pending pending = pending_.back();
      pending_.pop_back();
      regex_->program_[pending.inst].a = static_cast<int32_t>(regex_->program_.size());
      if (pending.possessive_repeat) {
        COIL_RETURN_IF_ERROR(EmitRepeat(*pending.node, /*inside_atomic=*/true));
      } else {
        COIL_RETURN_IF_ERROR(Emit(*pending.node));
      }
      Append(Regex::Inst{});
    }
    if (regex_->program_.size() > kMaxInstructions) {
      return Unsupported(0, "a pattern this large (its counted repetitions unroll too far)");
    }
    return absl::OkStatus();
  }

  size_t Append(const Regex::Inst& inst) {
    regex_->program_.push_back(inst);
    return regex_->program_.size() - 1;
  }
  Regex::Inst& At(size_t index) { return regex_->program_[index]; }

  absl::Status Emit(const Node& node) {
    if (regex_->program_.size() > kMaxInstructions || ++emitted_nodes_ > kMaxEmittedNodes) {
      return Unsupported(node.offset,
                         "a pattern this large (its counted repetitions unroll too far)");
    }
    switch (node.kind) {
      case Node::Kind::kEmpty:
        return absl::OkStatus();
      case Node::Kind::kSet: {
        Regex::Inst inst;
        inst.op = Regex::Op::kSet;
        inst.a = node.set;
        Append(inst);
        return absl::OkStatus();
      }
      case Node::Kind::kConcat:
        for (const NodePtr& child : node.children) COIL_RETURN_IF_ERROR(Emit(*child));
        return absl::OkStatus();
      case Node::Kind::kAlternate: {
        std::vector<size_t> jumps_to_end;
        for (size_t i = 0; i < node.children.size(); ++i) {
          const Node& child = *node.children[i];
          if (i + 1 == node.children.size()) {
            COIL_RETURN_IF_ERROR(Emit(child));
            break;
          }
          Regex::Inst split;
          split.op = Regex::Op::kSplit;
          split.first_a = FirstSetOf(child);
          const size_t split_at = Append(split);
          At(split_at).a = static_cast<int32_t>(split_at + 1);
          COIL_RETURN_IF_ERROR(Emit(child));
          Regex::Inst jump;
          jump.op = Regex::Op::kJump;
          jumps_to_end.push_back(Append(jump));
          At(split_at).b = static_cast<int32_t>(regex_->program_.size());
          // The rest of the alternation can be pruned by its own first set.
          At(split_at).first_b = BranchFirstSetOfRest(node, i + 1);
        }
        for (const size_t jump : jumps_to_end) {
          At(jump).a = static_cast<int32_t>(regex_->program_.size());
        }
        return absl::OkStatus();
      }
      case Node::Kind::kAssert: {
        Regex::Inst inst;
        inst.op = Regex::Op::kAssert;
        inst.assertion = node.assertion;
        Append(inst);
        return absl::OkStatus();
      }
      case Node::Kind::kLook:
      case Node::Kind::kAtomic: {
        Regex::Inst inst;
        inst.op = node.kind == Node::Kind::kLook ? Regex::Op::kLook : Regex::Op::kAtomic;
        inst.negate = node.negate;
        pending_.push_back(Pending{Append(inst), node.children[0].get(), false});
        return absl::OkStatus();
      }
      case Node::Kind::kRepeat:
        return EmitRepeat(node);
    }
    return absl::OkStatus();
  }

  int32_t BranchFirstSetOfRest(const Node& alternation, size_t from) {
    const std::pair<const Node*, size_t> key(&alternation, from);
    auto cached = rest_set_of_.find(key);
    if (cached != rest_set_of_.end()) return cached->second;
    First first;
    int32_t set = 0;
    for (size_t i = from; i < alternation.children.size(); ++i) {
      const First& next = FirstOf(*alternation.children[i]);
      if (next.nullable) {
        set = -1;
        break;
      }
      Merge(next, &first);
    }
    if (set == 0) set = AddFirstSet(first);
    rest_set_of_.emplace(key, set);
    return set;
  }

  absl::Status EmitRepeat(const Node& node, bool inside_atomic = false) {
    const Node& body = *node.children[0];
    if (node.possessive && !inside_atomic) {
      // A possessive repetition is an atomic group around the greedy one.
      Regex::Inst inst;
      inst.op = Regex::Op::kAtomic;
      pending_.push_back(Pending{Append(inst), &node, /*possessive_repeat=*/true});
      return absl::OkStatus();
    }
    if (body.kind == Node::Kind::kSet) {
      Regex::Inst inst;
      inst.op = Regex::Op::kRun;
      inst.a = body.set;
      inst.min = node.min;
      inst.max = node.max;
      inst.greedy = node.greedy;
      Append(inst);
      return absl::OkStatus();
    }
    if (node.max == kUnlimited && FirstOf(body).nullable) {
      return Unsupported(node.offset, "an unbounded repetition of something that can match empty");
    }
    for (uint32_t i = 0; i < node.min; ++i) COIL_RETURN_IF_ERROR(Emit(body));
    const int32_t first = FirstSetOf(body);
    if (node.max == kUnlimited) {
      Regex::Inst split;
      split.op = Regex::Op::kSplit;
      const size_t loop = Append(split);
      COIL_RETURN_IF_ERROR(Emit(body));
      Regex::Inst jump;
      jump.op = Regex::Op::kJump;
      jump.a = static_cast<int32_t>(loop);
      Append(jump);
      const auto body_start = static_cast<int32_t>(loop + 1);
      const auto exit = static_cast<int32_t>(regex_->program_.size());
      SetSplit(loop, body_start, exit, first, node.greedy);
      return absl::OkStatus();
    }
    std::vector<size_t> splits;
    for (uint32_t i = node.min; i < node.max; ++i) {
      Regex::Inst split;
      split.op = Regex::Op::kSplit;
      splits.push_back(Append(split));
      COIL_RETURN_IF_ERROR(Emit(body));
    }
    const auto exit = static_cast<int32_t>(regex_->program_.size());
    for (const size_t split : splits) {
      SetSplit(split, static_cast<int32_t>(split + 1), exit, first, node.greedy);
    }
    return absl::OkStatus();
  }

  void SetSplit(size_t at, int32_t body, int32_t exit, int32_t body_first, bool greedy) {
    Regex::Inst& split = At(at);
    if (greedy) {
      split.a = body, split.b = exit, split.first_a = body_first, split.first_b = -1;
    } else {
      split.a = exit, split.b = body, split.first_a = -1, split.first_b = body_first;
    }
  }

  absl::string_view pattern_;
  size_t pos_ = 0;
  std::vector<SetSpec> sets_;
  std::unique_ptr<Regex> regex_;
  // Sub-programs to place after the main program: the instruction that runs each, and
  // what it runs (for a possessive repetition, the repetition itself, greedily).
  struct Pending {
    size_t inst;
    const Node* node;
    bool possessive_repeat;
  };
  std::vector<Pending> pending_;
  // FirstOf's and the first sets' memos (see FirstOf), and the nodes Emit has visited.
  std::unordered_map<const Node*, First> first_of_;
  std::unordered_map<const Node*, int32_t> first_set_of_;
  std::map<std::pair<const Node*, size_t>, int32_t> rest_set_of_;
  size_t emitted_nodes_ = 0;
};

// ---- Regex ----

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern) {
  RegexCompiler compiler(pattern);
  return compiler.Compile();
}

size_t Regex::Utf8LengthAt(absl::string_view text, size_t pos) {
  return Utf8Length(static_cast<unsigned char>(text[pos]));
}

bool Regex::CheckAssertion(Assertion assertion, absl::string_view text, size_t pos) const {
  const size_t n = text.size();
  const auto is_word_before = [&] {
    if (pos == 0) return false;
    const size_t prev = PreviousCodePoint(text, pos);
    size_t length = 0;
    return IsRegexWordCharacter(DecodeUtf8(text, prev, &length));
  };
  const auto is_word_after = [&] {
    if (pos >= n) return false;
    size_t length = 0;
    return IsRegexWordCharacter(DecodeUtf8(text, pos, &length));
  };
  switch (assertion) {
    case Assertion::kLineStart:
      return pos == 0 || text[pos - 1] == '\n';
    case Assertion::kLineEnd:
      return pos == n || text[pos] == '\n';
    case Assertion::kTextStart:
      return pos == 0;
    case Assertion::kTextEnd:
      return pos == n;
    case Assertion::kTextEndOrFinalNewline:
      return pos == n || (pos + 1 == n && text[pos] == '\n');
    case Assertion::kWordBoundary:
      return is_word_before() != is_word_after();
    case Assertion::kNotWordBoundary:
      return is_word_before() == is_word_after();
  }
  return false;
}

int64_t Regex::Run(int32_t start_pc, absl::string_view text, size_t start_pos) const {
  enum class FrameKind : uint8_t { kAlternative, kGiveBack, kTakeMore };
  struct Frame {
    FrameKind kind;
    int32_t pc;
    size_t pos;
    size_t floor;    // kGiveBack: the position after the minimum count
    uint32_t count;  // kTakeMore: characters taken so far
  };
  // Nested runs (lookaheads, atomic groups) share the stack above their caller's frames.
  thread_local std::vector<Frame> stack;
  const size_t base = stack.size();
  const size_t n = text.size();
  int32_t pc = start_pc;
  size_t pos = start_pos;
  const auto can_enter = [&](int32_t first, size_t at) {
    if (first < 0) return true;
    if (at >= n) return false;
    size_t length = 0;
    return sets_[first].Contains(DecodeUtf8(text, at, &length));
  };
  for (;;) {
    const Inst& inst = program_[pc];
    bool ok = true;
    switch (inst.op) {
      case Op::kSet: {
        ok = false;
        if (pos < n) {
          size_t length = 0;
          const char32_t cp = DecodeUtf8(text, pos, &length);
          if (sets_[inst.a].Contains(cp)) {
            pos += length;
            ++pc;
            ok = true;
          }
        }
        break;
      }
      case Op::kRun: {
        const CodePointSet& set = sets_[inst.a];
        uint32_t count = 0;
        size_t p = pos;
        if (inst.greedy) {
          size_t floor = pos;
          while (count < inst.max && p < n) {
            size_t length = 0;
            if (!set.Contains(DecodeUtf8(text, p, &length))) break;
            p += length;
            if (++count == inst.min) floor = p;
          }
          if (count < inst.min) {
            ok = false;
            break;
          }
          if (p > floor) stack.push_back(Frame{FrameKind::kGiveBack, pc + 1, p, floor, 0});
        } else {
          while (count < inst.min) {
            size_t length = 0;
            if (p >= n || !set.Contains(DecodeUtf8(text, p, &length))) break;
            p += length;
            ++count;
          }
          if (count < inst.min) {
            ok = false;
            break;
          }
          if (count < inst.max) stack.push_back(Frame{FrameKind::kTakeMore, pc, p, 0, count});
        }
        pos = p;
        ++pc;
        break;
      }
      case Op::kSplit: {
        const bool a = can_enter(inst.first_a, pos);
        const bool b = can_enter(inst.first_b, pos);
        if (a) {
          if (b) stack.push_back(Frame{FrameKind::kAlternative, inst.b, pos, 0, 0});
          pc = inst.a;
        } else if (b) {
          pc = inst.b;
        } else {
          ok = false;
        }
        break;
      }
      case Op::kJump:
        pc = inst.a;
        break;
      case Op::kAssert:
        ok = CheckAssertion(inst.assertion, text, pos);
        if (ok) ++pc;
        break;
      case Op::kLook: {
        const int64_t end = Run(inst.a, text, pos);
        ok = (end >= 0) != inst.negate;
        if (ok) ++pc;
        break;
      }
      case Op::kAtomic: {
        const int64_t end = Run(inst.a, text, pos);
        ok = end >= 0;
        if (ok) {
          pos = static_cast<size_t>(end);
          ++pc;
        }
        break;
      }
      case Op::kMatch:
        stack.resize(base);
        return static_cast<int64_t>(pos);
    }
    if (ok) continue;
    // Backtrack to the most recent choice that has an option left.
    bool resumed = false;
    while (!resumed) {
      if (stack.size() == base) return -1;
      Frame& frame = stack.back();
      switch (frame.kind) {
        case FrameKind::kAlternative:
          pc = frame.pc;
          pos = frame.pos;
          stack.pop_back();
          resumed = true;
          break;
        case FrameKind::kGiveBack:
          frame.pos = PreviousCodePoint(text, frame.pos);
          pc = frame.pc;
          pos = frame.pos;
          if (frame.pos == frame.floor) stack.pop_back();
          resumed = true;
          break;
        case FrameKind::kTakeMore: {
          const Inst& run = program_[frame.pc];
          size_t length = 0;
          if (frame.pos < n && sets_[run.a].Contains(DecodeUtf8(text, frame.pos, &length))) {
            frame.pos += length;
            ++frame.count;
            pc = frame.pc + 1;
            pos = frame.pos;
            if (frame.count == run.max) stack.pop_back();
            resumed = true;
          } else {
            stack.pop_back();
          }
          break;
        }
      }
    }
  }
}

int64_t Regex::MatchAt(absl::string_view text, size_t pos) const { return Run(0, text, pos); }

bool Regex::Search(absl::string_view text, size_t from, size_t* start, size_t* end) const {
  const size_t n = text.size();
  size_t pos = from;
  for (;;) {
    if (first_set_ >= 0) {
      // Skip the positions no match can start at.
      const CodePointSet& first = sets_[first_set_];
      while (pos < n) {
        size_t length = 0;
        if (first.Contains(DecodeUtf8(text, pos, &length))) break;
        pos += length;
      }
      if (pos >= n) return false;
    }
    const int64_t matched = Run(0, text, pos);
    if (matched >= 0) {
      *start = pos;
      *end = static_cast<size_t>(matched);
      return true;
    }
    if (pos >= n) return false;
    pos += Utf8LengthAt(text, pos);
  }
}

}  // namespace coil::tokenizer
