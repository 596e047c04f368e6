// Internal to engine/chat (nothing outside engine/chat includes it). The Jinja
// interpreter's built-ins: the names of the filters, tests, functions and methods it
// implements (the parser accepts no others) and their implementations, on evaluated
// arguments; with the value conversions and the limits the evaluator shares with them.
#ifndef COIL_ENGINE_CHAT_JINJA_BUILTINS_H_
#define COIL_ENGINE_CHAT_JINJA_BUILTINS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "engine/chat/jinja.h"

namespace coil::chat::jinja_internal {

constexpr int64_t kMaxIterations = 1'000'000;
constexpr size_t kMaxOutputBytes = 64 << 20;

// The names Parse accepts.
const absl::flat_hash_set<std::string>& KnownFilters();
const absl::flat_hash_set<std::string>& KnownTests();
const absl::flat_hash_set<std::string>& KnownFunctions();
const absl::flat_hash_set<std::string>& KnownMethods();

// Numbers as Python has them, a bool counting as 0 or 1.
inline bool IsNumber(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kFloat ||
         v.kind() == Value::Kind::kBool;
}
inline double AsDouble(const Value& v) {
  return v.kind() == Value::Kind::kBool ? (v.boolean() ? 1.0 : 0.0) : v.number();
}
inline bool BothInts(const Value& a, const Value& b) {
  return (a.kind() == Value::Kind::kInt || a.kind() == Value::Kind::kBool) &&
         (b.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kBool);
}
inline int64_t AsInt(const Value& v) {
  return v.kind() == Value::Kind::kBool ? (v.boolean() ? 1 : 0) : v.integer();
}

// An integer index (a bool counts as 0 or 1); throws JinjaError otherwise.
int64_t ToIndex(const Value& value, int line);
// What a for loop (and the list filter) iterates: a list's items, a dict's keys, a
// string's characters; nothing for undefined and none.
std::vector<Value> Iterate(const Value& value, int line);
// `item in container`.
bool Contains(const Value& container, const Value& item, int line);

// Positional then keyword arguments, by parameter name.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  Value Get(size_t index, absl::string_view name) const {
    if (index < positional.size()) return positional[index];
    for (const auto& [key, value] : named) {
      if (key == name) return value;
    }
    return Value();
  }
};

// The function `name` (raise_exception, namespace, dict or range).
Value CallFunction(const std::string& name, const Args& args, int line);
// The method `m` of `object`.
Value CallMethod(const std::string& m, const Value& object, const Args& args, int line);
// `x | f(args)`.
Value ApplyFilter(const std::string& f, const Value& x, const Args& args, int line);
// `x is t(args)`, before any "not".
bool ApplyTest(const std::string& t, const Value& x, const Args& args, int line);

}  // namespace coil::chat::jinja_internal

#endif  // COIL_ENGINE_CHAT_JINJA_BUILTINS_H_
