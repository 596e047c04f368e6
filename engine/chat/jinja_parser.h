// Internal to engine/chat (nothing outside engine/chat includes it). The Jinja parser:
// the lexer's segments as a statement tree. It accepts only the statements, filters,
// tests, functions and methods the evaluator implements, so that a template that parses
// never fails later for an unknown construct.
#ifndef COIL_ENGINE_CHAT_JINJA_PARSER_H_
#define COIL_ENGINE_CHAT_JINJA_PARSER_H_

#include <vector>

#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_lexer.h"

namespace coil::chat::jinja_internal {

// The template's statements. Throws JinjaError for a syntax error or a construct that is
// not supported, naming it and its line.
Body ParseSegments(std::vector<Segment> segments);

}  // namespace coil::chat::jinja_internal

#endif  // COIL_ENGINE_CHAT_JINJA_PARSER_H_
