// Internal to engine/chat (nothing outside engine/chat includes it). The Jinja evaluator:
// runs a parsed template's statements against the global variables, producing its text.
#ifndef COIL_ENGINE_CHAT_JINJA_EVAL_H_
#define COIL_ENGINE_CHAT_JINJA_EVAL_H_

#include <string>

#include "engine/chat/jinja.h"
#include "engine/chat/jinja_ast.h"

namespace coil::chat::jinja_internal {

// The text `body` renders to with `globals` as the global scope. Throws JinjaError with
// raise_exception's message or the error (with its line).
std::string Evaluate(const Body& body, const Value::Dict& globals);

}  // namespace coil::chat::jinja_internal

#endif  // COIL_ENGINE_CHAT_JINJA_EVAL_H_
