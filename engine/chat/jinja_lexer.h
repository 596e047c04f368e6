// Internal to engine/chat (the Jinja interpreter's first stage; nothing outside engine/chat
// includes it). The lexer: the template as text runs and tags, each tag's inside as tokens,
// with the whitespace control transformers renders with (trim_blocks, lstrip_blocks, "-"
// and "+", the final newline dropped).
#ifndef COIL_ENGINE_CHAT_JINJA_LEXER_H_
#define COIL_ENGINE_CHAT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace coil::chat::jinja_internal {

enum class TokenKind { kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // name, operator, or the string literal's value
  int64_t integer = 0;
  double number = 0.0;
};

enum class SegmentKind { kText, kOutput, kStatement };

struct Segment {
  SegmentKind kind = SegmentKind::kText;
  std::string text;
  std::vector<Token> tokens;
  int line = 1;
};

// The segments of `input`. Throws JinjaError for a tag or string literal that is not
// closed, or a character no token starts with.
std::vector<Segment> Lex(absl::string_view input);

}  // namespace coil::chat::jinja_internal

#endif  // COIL_ENGINE_CHAT_JINJA_LEXER_H_
