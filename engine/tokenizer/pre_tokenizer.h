// The pre-tokenizers of tokenizer.json (ByteLevel, Split, Metaspace, Digits, Punctuation,
// Whitespace, WhitespaceSplit, and Sequences of them): they cut normalized text into the
// words the BPE model encodes one by one. Each step works on each piece the previous step
// made, in order, as the reference does; pieces are never empty. A ByteLevel step is last
// (tokenizer_json.cc refuses steps after it), and its words stay raw bytes: the BPE model
// reads them as the ByteLevel characters they stand for.
#ifndef COIL_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define COIL_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/gpt2_split.h"
#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/tokenizer_json.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

class PreTokenizer {
 public:
  static absl::StatusOr<PreTokenizer> Create(const std::vector<PreTokenizerStep>& steps);

  // Calls `fn(word)` for each word of `text` (valid UTF-8). `head` counts the characters at
  // the start of `text` that stand for the request's first character (normalizer.h).
  template <typename Fn>
  void Split(absl::string_view text, int32_t head, Fn&& fn) const {
    if (text.empty()) return;
    Apply(0, text, head, fn);
  }

  // Whether words are raw bytes for a byte-level model.
  bool byte_level() const { return byte_level_; }

  // Whether a step needs to know which piece starts the request (Metaspace "first").
  bool needs_head() const { return needs_head_; }

 private:
  struct Step {
    PreTokenizerStep::Kind kind;
    bool add_prefix_space = false;
    bool use_regex = true;
    Pattern pattern;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;
    bool individual_digits = false;
  };
  // One stretch of a piece: [start, end), and whether the step's pattern matched it.
  struct Range {
    size_t start;
    size_t end;
    bool match;
  };
  using Ranges = absl::InlinedVector<Range, 16>;

  // Applies step `index` and the ones after it to `text`.
  template <typename Fn>
  void Apply(size_t index, absl::string_view text, int32_t head, Fn& fn) const {
    if (index == steps_.size()) {
      fn(text);
      return;
    }
    const Step& step = steps_[index];
    const auto next = [&](absl::string_view piece, int32_t piece_head) {
      if (!piece.empty()) Apply(index + 1, piece, piece_head, fn);
    };
    using Kind = PreTokenizerStep::Kind;
    switch (step.kind) {
      case Kind::kByteLevel: {
        std::string prefixed;
        if (step.add_prefix_space && text[0] != ' ') {
          prefixed.reserve(text.size() + 1);
          prefixed.push_back(' ');
          prefixed.append(text.data(), text.size());
          text = prefixed;
          if (head > 0) ++head;
        }
        if (!step.use_regex) {
          next(text, head);
          return;
        }
        ForEachGpt2Piece(text,
                         [&](absl::string_view piece) { next(piece, HeadOf(text, piece, head)); });
        return;
      }
      case Kind::kSplit:
        if (!step.invert && (step.behavior == SplitBehavior::kIsolated ||
                             step.behavior == SplitBehavior::kRemoved)) {
          // The common case, without collecting the ranges first.
          const bool keep_matches = step.behavior == SplitBehavior::kIsolated;
          size_t last = 0;
          step.pattern.ForEachMatch(text, [&](size_t start, size_t end) {
            if (start > last) next(text.substr(last, start - last), HeadAt(text, last, head));
            if (keep_matches) next(text.substr(start, end - start), HeadAt(text, start, head));
            last = end;
          });
          if (last < text.size()) next(text.substr(last), HeadAt(text, last, head));
          return;
        }
        {
          Ranges ranges;
          PatternRanges(step.pattern, text, &ranges);
          if (step.invert) {
            for (Range& range : ranges) range.match = !range.match;
          }
          EmitSplit(ranges, step.behavior, text, head, next);
        }
        return;
      case Kind::kMetaspace: {
        std::string replaced;
        replaced.reserve(text.size() + step.replacement.size());
        for (const char c : text) {
          if (c == ' ') {
            replaced += step.replacement;
          } else {
            replaced.push_back(c);
          }
        }
        const bool starts =
            absl::string_view(replaced).substr(0, step.replacement.size()) == step.replacement;
        const bool prepend =
            !starts && (step.prepend_scheme == PrependScheme::kAlways ||
                        (step.prepend_scheme == PrependScheme::kFirst && head > 0));
        if (prepend) {
          replaced.insert(0, step.replacement);
          if (head > 0) ++head;
        }
        if (!step.split) {
          next(replaced, head);
          return;
        }
        // Split before each replacement character (MergedWithNext).
        const absl::string_view view = replaced;
        size_t start = 0;
        size_t pos = view.find(step.replacement, 1);
        while (pos != absl::string_view::npos) {
          next(view.substr(start, pos - start), HeadAt(view, start, head));
          start = pos;
          pos = view.find(step.replacement, pos + step.replacement.size());
        }
        next(view.substr(start), HeadAt(view, start, head));
        return;
      }
      case Kind::kDigits: {
        Ranges ranges;
        PredicateRanges(text, IsNumeric, &ranges);
        EmitSplit(ranges,
                  step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                  text, head, next);
        return;
      }
      case Kind::kPunctuation: {
        Ranges ranges;
        PredicateRanges(text, IsPunctuation, &ranges);
        EmitSplit(ranges, step.behavior, text, head, next);
        return;
      }
      case Kind::kWhitespace: {
        // The reference's \w+|[^\w\s]+ (Rust's regex crate), the gaps removed: maximal runs of
        // word characters, and of characters neither word nor space.
        size_t pos = 0;
        while (pos < text.size()) {
          size_t length = 0;
          const char32_t cp = DecodeUtf8(text, pos, &length);
          if (IsWhiteSpace(cp) && !IsWordCharacter(cp)) {
            pos += length;
            continue;
          }
          const bool word = IsWordCharacter(cp);
          const size_t start = pos;
          pos += length;
          while (pos < text.size()) {
            const char32_t next_cp = DecodeUtf8(text, pos, &length);
            const bool next_word = IsWordCharacter(next_cp);
            if (next_word != word || (!word && IsWhiteSpace(next_cp))) break;
            pos += length;
          }
          next(text.substr(start, pos - start), HeadAt(text, start, head));
        }
        return;
      }
      case Kind::kWhitespaceSplit: {
        Ranges ranges;
        PredicateRanges(text, IsWhiteSpace, &ranges);
        EmitSplit(ranges, SplitBehavior::kRemoved, text, head, next);
        return;
      }
    }
  }

  // The head of the piece of `text` starting at byte `start`.
  static int32_t HeadAt(absl::string_view text, size_t start, int32_t head) {
    int32_t before = 0;
    for (size_t i = 0; i < start; i += Utf8Length(static_cast<unsigned char>(text[i]))) {
      if (++before >= head) return 0;
    }
    return head - before;
  }
  static int32_t HeadOf(absl::string_view text, absl::string_view piece, int32_t head) {
    return HeadAt(text, static_cast<size_t>(piece.data() - text.data()), head);
  }

  // The ranges the reference's find_matches gives: matches and the gaps between them.
  static void PatternRanges(const Pattern& pattern, absl::string_view text, Ranges* ranges);
  // One single-character match per character satisfying `predicate`, gaps between.
  static void PredicateRanges(absl::string_view text, bool (*predicate)(char32_t), Ranges* ranges);

  // Cuts `text` as `behavior` says the ranges are kept, and calls next(piece, head).
  template <typename Next>
  static void EmitSplit(const Ranges& ranges, SplitBehavior behavior, absl::string_view text,
                        int32_t head, Next& next) {
    Ranges pieces;
    MergeRanges(ranges, behavior, &pieces);
    for (const Range& piece : pieces) {
      if (piece.match) continue;  // a removed delimiter
      next(text.substr(piece.start, piece.end - piece.start), HeadAt(text, piece.start, head));
    }
  }

  // The pieces of the reference's NormalizedString::split: `match` marks the ones removed.
  static void MergeRanges(const Ranges& ranges, SplitBehavior behavior, Ranges* pieces);

  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool needs_head_ = false;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
