// A small Jinja interpreter for chat templates: the subset that real chat templates use
// (text, {{ }} output, {% if/elif/else %}, {% for %} with loop.*, {% set %} and namespace(),
// expressions, tests, string and dict methods, a fixed list of filters, raise_exception),
// with the options Hugging Face renders chat templates with (trim_blocks, lstrip_blocks, no
// trailing newline). Invariant: Parse accepts a template only if every statement, filter,
// test, function and method name in it is one Render implements, so a template that loads
// never fails later for an unknown construct; it fails at render only for what the data
// decides (raise_exception, a type error, a loop that runs too long).
#ifndef COIL_ENGINE_CHAT_JINJA_H_
#define COIL_ENGINE_CHAT_JINJA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace coil::chat {

// A Jinja value. Lists and dicts are shared (a namespace is a dict that `set ns.x` mutates
// in place); everything else is copied.
class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as JSON objects

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items);
  static Value MakeDict(Dict entries, bool is_namespace = false);
  // JSON null becomes none; objects keep their key order.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_namespace() const { return is_namespace_; }
  bool boolean() const { return b_; }
  int64_t integer() const { return i_; }
  double number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
  const std::string& str() const { return s_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_dict() const { return *dict_; }

  // Python truthiness.
  bool Truthy() const;
  // The member `key` of a dict (undefined when absent or not a dict).
  Value Get(absl::string_view key) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool is_namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
};

struct Node;  // the parsed template (jinja_ast.h)

class Template {
 public:
  // Parses `source`. INVALID_ARGUMENT names the construct that is not supported or the
  // syntax error, with its line.
  static absl::StatusOr<Template> Parse(absl::string_view source);

  // Renders with `variables` as the global scope. INVALID_ARGUMENT carries
  // raise_exception's message or the error (with its line).
  absl::StatusOr<std::string> Render(const Value::Dict& variables) const;

 private:
  explicit Template(std::shared_ptr<const Node> root) : root_(std::move(root)) {}
  std::shared_ptr<const Node> root_;
};

// JSON as Python's json.dumps(ensure_ascii=False) writes it (", " and ": " separators, or
// "," and ": " with an indent): what the `tojson` filter returns.
std::string ToJson(const Value& value, int indent = 0);

}  // namespace coil::chat

#endif  // COIL_ENGINE_CHAT_JINJA_H_
