// The GPT-2 split pattern, hand-written: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, alternatives tried in that order at each position, as
// the ByteLevel pre-tokenizer applies it. RE2 has no lookahead and std::regex no \p{L}, and a
// scanner is also several times faster. The pieces tile the input: their concatenation is
// the input, none is empty.
#ifndef COIL_ENGINE_TOKENIZER_GPT2_SPLIT_H_
#define COIL_ENGINE_TOKENIZER_GPT2_SPLIT_H_

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

// Calls `fn(piece)` for each piece of `text` (valid UTF-8), left to right.
template <typename Fn>
void ForEachGpt2Piece(absl::string_view text, Fn&& fn) {
  const size_t n = text.size();
  size_t pos = 0;
  while (pos < n) {
    size_t length = 0;
    const char32_t cp = DecodeUtf8(text, pos, &length);
    // 's 't 're 've 'm 'll 'd: case-sensitive, so "I'LL" splits as "I" "'" "LL".
    if (cp == '\'' && pos + 1 < n) {
      const char c1 = text[pos + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        fn(text.substr(pos, 2));
        pos += 2;
        continue;
      }
      if (pos + 2 < n) {
        const char c2 = text[pos + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          fn(text.substr(pos, 3));
          pos += 3;
          continue;
        }
      }
    }
    CharClass run_class = ClassOf(cp);
    size_t end = pos + length;
    // ` ?X+`: one leading U+0020 joins a run of letters, numbers or other symbols.
    if (cp == ' ' && end < n) {
      size_t next_length = 0;
      const CharClass next_class = ClassOf(DecodeUtf8(text, end, &next_length));
      if (next_class != CharClass::kSpace) {
        run_class = next_class;
        end += next_length;
      }
    }
    if (run_class != CharClass::kSpace) {
      while (end < n) {
        size_t next_length = 0;
        if (ClassOf(DecodeUtf8(text, end, &next_length)) != run_class) break;
        end += next_length;
      }
      fn(text.substr(pos, end - pos));
      pos = end;
      continue;
    }
    // A whitespace run. `\s+(?!\S)`: when a non-space follows a run of two or more, the
    // last whitespace character is left to start the next piece (so " world" keeps its
    // space); a run at the end of the text, or a single one, is taken whole (`\s+`).
    size_t last_start = pos;
    while (end < n) {
      size_t next_length = 0;
      if (ClassOf(DecodeUtf8(text, end, &next_length)) != CharClass::kSpace) break;
      last_start = end;
      end += next_length;
    }
    if (end < n && last_start > pos) end = last_start;
    fn(text.substr(pos, end - pos));
    pos = end;
  }
}

// The pieces of `text` (valid UTF-8), as views into it.
inline std::vector<absl::string_view> SplitGpt2(absl::string_view text) {
  std::vector<absl::string_view> pieces;
  ForEachGpt2Piece(text, [&pieces](absl::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_GPT2_SPLIT_H_
