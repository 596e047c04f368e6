#include "engine/chat/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/jinja_parser.h"
#include "engine/chat/jinja_value.h"

namespace coil::chat {
namespace {

using jinja_internal::CodePoints;
using jinja_internal::Equal;
using jinja_internal::Fail;
using jinja_internal::JinjaError;
using jinja_internal::Repr;
using jinja_internal::ToText;

using jinja_internal::Lex;
using jinja_internal::Segment;
using jinja_internal::SegmentKind;
using jinja_internal::Token;
using jinja_internal::TokenKind;

using jinja_internal::Body;
using jinja_internal::Expr;
using jinja_internal::ExprKind;
using jinja_internal::Stmt;
using jinja_internal::StmtKind;

// ---------------------------------------------------------------------------------------
// Evaluation

constexpr int64_t kMaxIterations = 1'000'000;
constexpr size_t kMaxOutputBytes = 64 << 20;

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  explicit Evaluator(const Value::Dict& globals) {
    scopes_.emplace_back();
    for (const auto& [name, value] : globals) scopes_.back()[name] = value;
  }

  std::string output;

  Flow Run(const Body& body) {
    for (const auto& stmt : body) {
      const Flow flow = Execute(*stmt);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  void Emit(const std::string& text, int line) {
    output += text;
    if (output.size() > kMaxOutputBytes) Fail(line, "the template's output passed 64 MiB");
  }

  Flow Execute(const Stmt& stmt) {
    switch (stmt.kind) {
      case StmtKind::kText:
        Emit(stmt.text, stmt.line);
        return Flow::kNormal;
      case StmtKind::kOutput:
        Emit(ToText(Eval(*stmt.expr)), stmt.line);
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < stmt.conditions.size(); ++i) {
          if (Eval(*stmt.conditions[i]).Truthy()) return Run(stmt.branches[i]);
        }
        if (stmt.branches.size() > stmt.conditions.size()) return Run(stmt.branches.back());
        return Flow::kNormal;
      case StmtKind::kSet: {
        Value value = Eval(*stmt.expr);
        if (stmt.targets.size() == 1) {
          scopes_.back()[stmt.targets[0]] = std::move(value);
          return Flow::kNormal;
        }
        const Value ns = Lookup(stmt.targets[0]);
        if (!ns.is_namespace()) {
          Fail(stmt.line, absl::StrCat("'", stmt.targets[0],
                                       "' is not a namespace(); only a "
                                       "namespace's attributes can be set"));
        }
        for (auto& [key, item] : ns.mutable_dict()) {
          if (key == stmt.targets[1]) {
            item = std::move(value);
            return Flow::kNormal;
          }
        }
        ns.mutable_dict().emplace_back(stmt.targets[1], std::move(value));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        std::string saved = std::move(output);
        output.clear();
        Run(stmt.body);
        std::string captured = std::move(output);
        output = std::move(saved);
        scopes_.back()[stmt.targets[0]] = Value::String(std::move(captured));
        return Flow::kNormal;
      }
      case StmtKind::kFor:
        return ExecuteFor(stmt);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  std::vector<Value> Iterate(const Value& value, int line) {
    switch (value.kind()) {
      case Value::Kind::kList:
        return value.list();
      case Value::Kind::kDict: {
        std::vector<Value> keys;
        for (const auto& [key, item] : value.dict()) keys.push_back(Value::String(key));
        return keys;
      }
      case Value::Kind::kString: {
        std::vector<Value> chars;
        for (std::string& c : CodePoints(value.str())) chars.push_back(Value::String(std::move(c)));
        return chars;
      }
      case Value::Kind::kUndefined:
      case Value::Kind::kNone:
        return {};
      default:
        Fail(line, absl::StrCat("cannot loop over ", Repr(value)));
    }
  }

  void Bind(const std::vector<std::string>& targets, const Value& item, int line) {
    auto& scope = scopes_.back();
    if (targets.size() == 1) {
      scope[targets[0]] = item;
      return;
    }
    if (item.kind() != Value::Kind::kList || item.list().size() != targets.size()) {
      Fail(line, absl::StrCat("cannot unpack ", Repr(item), " into ", targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = item.list()[i];
  }

  Flow ExecuteFor(const Stmt& stmt) {
    std::vector<Value> items = Iterate(Eval(*stmt.expr), stmt.line);
    if (stmt.filter != nullptr) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        Bind(stmt.targets, item, stmt.line);
        const bool keep = Eval(*stmt.filter).Truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Run(stmt.else_body);
      return Flow::kNormal;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxIterations)
        Fail(stmt.line, "the template looped more than a million times");
      scopes_.emplace_back();
      Value::Dict loop = {{"index", Value::Int(i + 1)},
                          {"index0", Value::Int(i)},
                          {"revindex", Value::Int(n - i)},
                          {"revindex0", Value::Int(n - i - 1)},
                          {"first", Value::Bool(i == 0)},
                          {"last", Value::Bool(i == n - 1)},
                          {"length", Value::Int(n)},
                          {"previtem", i > 0 ? items[i - 1] : Value()},
                          {"nextitem", i + 1 < n ? items[i + 1] : Value()}};
      scopes_.back()["loop"] = Value::MakeDict(std::move(loop));
      Bind(stmt.targets, items[i], stmt.line);
      const Flow flow = Run(stmt.body);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  static int64_t ToIndex(const Value& value, int line) {
    if (value.kind() == Value::Kind::kInt) return value.integer();
    if (value.kind() == Value::Kind::kBool) return value.boolean() ? 1 : 0;
    Fail(line, absl::StrCat("an index must be an integer, not ", Repr(value)));
  }

  Value Index(const Value& object, const Value& key, int line) {
    switch (object.kind()) {
      case Value::Kind::kDict:
        if (key.kind() == Value::Kind::kString) return object.Get(key.str());
        return Value();
      case Value::Kind::kList: {
        int64_t i = ToIndex(key, line);
        const int64_t n = static_cast<int64_t>(object.list().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        return object.list()[i];
      }
      case Value::Kind::kString: {
        const std::vector<std::string> chars = CodePoints(object.str());
        int64_t i = ToIndex(key, line);
        const int64_t n = static_cast<int64_t>(chars.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        return Value::String(chars[i]);
      }
      default:
        return Value();
    }
  }

  Value Slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v,
              int line) {
    std::vector<Value> items;
    bool is_string = false;
    if (object.kind() == Value::Kind::kList) {
      items = object.list();
    } else if (object.kind() == Value::Kind::kString) {
      is_string = true;
      for (std::string& c : CodePoints(object.str())) items.push_back(Value::String(std::move(c)));
    } else {
      Fail(line, absl::StrCat("cannot slice ", Repr(object)));
    }
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t step =
        step_v.is_undefined() || step_v.kind() == Value::Kind::kNone ? 1 : ToIndex(step_v, line);
    if (step == 0) Fail(line, "a slice step cannot be zero");
    auto clamp = [&](const Value& v, int64_t fallback) {
      if (v.is_undefined() || v.kind() == Value::Kind::kNone) return fallback;
      int64_t i = ToIndex(v, line);
      if (i < 0) i += n;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = clamp(start_v, step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(stop_v, step > 0 ? n : -1);
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(items[i]);
    if (!is_string) return Value::MakeList(std::move(out));
    std::string text;
    for (const Value& c : out) text += c.str();
    return Value::String(std::move(text));
  }

  Value Eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName:
        return Lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        Value::List items;
        for (const auto& arg : e.args) items.push_back(Eval(*arg));
        return Value::MakeList(std::move(items));
      }
      case ExprKind::kDict: {
        Value::Dict entries;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = Eval(*e.args[i]);
          if (key.kind() != Value::Kind::kString) Fail(e.line, "dict keys must be strings");
          entries.emplace_back(key.str(), Eval(*e.args[i + 1]));
        }
        return Value::MakeDict(std::move(entries));
      }
      case ExprKind::kAttr:
        return Index(Eval(*e.args[0]), Value::String(e.name), e.line);
      case ExprKind::kIndex:
        return Index(Eval(*e.args[0]), Eval(*e.args[1]), e.line);
      case ExprKind::kSlice: {
        auto part = [&](int i) { return e.args[i] ? Eval(*e.args[i]) : Value(); };
        return Slice(Eval(*e.args[0]), part(1), part(2), part(3), e.line);
      }
      case ExprKind::kCall:
        return Call(e);
      case ExprKind::kFilter:
        return Filter(e);
      case ExprKind::kTest: {
        const bool result = Test(e);
        return Value::Bool(e.negated ? !result : result);
      }
      case ExprKind::kUnary: {
        const Value x = Eval(*e.args[0]);
        if (e.name == "not") return Value::Bool(!x.Truthy());
        if (x.kind() == Value::Kind::kInt)
          return Value::Int(e.name == "-" ? -x.integer() : x.integer());
        if (x.kind() == Value::Kind::kFloat)
          return Value::Float(e.name == "-" ? -x.number() : x.number());
        Fail(e.line, absl::StrCat("unary ", e.name, " needs a number, not ", Repr(x)));
      }
      case ExprKind::kBinary:
        return Binary(e);
      case ExprKind::kCond:
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value();
    }
    return Value();
  }

  static bool IsNumber(const Value& v) {
    return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kFloat ||
           v.kind() == Value::Kind::kBool;
  }
  static double AsDouble(const Value& v) {
    return v.kind() == Value::Kind::kBool ? (v.boolean() ? 1.0 : 0.0) : v.number();
  }
  static bool BothInts(const Value& a, const Value& b) {
    return (a.kind() == Value::Kind::kInt || a.kind() == Value::Kind::kBool) &&
           (b.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kBool);
  }
  static int64_t AsInt(const Value& v) {
    return v.kind() == Value::Kind::kBool ? (v.boolean() ? 1 : 0) : v.integer();
  }

  bool Contains(const Value& container, const Value& item, int line) {
    switch (container.kind()) {
      case Value::Kind::kString:
        if (item.kind() != Value::Kind::kString) Fail(line, "'in <string>' needs a string");
        return absl::StrContains(container.str(), item.str());
      case Value::Kind::kList:
        return std::any_of(container.list().begin(), container.list().end(),
                           [&](const Value& v) { return Equal(v, item); });
      case Value::Kind::kDict:
        return item.kind() == Value::Kind::kString && !container.Get(item.str()).is_undefined();
      case Value::Kind::kUndefined:
        return false;
      default:
        Fail(line, absl::StrCat("'in' needs a string, list or dict, not ", Repr(container)));
    }
  }

  Value Binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? Eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? a : Eval(*e.args[1]);
    }
    const Value a = Eval(*e.args[0]);
    const Value b = Eval(*e.args[1]);
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "in") return Value::Bool(Contains(b, a, e.line));
    if (op == "~") return Value::String(ToText(a) + ToText(b));
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int order = 0;
      if (IsNumber(a) && IsNumber(b)) {
        order = AsDouble(a) < AsDouble(b) ? -1 : AsDouble(a) > AsDouble(b) ? 1 : 0;
      } else if (a.kind() == Value::Kind::kString && b.kind() == Value::Kind::kString) {
        order = a.str().compare(b.str());
      } else {
        Fail(e.line, absl::StrCat("cannot compare ", Repr(a), " and ", Repr(b)));
      }
      if (op == "<") return Value::Bool(order < 0);
      if (op == "<=") return Value::Bool(order <= 0);
      if (op == ">") return Value::Bool(order > 0);
      return Value::Bool(order >= 0);
    }
    if (op == "+") {
      if (a.kind() == Value::Kind::kString && b.kind() == Value::Kind::kString) {
        return Value::String(a.str() + b.str());
      }
      if (a.kind() == Value::Kind::kList && b.kind() == Value::Kind::kList) {
        Value::List items = a.list();
        items.insert(items.end(), b.list().begin(), b.list().end());
        return Value::MakeList(std::move(items));
      }
    }
    if (op == "*" && a.kind() == Value::Kind::kString && b.kind() == Value::Kind::kInt) {
      std::string out;
      for (int64_t i = 0; i < b.integer() && out.size() < kMaxOutputBytes; ++i) out += a.str();
      return Value::String(std::move(out));
    }
    if (!IsNumber(a) || !IsNumber(b)) {
      Fail(e.line,
           absl::StrCat("unsupported operand types for ", op, ": ", Repr(a), " and ", Repr(b)));
    }
    if (BothInts(a, b) && op != "/" && op != "**") {
      const int64_t x = AsInt(a);
      const int64_t y = AsInt(b);
      if (op == "+") return Value::Int(x + y);
      if (op == "-") return Value::Int(x - y);
      if (op == "*") return Value::Int(x * y);
      if (y == 0) Fail(e.line, "division by zero");
      if (op == "//") return Value::Int(x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0));
      if (op == "%") {
        const int64_t r = x % y;
        return Value::Int(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
      }
    }
    const double x = AsDouble(a);
    const double y = AsDouble(b);
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "**") {
      const double p = std::pow(x, y);
      if (BothInts(a, b) && AsInt(b) >= 0) return Value::Int(static_cast<int64_t>(p));
      return Value::Float(p);
    }
    if (y == 0.0) Fail(e.line, "division by zero");
    if (op == "/") return Value::Float(x / y);
    if (op == "//") return Value::Float(std::floor(x / y));
    return Value::Float(x - y * std::floor(x / y));  // %
  }

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
  Args EvalArgs(const Expr& e, size_t skip) {
    Args args;
    for (size_t i = skip; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) args.named.emplace_back(key, Eval(*value));
    return args;
  }

  static std::string StripChars(const std::string& s, const Value& chars, bool left, bool right) {
    auto strip = [&](char c) {
      if (chars.kind() == Value::Kind::kString) return chars.str().find(c) != std::string::npos;
      return absl::ascii_isspace(c);
    };
    size_t begin = 0;
    size_t end = s.size();
    if (left) {
      while (begin < end && strip(s[begin])) ++begin;
    }
    if (right) {
      while (end > begin && strip(s[end - 1])) --end;
    }
    return s.substr(begin, end - begin);
  }

  static std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                             int64_t count) {
    if (from.empty()) return s;
    std::string out;
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
      const size_t found = s.find(from, pos);
      if (found == std::string::npos) break;
      out.append(s, pos, found - pos);
      out += to;
      pos = found + from.size();
      ++done;
    }
    out.append(s, pos, std::string::npos);
    return out;
  }

  static std::string Title(const std::string& s, bool only_first) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
      if (absl::ascii_isalpha(c)) {
        c = start ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
        start = false;
      } else if (!only_first) {
        start = true;
      }
    }
    return out;
  }

  static std::string ExpectString(const Value& v, const std::string& what, int line) {
    if (v.kind() != Value::Kind::kString) {
      Fail(line, absl::StrCat(what, " needs a string, not ", Repr(v)));
    }
    return v.str();
  }

  Value Call(const Expr& e) {
    if (!e.method) return CallFunction(e);
    const Value object = Eval(*e.args[0]);
    const Args args = EvalArgs(e, 1);
    const std::string& m = e.name;
    if (object.kind() == Value::Kind::kDict) {
      if (m == "items") {
        Value::List items;
        for (const auto& [key, value] : object.dict()) {
          items.push_back(Value::MakeList({Value::String(key), value}));
        }
        return Value::MakeList(std::move(items));
      }
      if (m == "keys" || m == "values") {
        Value::List items;
        for (const auto& [key, value] : object.dict()) {
          items.push_back(m == "keys" ? Value::String(key) : value);
        }
        return Value::MakeList(std::move(items));
      }
      if (m == "get") {
        const Value key = args.Get(0, "key");
        const Value found = key.kind() == Value::Kind::kString ? object.Get(key.str()) : Value();
        if (!found.is_undefined()) return found;
        const Value fallback = args.Get(1, "default");
        return fallback.is_undefined() ? Value::None() : fallback;
      }
    }
    if (object.kind() == Value::Kind::kString) {
      const std::string& s = object.str();
      if (m == "strip") return Value::String(StripChars(s, args.Get(0, "chars"), true, true));
      if (m == "lstrip") return Value::String(StripChars(s, args.Get(0, "chars"), true, false));
      if (m == "rstrip") return Value::String(StripChars(s, args.Get(0, "chars"), false, true));
      if (m == "upper") return Value::String(absl::AsciiStrToUpper(s));
      if (m == "lower") return Value::String(absl::AsciiStrToLower(s));
      if (m == "title") return Value::String(Title(s, false));
      if (m == "capitalize") return Value::String(Title(absl::AsciiStrToLower(s), true));
      if (m == "startswith" || m == "endswith") {
        const Value arg = args.Get(0, "prefix");
        std::vector<std::string> options;
        if (arg.kind() == Value::Kind::kList) {
          for (const Value& v : arg.list()) options.push_back(ExpectString(v, m, e.line));
        } else {
          options.push_back(ExpectString(arg, m, e.line));
        }
        for (const std::string& option : options) {
          if (m == "startswith" ? absl::StartsWith(s, option) : absl::EndsWith(s, option)) {
            return Value::Bool(true);
          }
        }
        return Value::Bool(false);
      }
      if (m == "replace") {
        const Value count = args.Get(2, "count");
        return Value::String(Replace(s, ExpectString(args.Get(0, "old"), m, e.line),
                                     ExpectString(args.Get(1, "new"), m, e.line),
                                     count.kind() == Value::Kind::kInt ? count.integer() : -1));
      }
      if (m == "split") {
        const Value sep = args.Get(0, "sep");
        const Value max_split_v = args.Get(1, "maxsplit");
        int64_t max_split = max_split_v.kind() == Value::Kind::kInt ? max_split_v.integer() : -1;
        Value::List parts;
        if (sep.is_undefined() || sep.kind() == Value::Kind::kNone) {
          size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && absl::ascii_isspace(s[i])) ++i;
            if (i >= s.size()) break;
            if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
              parts.push_back(Value::String(StripChars(s.substr(i), Value(), false, true)));
              break;
            }
            size_t j = i;
            while (j < s.size() && !absl::ascii_isspace(s[j])) ++j;
            parts.push_back(Value::String(s.substr(i, j - i)));
            i = j;
          }
          return Value::MakeList(std::move(parts));
        }
        const std::string separator = ExpectString(sep, m, e.line);
        if (separator.empty()) Fail(e.line, "split() got an empty separator");
        size_t pos = 0;
        for (;;) {
          const size_t found = s.find(separator, pos);
          if (found == std::string::npos ||
              (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split)) {
            parts.push_back(Value::String(s.substr(pos)));
            break;
          }
          parts.push_back(Value::String(s.substr(pos, found - pos)));
          pos = found + separator.size();
        }
        return Value::MakeList(std::move(parts));
      }
    }
    Fail(e.line, absl::StrCat("cannot call ", m, "() on ", Repr(object)));
  }

  Value CallFunction(const Expr& e) {
    const Args args = EvalArgs(e, 0);
    if (e.name == "raise_exception") {
      throw JinjaError{absl::StrCat("the chat template refused the conversation: ",
                                    ToText(args.Get(0, "message")))};
    }
    if (e.name == "namespace" || e.name == "dict") {
      Value::Dict entries;
      for (const auto& [key, value] : args.named) entries.emplace_back(key, value);
      return Value::MakeDict(std::move(entries), e.name == "namespace");
    }
    // range
    int64_t start = 0;
    int64_t stop = 0;
    int64_t step = 1;
    if (args.positional.size() == 1) {
      stop = ToIndex(args.positional[0], e.line);
    } else if (args.positional.size() >= 2) {
      start = ToIndex(args.positional[0], e.line);
      stop = ToIndex(args.positional[1], e.line);
      if (args.positional.size() >= 3) step = ToIndex(args.positional[2], e.line);
    }
    if (step == 0) Fail(e.line, "range() step cannot be zero");
    Value::List items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(items.size()) >= kMaxIterations) Fail(e.line, "range() is too long");
      items.push_back(Value::Int(i));
    }
    return Value::MakeList(std::move(items));
  }

  static int64_t Length(const Value& v) {
    switch (v.kind()) {
      case Value::Kind::kString:
        return static_cast<int64_t>(CodePoints(v.str()).size());
      case Value::Kind::kList:
        return static_cast<int64_t>(v.list().size());
      case Value::Kind::kDict:
        return static_cast<int64_t>(v.dict().size());
      default:
        return 0;
    }
  }

  Value Filter(const Expr& e) {
    const Value x = Eval(*e.args[0]);
    const Args args = EvalArgs(e, 1);
    const std::string& f = e.name;
    if (f == "default" || f == "d") {
      const bool boolean = args.Get(1, "boolean").Truthy();
      if (x.is_undefined() || (boolean && !x.Truthy())) {
        const Value fallback = args.Get(0, "default_value");
        return fallback.is_undefined() ? Value::String("") : fallback;
      }
      return x;
    }
    if (f == "tojson") {
      const Value indent = args.Get(0, "indent");
      return Value::String(ToJson(x, indent.kind() == Value::Kind::kInt ? indent.integer() : 0));
    }
    if (f == "length" || f == "count") return Value::Int(Length(x));
    if (f == "string") return Value::String(ToText(x));
    if (f == "first" || f == "last") {
      if (x.kind() == Value::Kind::kList) {
        if (x.list().empty()) return Value();
        return f == "first" ? x.list().front() : x.list().back();
      }
      if (x.kind() == Value::Kind::kString) {
        const auto chars = CodePoints(x.str());
        if (chars.empty()) return Value();
        return Value::String(f == "first" ? chars.front() : chars.back());
      }
      Fail(e.line, absl::StrCat("the filter ", f, " needs a list or string, not ", Repr(x)));
    }
    if (f == "list") return Value::MakeList(Iterate(x, e.line));
    if (f == "items") {
      if (x.kind() != Value::Kind::kDict) Fail(e.line, "the filter items needs a dict");
      Value::List items;
      for (const auto& [key, value] : x.dict()) {
        items.push_back(Value::MakeList({Value::String(key), value}));
      }
      return Value::MakeList(std::move(items));
    }
    if (f == "join") {
      const Value sep = args.Get(0, "d");
      std::vector<std::string> parts;
      for (const Value& item : Iterate(x, e.line)) parts.push_back(ToText(item));
      return Value::String(
          absl::StrJoin(parts, sep.kind() == Value::Kind::kString ? sep.str() : ""));
    }
    if (f == "int") {
      if (x.kind() == Value::Kind::kInt) return x;
      if (x.kind() == Value::Kind::kFloat) return Value::Int(static_cast<int64_t>(x.number()));
      if (x.kind() == Value::Kind::kString)
        return Value::Int(std::strtoll(x.str().c_str(), nullptr, 10));
      return Value::Int(0);
    }
    if (f == "float") {
      if (IsNumber(x)) return Value::Float(AsDouble(x));
      if (x.kind() == Value::Kind::kString)
        return Value::Float(std::strtod(x.str().c_str(), nullptr));
      return Value::Float(0.0);
    }
    if (f == "abs") {
      if (x.kind() == Value::Kind::kInt)
        return Value::Int(x.integer() < 0 ? -x.integer() : x.integer());
      if (x.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(x.number()));
      Fail(e.line, "the filter abs needs a number");
    }
    // String filters.
    const std::string s = ExpectString(x.is_undefined() ? Value::String("") : x,
                                       absl::StrCat("the filter ", f), e.line);
    if (f == "trim") return Value::String(StripChars(s, args.Get(0, "chars"), true, true));
    if (f == "upper") return Value::String(absl::AsciiStrToUpper(s));
    if (f == "lower") return Value::String(absl::AsciiStrToLower(s));
    if (f == "capitalize") return Value::String(Title(absl::AsciiStrToLower(s), true));
    if (f == "title") return Value::String(Title(s, false));
    if (f == "replace") {
      const Value count = args.Get(2, "count");
      return Value::String(Replace(s, ExpectString(args.Get(0, "old"), f, e.line),
                                   ExpectString(args.Get(1, "new"), f, e.line),
                                   count.kind() == Value::Kind::kInt ? count.integer() : -1));
    }
    Fail(e.line, absl::StrCat("the filter ", f, " is not implemented"));
  }

  bool Test(const Expr& e) {
    const Value x = Eval(*e.args[0]);
    const Args args = EvalArgs(e, 1);
    const std::string& t = e.name;
    if (t == "defined") return !x.is_undefined();
    if (t == "undefined") return x.is_undefined();
    if (t == "none") return x.kind() == Value::Kind::kNone;
    if (t == "boolean") return x.kind() == Value::Kind::kBool;
    if (t == "true") return x.kind() == Value::Kind::kBool && x.boolean();
    if (t == "false") return x.kind() == Value::Kind::kBool && !x.boolean();
    if (t == "string") return x.kind() == Value::Kind::kString;
    if (t == "number") return x.kind() == Value::Kind::kInt || x.kind() == Value::Kind::kFloat;
    if (t == "integer") return x.kind() == Value::Kind::kInt;
    if (t == "float") return x.kind() == Value::Kind::kFloat;
    if (t == "mapping") return x.kind() == Value::Kind::kDict;
    if (t == "iterable") {
      return x.kind() == Value::Kind::kList || x.kind() == Value::Kind::kDict ||
             x.kind() == Value::Kind::kString;
    }
    if (t == "sequence") {
      return x.kind() == Value::Kind::kList || x.kind() == Value::Kind::kString ||
             x.kind() == Value::Kind::kDict;
    }
    if (t == "odd" || t == "even") {
      if (x.kind() != Value::Kind::kInt)
        Fail(e.line, absl::StrCat("'is ", t, "' needs an integer"));
      return (x.integer() % 2 != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      const Value n = args.Get(0, "num");
      if (x.kind() != Value::Kind::kInt || n.kind() != Value::Kind::kInt || n.integer() == 0) {
        Fail(e.line, "'is divisibleby' needs integers");
      }
      return x.integer() % n.integer() == 0;
    }
    if (t == "eq" || t == "equalto") return Equal(x, args.Get(0, "other"));
    if (t == "ne") return !Equal(x, args.Get(0, "other"));
    if (t == "in") return Contains(args.Get(0, "seq"), x, e.line);
    Fail(e.line, absl::StrCat("the test ", t, " is not implemented"));
  }

  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  int64_t iterations_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(absl::string_view source) {
  try {
    auto root = std::make_shared<Node>();
    root->body = jinja_internal::ParseSegments(Lex(source));
    return Template(std::move(root));
  } catch (const JinjaError& error) {
    return absl::InvalidArgumentError(error.message);
  }
}

absl::StatusOr<std::string> Template::Render(const Value::Dict& variables) const {
  try {
    Evaluator evaluator(variables);
    evaluator.Run(root_->body);
    return std::move(evaluator.output);
  } catch (const JinjaError& error) {
    return absl::InvalidArgumentError(error.message);
  }
}

}  // namespace coil::chat
