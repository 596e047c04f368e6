// What a Split pre-tokenizer or a Replace normalizer or decoder looks for: a literal string
// or one of coil's regular expressions. Matches are reported left to right, without
// overlaps, as the reference finds them (a literal is a regular expression of its escaped
// text there, which is the same as searching for the string).
#ifndef COIL_ENGINE_TOKENIZER_PATTERN_H_
#define COIL_ENGINE_TOKENIZER_PATTERN_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace coil::tokenizer {

class Pattern {
 public:
  // `spec.text` must not be empty (tokenizer_json.cc refuses an empty pattern).
  static absl::StatusOr<Pattern> Create(const PatternSpec& spec) {
    Pattern pattern;
    if (spec.is_regex) {
      auto regex = Regex::Compile(spec.text);
      if (!regex.ok()) return regex.status();
      pattern.regex_ = std::shared_ptr<const Regex>(*std::move(regex));
    } else {
      pattern.literal_ = spec.text;
    }
    return pattern;
  }

  // Calls `fn(start, end)` for each match in `text` (valid UTF-8).
  template <typename Fn>
  void ForEachMatch(absl::string_view text, Fn&& fn) const {
    if (regex_ != nullptr) {
      regex_->ForEachMatch(text, fn);
      return;
    }
    size_t pos = 0;
    while (pos + literal_.size() <= text.size()) {
      const size_t found = text.find(literal_, pos);
      if (found == absl::string_view::npos) return;
      fn(found, found + literal_.size());
      pos = found + literal_.size();
    }
  }

  bool is_regex() const { return regex_ != nullptr; }
  // The literal string (empty for a regular expression).
  const std::string& literal() const { return literal_; }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_PATTERN_H_
