#include "engine/chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/chat/jinja_value.h"

namespace coil::chat::jinja_internal {
namespace {

std::string StripChars(const std::string& s, const Value& chars, bool left, bool right) {
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

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
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

std::string Title(const std::string& s, bool only_first) {
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

std::string ExpectString(const Value& v, const std::string& what, int line) {
  if (v.kind() != Value::Kind::kString) {
    Fail(line, absl::StrCat(what, " needs a string, not ", Repr(v)));
  }
  return v.str();
}

int64_t Length(const Value& v) {
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

}  // namespace

const absl::flat_hash_set<std::string>& KnownFilters() {
  static const auto* filters = new absl::flat_hash_set<std::string>{
      "trim",  "tojson", "length",     "count",   "first", "last",   "join",
      "upper", "lower",  "replace",    "default", "d",     "string", "list",
      "int",   "float",  "capitalize", "title",   "items", "abs"};
  return *filters;
}
const absl::flat_hash_set<std::string>& KnownTests() {
  static const auto* tests = new absl::flat_hash_set<std::string>{
      "defined", "undefined",   "none",  "boolean", "true",     "false",    "string",
      "number",  "integer",     "float", "mapping", "iterable", "sequence", "odd",
      "even",    "divisibleby", "eq",    "equalto", "ne",       "in"};
  return *tests;
}
const absl::flat_hash_set<std::string>& KnownFunctions() {
  static const auto* functions =
      new absl::flat_hash_set<std::string>{"raise_exception", "namespace", "range", "dict"};
  return *functions;
}
const absl::flat_hash_set<std::string>& KnownMethods() {
  static const auto* methods = new absl::flat_hash_set<std::string>{
      "strip",   "lstrip", "rstrip",     "split", "startswith", "endswith", "upper", "lower",
      "replace", "title",  "capitalize", "items", "keys",       "values",   "get"};
  return *methods;
}

int64_t ToIndex(const Value& value, int line) {
  if (value.kind() == Value::Kind::kInt) return value.integer();
  if (value.kind() == Value::Kind::kBool) return value.boolean() ? 1 : 0;
  Fail(line, absl::StrCat("an index must be an integer, not ", Repr(value)));
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

Value CallMethod(const std::string& m, const Value& object, const Args& args, int line) {
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
        for (const Value& v : arg.list()) options.push_back(ExpectString(v, m, line));
      } else {
        options.push_back(ExpectString(arg, m, line));
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
      return Value::String(Replace(s, ExpectString(args.Get(0, "old"), m, line),
                                   ExpectString(args.Get(1, "new"), m, line),
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
      const std::string separator = ExpectString(sep, m, line);
      if (separator.empty()) Fail(line, "split() got an empty separator");
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
  Fail(line, absl::StrCat("cannot call ", m, "() on ", Repr(object)));
}

Value CallFunction(const std::string& name, const Args& args, int line) {
  if (name == "raise_exception") {
    throw JinjaError{absl::StrCat("the chat template refused the conversation: ",
                                  ToText(args.Get(0, "message")))};
  }
  if (name == "namespace" || name == "dict") {
    Value::Dict entries;
    for (const auto& [key, value] : args.named) entries.emplace_back(key, value);
    return Value::MakeDict(std::move(entries), name == "namespace");
  }
  // range
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (args.positional.size() == 1) {
    stop = ToIndex(args.positional[0], line);
  } else if (args.positional.size() >= 2) {
    start = ToIndex(args.positional[0], line);
    stop = ToIndex(args.positional[1], line);
    if (args.positional.size() >= 3) step = ToIndex(args.positional[2], line);
  }
  if (step == 0) Fail(line, "range() step cannot be zero");
  Value::List items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxIterations) Fail(line, "range() is too long");
    items.push_back(Value::Int(i));
  }
  return Value::MakeList(std::move(items));
}

Value ApplyFilter(const std::string& f, const Value& x, const Args& args, int line) {
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
    Fail(line, absl::StrCat("the filter ", f, " needs a list or string, not ", Repr(x)));
  }
  if (f == "list") return Value::MakeList(Iterate(x, line));
  if (f == "items") {
    if (x.kind() != Value::Kind::kDict) Fail(line, "the filter items needs a dict");
    Value::List items;
    for (const auto& [key, value] : x.dict()) {
      items.push_back(Value::MakeList({Value::String(key), value}));
    }
    return Value::MakeList(std::move(items));
  }
  if (f == "join") {
    const Value sep = args.Get(0, "d");
    std::vector<std::string> parts;
    for (const Value& item : Iterate(x, line)) parts.push_back(ToText(item));
    return Value::String(absl::StrJoin(parts, sep.kind() == Value::Kind::kString ? sep.str() : ""));
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
    Fail(line, "the filter abs needs a number");
  }
  // String filters.
  const std::string s =
      ExpectString(x.is_undefined() ? Value::String("") : x, absl::StrCat("the filter ", f), line);
  if (f == "trim") return Value::String(StripChars(s, args.Get(0, "chars"), true, true));
  if (f == "upper") return Value::String(absl::AsciiStrToUpper(s));
  if (f == "lower") return Value::String(absl::AsciiStrToLower(s));
  if (f == "capitalize") return Value::String(Title(absl::AsciiStrToLower(s), true));
  if (f == "title") return Value::String(Title(s, false));
  if (f == "replace") {
    const Value count = args.Get(2, "count");
    return Value::String(Replace(s, ExpectString(args.Get(0, "old"), f, line),
                                 ExpectString(args.Get(1, "new"), f, line),
                                 count.kind() == Value::Kind::kInt ? count.integer() : -1));
  }
  Fail(line, absl::StrCat("the filter ", f, " is not implemented"));
}

bool ApplyTest(const std::string& t, const Value& x, const Args& args, int line) {
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
    if (x.kind() != Value::Kind::kInt) Fail(line, absl::StrCat("'is ", t, "' needs an integer"));
    return (x.integer() % 2 != 0) == (t == "odd");
  }
  if (t == "divisibleby") {
    const Value n = args.Get(0, "num");
    if (x.kind() != Value::Kind::kInt || n.kind() != Value::Kind::kInt || n.integer() == 0) {
      Fail(line, "'is divisibleby' needs integers");
    }
    return x.integer() % n.integer() == 0;
  }
  if (t == "eq" || t == "equalto") return Equal(x, args.Get(0, "other"));
  if (t == "ne") return !Equal(x, args.Get(0, "other"));
  if (t == "in") return Contains(args.Get(0, "seq"), x, line);
  Fail(line, absl::StrCat("the test ", t, " is not implemented"));
}

}  // namespace coil::chat::jinja_internal
