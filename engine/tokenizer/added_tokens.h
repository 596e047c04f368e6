// Finds added tokens (such as "<|endoftext|>" or GPT-NeoX's runs of 2-24 spaces) in text
// before pre-tokenization, leftmost-longest as the reference's Aho-Corasick matcher does:
// at the first position where any token matches, the longest token there wins, and the
// scan resumes after it. A byte trie walked from each candidate position gives exactly
// that, in O(length of the longest token) per position.
#ifndef COIL_ENGINE_TOKENIZER_ADDED_TOKENS_H_
#define COIL_ENGINE_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace coil::tokenizer {

class AddedTokenMatcher {
 public:
  AddedTokenMatcher();

  // Adds `content` (non-empty) as token `id`; adding the same content again keeps the
  // first id.
  void Add(absl::string_view content, int32_t id);

  bool empty() const { return nodes_.size() == 1; }

  // Calls `on_text(view)` for each non-empty stretch of `text` between matches and
  // `on_token(id)` for each match, in order.
  template <typename OnText, typename OnToken>
  void Split(absl::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t text_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t length = 0;
      const int32_t id = LongestMatchAt(text, pos, &length);
      if (id < 0) {
        ++pos;
        continue;
      }
      if (pos > text_start) on_text(text.substr(text_start, pos - text_start));
      on_token(id);
      pos += length;
      text_start = pos;
    }
    if (text.size() > text_start) on_text(text.substr(text_start));
  }

 private:
  struct Node {
    int32_t token = -1;  // the id of the token ending here, or -1
  };
  // The id and length of the longest token starting at text[pos], or -1.
  int32_t LongestMatchAt(absl::string_view text, size_t pos, size_t* length) const;
  int32_t Child(int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_;                          // node 0 is the root
  std::array<int32_t, 256> root_children_;           // -1: no token starts with that byte
  absl::flat_hash_map<uint64_t, int32_t> children_;  // (node << 8 | byte) -> node
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_ADDED_TOKENS_H_
