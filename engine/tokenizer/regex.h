// coil's regular expressions for the patterns tokenizer.json files carry (Split and Replace):
// a backtracking matcher with the semantics of Oniguruma in its Ruby syntax, which is what
// the reference library runs them with. Alternatives are tried in order and quantifiers are
// greedy unless marked lazy, so the first match found at the leftmost position is the one
// Oniguruma reports. Character classes test Unicode 16.0 properties (unicode.h), as
// Oniguruma's tables do. What it does not implement (backreferences, lookbehind, script
// properties, case-insensitive multi-character folds, ...) is refused when the pattern is
// compiled, naming the construct, never matched differently.
//
// A compiled Regex is immutable; ForEachMatch may run on several threads at once.
#ifndef COIL_ENGINE_TOKENIZER_REGEX_H_
#define COIL_ENGINE_TOKENIZER_REGEX_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil::tokenizer {

// A set of code points: a bitmap over the Basic Multilingual Plane, and for the code points
// above it the union of `items` (ranges and property tests), complemented when `negated`.
class CodePointSet {
 public:
  struct Item {
    enum class Kind : uint8_t { kRange, kCategories, kWhiteSpace, kWord, kAny };
    Kind kind = Kind::kRange;
    bool negated = false;
    char32_t first = 0;
    char32_t last = 0;
    uint32_t categories = 0;  // bit i: Category i (kCategories)
  };

  CodePointSet() = default;
  CodePointSet(std::vector<Item> items, bool negated);

  bool Contains(char32_t cp) const {
    if (cp < 0x10000) return (bmp_[cp >> 6] >> (cp & 63)) & 1;
    return ContainsAbove(cp);
  }

  // The set with the BMP code points of `bmp` (1024 words) and, when `above`, every code
  // point above the BMP.
  static CodePointSet FromBitmap(std::vector<uint64_t> bmp, bool above);

  // Whether `item` contains `cp` (evaluated, no bitmap).
  static bool ItemContains(const Item& item, char32_t cp);

 private:
  bool ContainsAbove(char32_t cp) const;

  std::vector<Item> items_;
  bool negated_ = false;
  std::vector<uint64_t> bmp_;  // 1024 words
};

class Regex {
 public:
  // INVALID_ARGUMENT for a malformed pattern, UNIMPLEMENTED for a construct coil does not
  // implement; either message names the construct and its offset in the pattern.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern);

  // Calls `fn(start, end)` with the byte offsets of each match in `text` (valid UTF-8), left
  // to right, as the reference iterates them: the search resumes at the end of each match,
  // and an empty match right where the previous match ended is skipped.
  template <typename Fn>
  void ForEachMatch(absl::string_view text, Fn&& fn) const {
    size_t search_from = 0;
    size_t last_match_end = static_cast<size_t>(-1);
    while (search_from <= text.size()) {
      size_t start = 0;
      size_t end = 0;
      if (!Search(text, search_from, &start, &end)) return;
      if (start == end && end == last_match_end) {
        if (search_from == text.size()) return;
        search_from += Utf8LengthAt(text, search_from);
        continue;
      }
      search_from = end;
      last_match_end = end;
      fn(start, end);
    }
  }

  // The leftmost match starting at or after `from`: true and its offsets, or false.
  bool Search(absl::string_view text, size_t from, size_t* start, size_t* end) const;

  // The end of a match that starts exactly at `pos`, or -1.
  int64_t MatchAt(absl::string_view text, size_t pos) const;

  const std::string& pattern() const { return pattern_; }

  // Public for the compiler in regex.cc.
  enum class Op : uint8_t { kSet, kRun, kSplit, kJump, kAssert, kLook, kAtomic, kMatch };
  enum class Assertion : uint8_t {
    kLineStart,
    kLineEnd,
    kTextStart,
    kTextEnd,
    kTextEndOrFinalNewline,
    kWordBoundary,
    kNotWordBoundary,
  };
  struct Inst {
    Op op = Op::kMatch;
    bool greedy = true;   // kRun
    bool negate = false;  // kLook
    Assertion assertion = Assertion::kTextStart;
    int32_t a = 0;         // kSet/kRun: set; kSplit: preferred; kJump/kLook/kAtomic: target
    int32_t b = 0;         // kSplit: the other branch
    uint32_t min = 0;      // kRun
    uint32_t max = 0;      // kRun (UINT32_MAX: no limit)
    int32_t first_a = -1;  // kSplit: the first set of branch a (-1: anything may come)
    int32_t first_b = -1;  // kSplit: the first set of branch b
  };

 private:
  Regex() = default;
  static size_t Utf8LengthAt(absl::string_view text, size_t pos);
  int64_t Run(int32_t pc, absl::string_view text, size_t pos) const;
  bool CheckAssertion(Assertion assertion, absl::string_view text, size_t pos) const;

  friend class RegexCompiler;
  std::string pattern_;
  std::vector<Inst> program_;
  std::vector<CodePointSet> sets_;
  // The code points a match can start with (-1: any, or the pattern can match empty).
  int32_t first_set_ = -1;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_REGEX_H_
