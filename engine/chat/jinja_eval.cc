#include "engine/chat/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_value.h"

namespace coil::chat::jinja_internal {
namespace {

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
        return ExecuteIf(stmt);
      case StmtKind::kSet:
        return ExecuteSet(stmt);
      case StmtKind::kSetBlock:
        return ExecuteSetBlock(stmt);
      case StmtKind::kFor:
        return ExecuteFor(stmt);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow ExecuteIf(const Stmt& stmt) {
    for (size_t i = 0; i < stmt.conditions.size(); ++i) {
      if (Eval(*stmt.conditions[i]).Truthy()) return Run(stmt.branches[i]);
    }
    if (stmt.branches.size() > stmt.conditions.size()) return Run(stmt.branches.back());
    return Flow::kNormal;
  }

  Flow ExecuteSet(const Stmt& stmt) {
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

  Flow ExecuteSetBlock(const Stmt& stmt) {
    std::string saved = std::move(output);
    output.clear();
    Run(stmt.body);
    std::string captured = std::move(output);
    output = std::move(saved);
    scopes_.back()[stmt.targets[0]] = Value::String(std::move(captured));
    return Flow::kNormal;
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
      case ExprKind::kDict:
        return EvalDict(e);
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
      case ExprKind::kUnary:
        return Unary(e);
      case ExprKind::kBinary:
        return Binary(e);
      case ExprKind::kCond:
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value();
    }
    return Value();
  }

  Value EvalDict(const Expr& e) {
    Value::Dict entries;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      const Value key = Eval(*e.args[i]);
      if (key.kind() != Value::Kind::kString) Fail(e.line, "dict keys must be strings");
      entries.emplace_back(key.str(), Eval(*e.args[i + 1]));
    }
    return Value::MakeDict(std::move(entries));
  }

  Value Unary(const Expr& e) {
    const Value x = Eval(*e.args[0]);
    if (e.name == "not") return Value::Bool(!x.Truthy());
    if (x.kind() == Value::Kind::kInt)
      return Value::Int(e.name == "-" ? -x.integer() : x.integer());
    if (x.kind() == Value::Kind::kFloat)
      return Value::Float(e.name == "-" ? -x.number() : x.number());
    Fail(e.line, absl::StrCat("unary ", e.name, " needs a number, not ", Repr(x)));
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

  Args EvalArgs(const Expr& e, size_t skip) {
    Args args;
    for (size_t i = skip; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) args.named.emplace_back(key, Eval(*value));
    return args;
  }

  Value Call(const Expr& e) {
    if (!e.method) return CallFunction(e.name, EvalArgs(e, 0), e.line);
    const Value object = Eval(*e.args[0]);
    const Args args = EvalArgs(e, 1);
    return CallMethod(e.name, object, args, e.line);
  }

  Value Filter(const Expr& e) {
    const Value x = Eval(*e.args[0]);
    const Args args = EvalArgs(e, 1);
    return ApplyFilter(e.name, x, args, e.line);
  }

  bool Test(const Expr& e) {
    const Value x = Eval(*e.args[0]);
    const Args args = EvalArgs(e, 1);
    return ApplyTest(e.name, x, args, e.line);
  }

  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  int64_t iterations_ = 0;
};

}  // namespace

std::string Evaluate(const Body& body, const Value::Dict& globals) {
  Evaluator evaluator(globals);
  evaluator.Run(body);
  return std::move(evaluator.output);
}

}  // namespace coil::chat::jinja_internal
