#include "engine/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"

namespace coil::tokenizer {

absl::StatusOr<PreTokenizer> PreTokenizer::Create(const std::vector<PreTokenizerStep>& steps) {
  PreTokenizer pre_tokenizer;
  for (const PreTokenizerStep& spec : steps) {
    Step step;
    step.kind = spec.kind;
    step.add_prefix_space = spec.add_prefix_space;
    step.use_regex = spec.use_regex;
    step.behavior = spec.behavior;
    step.invert = spec.invert;
    step.replacement = spec.replacement;
    step.prepend_scheme = spec.prepend_scheme;
    step.split = spec.split;
    step.individual_digits = spec.individual_digits;
    switch (spec.kind) {
      case PreTokenizerStep::Kind::kSplit: {
        COIL_ASSIGN_OR_RETURN(step.pattern, Pattern::Create(spec.pattern));
        break;
      }
      case PreTokenizerStep::Kind::kByteLevel:
        pre_tokenizer.byte_level_ = true;
        break;
      case PreTokenizerStep::Kind::kMetaspace:
        if (spec.prepend_scheme == PrependScheme::kFirst) pre_tokenizer.needs_head_ = true;
        break;
      default:
        break;
    }
    pre_tokenizer.steps_.push_back(std::move(step));
  }
  return pre_tokenizer;
}

void PreTokenizer::PatternRanges(const Pattern& pattern, absl::string_view text, Ranges* ranges) {
  size_t last = 0;
  pattern.ForEachMatch(text, [&](size_t start, size_t end) {
    if (start != last) ranges->push_back(Range{last, start, false});
    ranges->push_back(Range{start, end, true});
    last = end;
  });
  if (last != text.size()) ranges->push_back(Range{last, text.size(), false});
}

void PreTokenizer::PredicateRanges(absl::string_view text, bool (*predicate)(char32_t),
                                   Ranges* ranges) {
  size_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    const char32_t cp = DecodeUtf8(text, pos, &length);
    if (predicate(cp)) {
      if (last < pos) ranges->push_back(Range{last, pos, false});
      ranges->push_back(Range{pos, pos + length, true});
      last = pos + length;
    }
    pos += length;
  }
  if (last < text.size()) ranges->push_back(Range{last, text.size(), false});
}

void PreTokenizer::MergeRanges(const Ranges& ranges, SplitBehavior behavior, Ranges* pieces) {
  // As the reference's NormalizedString::split; `match` in the output marks a removed piece.
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Range& range : ranges) pieces->push_back(Range{range.start, range.end, false});
      return;
    case SplitBehavior::kRemoved:
      *pieces = ranges;
      return;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Range& range : ranges) {
        if (range.match == previous_match && !pieces->empty()) {
          pieces->back().end = range.end;
        } else {
          pieces->push_back(Range{range.start, range.end, false});
        }
        previous_match = range.match;
      }
      return;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Range& range : ranges) {
        if (range.match && !previous_match && !pieces->empty()) {
          pieces->back().end = range.end;
        } else {
          pieces->push_back(Range{range.start, range.end, false});
        }
        previous_match = range.match;
      }
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->match && !previous_match && !pieces->empty()) {
          pieces->back().start = it->start;
        } else {
          pieces->push_back(Range{it->start, it->end, false});
        }
        previous_match = it->match;
      }
      std::reverse(pieces->begin(), pieces->end());
      return;
    }
  }
}

}  // namespace coil::tokenizer
