// Internal to engine/chat (the Jinja interpreter's stages share it; nothing outside
// engine/chat includes it): the interpreter's error, and what every stage needs of a Value:
// its text, repr, equality and UTF-8 characters.
#ifndef COIL_ENGINE_CHAT_JINJA_VALUE_H_
#define COIL_ENGINE_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/chat/jinja.h"

namespace coil::chat::jinja_internal {

// Errors inside the interpreter unwind the (recursive) parser and evaluator as this
// exception; Parse and Render turn it into a Status at the boundary.
struct JinjaError {
  std::string message;
};

// Throws the JinjaError for `message`, naming the template line when `line` > 0.
[[noreturn]] void Fail(int line, std::string message);

// UTF-8 code points, so that length, indexing and slicing count characters as Python
// does.
std::vector<std::string> CodePoints(const std::string& s);

// str(value) as Jinja prints it.
std::string ToText(const Value& value);
// repr(value), as Python writes it.
std::string Repr(const Value& value);
// ==, with Python's numeric equality across bool, int and float.
bool Equal(const Value& a, const Value& b);

}  // namespace coil::chat::jinja_internal

#endif  // COIL_ENGINE_CHAT_JINJA_VALUE_H_
