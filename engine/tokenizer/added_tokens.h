// Finds added tokens (such as "<|endoftext|>" or GPT-NeoX's runs of 2-24 spaces) in text
// before pre-tokenization, leftmost-longest as the reference's Aho-Corasick matcher does:
// at the first position where any token matches, the longest token there wins, and the
// scan resumes after it. A byte trie walked from each candidate position gives exactly
// that, in O(length of the longest token) per position. The lstrip, rstrip and single_word
// options are applied to each match as the reference applies them.
#ifndef COIL_ENGINE_TOKENIZER_ADDED_TOKENS_H_
#define COIL_ENGINE_TOKENIZER_ADDED_TOKENS_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace coil::tokenizer {

// How an added token is matched (the reference's AddedToken options).
struct AddedTokenOptions {
  bool lstrip = false;       // also takes the whitespace just before it
  bool rstrip = false;       // also takes the whitespace just after it
  bool single_word = false;  // only where no word character touches it
};

class AddedTokenMatcher {
 public:
  using Options = AddedTokenOptions;

  AddedTokenMatcher();

  // Adds `content` (non-empty) as token `id`; adding the same content again keeps the
  // first id.
  void Add(absl::string_view content, int32_t id, const Options& options = Options());

  bool empty() const { return nodes_.size() == 1; }

  // Calls `on_text(view)` for each non-empty stretch of `text` between matches and
  // `on_token(id)` for each match, in order. A single_word match touching a word character
  // is dropped and the scan goes on after it, as the reference's does.
  template <typename OnText, typename OnToken>
  void Split(absl::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t text_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t length = 0;
      const int32_t node = LongestMatchAt(text, pos, &length);
      if (node < 0) {
        ++pos;
        continue;
      }
      const Node& match = nodes_[node];
      size_t start = pos;
      size_t stop = pos + length;
      pos = stop;
      if (match.options.single_word && !IsSingleWord(text, start, stop)) continue;
      if (match.options.lstrip) start = std::max(WhitespaceBefore(text, start), text_start);
      if (match.options.rstrip) stop = WhitespaceAfter(text, stop);
      if (start > text_start) on_text(text.substr(text_start, start - text_start));
      on_token(match.token);
      text_start = stop;
    }
    if (text.size() > text_start) on_text(text.substr(text_start));
  }

 private:
  struct Node {
    int32_t token = -1;  // the id of the token ending here, or -1
    Options options;
  };
  // The node of the longest token starting at text[pos] and its length, or -1.
  int32_t LongestMatchAt(absl::string_view text, size_t pos, size_t* length) const;
  int32_t Child(int32_t node, unsigned char byte) const;
  static bool IsSingleWord(absl::string_view text, size_t start, size_t stop);
  static size_t WhitespaceBefore(absl::string_view text, size_t pos);
  static size_t WhitespaceAfter(absl::string_view text, size_t pos);

  std::vector<Node> nodes_;                          // node 0 is the root
  std::array<int32_t, 256> root_children_;           // -1: no token starts with that byte
  absl::flat_hash_map<uint64_t, int32_t> children_;  // (node << 8 | byte) -> node
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_ADDED_TOKENS_H_
