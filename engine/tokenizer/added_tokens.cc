#include "engine/tokenizer/added_tokens.h"

namespace coil::tokenizer {

AddedTokenMatcher::AddedTokenMatcher() : nodes_(1) { root_children_.fill(-1); }

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  const auto it = children_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

void AddedTokenMatcher::Add(absl::string_view content, int32_t id) {
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
  if (node != 0 && nodes_[node].token < 0) nodes_[node].token = id;
}

int32_t AddedTokenMatcher::LongestMatchAt(absl::string_view text, size_t pos,
                                          size_t* length) const {
  int32_t node = root_children_[static_cast<unsigned char>(text[pos])];
  int32_t best = -1;
  for (size_t i = pos + 1; node >= 0; ++i) {
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *length = i - pos;
    }
    if (i == text.size()) break;
    node = Child(node, static_cast<unsigned char>(text[i]));
  }
  return best;
}

}  // namespace coil::tokenizer
