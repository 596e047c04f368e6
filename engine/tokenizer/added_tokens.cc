#include "engine/tokenizer/added_tokens.h"

#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

AddedTokenMatcher::AddedTokenMatcher() : nodes_(1) { root_children_.fill(-1); }

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  const auto it = children_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

void AddedTokenMatcher::Add(absl::string_view content, int32_t id, const Options& options) {
  int32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    int32_t child = Child(node, byte);
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_children_[byte] = child;
      } else {
        children_[(static_cast<uint64_t>(node) << 8) | byte] = child;
      }
    }
    node = child;
  }
  if (node != 0 && nodes_[node].token < 0) {
    nodes_[node].token = id;
    nodes_[node].options = options;
  }
}

int32_t AddedTokenMatcher::LongestMatchAt(absl::string_view text, size_t pos,
                                          size_t* length) const {
  int32_t node = root_children_[static_cast<unsigned char>(text[pos])];
  int32_t best = -1;
  for (size_t i = pos + 1; node >= 0; ++i) {
    if (nodes_[node].token >= 0) {
      best = node;
      *length = i - pos;
    }
    if (i == text.size()) break;
    node = Child(node, static_cast<unsigned char>(text[i]));
  }
  return best;
}

bool AddedTokenMatcher::IsSingleWord(absl::string_view text, size_t start, size_t stop) {
  // The reference's tests: no \w right before the match, none right after it.
  size_t length = 0;
  if (start > 0 && IsWordCharacter(DecodeUtf8(text, PreviousCodePoint(text, start), &length))) {
    return false;
  }
  return stop >= text.size() || !IsWordCharacter(DecodeUtf8(text, stop, &length));
}

size_t AddedTokenMatcher::WhitespaceBefore(absl::string_view text, size_t pos) {
  while (pos > 0) {
    const size_t prev = PreviousCodePoint(text, pos);
    size_t length = 0;
    if (!IsWhiteSpace(DecodeUtf8(text, prev, &length))) break;
    pos = prev;
  }
  return pos;
}

size_t AddedTokenMatcher::WhitespaceAfter(absl::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t length = 0;
    if (!IsWhiteSpace(DecodeUtf8(text, pos, &length))) break;
    pos += length;
  }
  return pos;
}

}  // namespace coil::tokenizer
