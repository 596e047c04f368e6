// Values (the public Value and ToJson of jinja.h) and the value helpers of jinja_value.h.
#include "engine/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/chat/jinja.h"

namespace coil::chat {

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::MakeList(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::MakeDict(Dict entries, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kDict;
  v.is_namespace_ = is_namespace;
  v.dict_ = std::make_shared<Dict>(std::move(entries));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(FromJson(item));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict entries;
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, FromJson(item));
      return MakeDict(std::move(entries));
    }
    default:
      return Value();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return is_namespace_ || !dict_->empty();
  }
  return false;
}

Value Value::Get(absl::string_view key) const {
  if (kind_ != Kind::kDict) return Value();
  for (const auto& [name, value] : *dict_) {
    if (name == key) return value;
  }
  return Value();
}

namespace {

std::string FormatFloat(double f, bool python_repr) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), f);
  std::string text(buffer, end);
  if (python_repr && text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

void AppendJsonString(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void AppendJson(const Value& value, int indent, int depth, std::string& out) {
  const std::string item_separator = indent > 0 ? "," : ", ";
  // StrCat rather than "\n" + std::string(...): GCC 12 at -O3 warns falsely (-Wrestrict)
  // on the latter once AppendJson is inlined into ToJson.
  const std::string pad =
      indent > 0 ? absl::StrCat("\n", std::string(indent * (depth + 1), ' ')) : "";
  const std::string close_pad =
      indent > 0 ? absl::StrCat("\n", std::string(indent * depth, ' ')) : "";
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += value.boolean() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(value.integer());
      return;
    case Value::Kind::kFloat:
      out += FormatFloat(value.number(), /*python_repr=*/false);
      return;
    case Value::Kind::kString:
      AppendJsonString(value.str(), out);
      return;
    case Value::Kind::kList: {
      if (value.list().empty()) {
        out += "[]";
        return;
      }
      out += "[";
      bool first = true;
      for (const Value& item : value.list()) {
        if (!first) out += item_separator;
        first = false;
        out += pad;
        AppendJson(item, indent, depth + 1, out);
      }
      out += close_pad + "]";
      return;
    }
    case Value::Kind::kDict: {
      if (value.dict().empty()) {
        out += "{}";
        return;
      }
      out += "{";
      bool first = true;
      for (const auto& [key, item] : value.dict()) {
        if (!first) out += item_separator;
        first = false;
        out += pad;
        AppendJsonString(key, out);
        out += ": ";
        AppendJson(item, indent, depth + 1, out);
      }
      out += close_pad + "}";
      return;
    }
  }
}

}  // namespace

std::string ToJson(const Value& value, int indent) {
  std::string out;
  AppendJson(value, indent, 0, out);
  return out;
}

namespace jinja_internal {

[[noreturn]] void Fail(int line, std::string message) {
  throw JinjaError{line > 0 ? absl::StrCat(message, " (template line ", line, ")") : message};
}

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// str(value) as Jinja prints it.
std::string ToText(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.boolean() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.integer());
    case Value::Kind::kFloat:
      return FormatFloat(value.number(), /*python_repr=*/true);
    case Value::Kind::kString:
      return value.str();
    default:
      return Repr(value);
  }
}

std::string Repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kString: {
      std::string out = "'";
      for (char c : value.str()) {
        if (c == '\'' || c == '\\') out += '\\';
        if (c == '\n') {
          out += "\\n";
          continue;
        }
        out += c;
      }
      return out + "'";
    }
    case Value::Kind::kList: {
      std::vector<std::string> parts;
      for (const Value& item : value.list()) parts.push_back(Repr(item));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case Value::Kind::kDict: {
      std::vector<std::string> parts;
      for (const auto& [key, item] : value.dict()) {
        parts.push_back(absl::StrCat(Repr(Value::String(key)), ": ", Repr(item)));
      }
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
    default:
      return ToText(value);
  }
}

bool Equal(const Value& a, const Value& b) {
  const bool a_num = a.kind() == Value::Kind::kInt || a.kind() == Value::Kind::kFloat ||
                     a.kind() == Value::Kind::kBool;
  const bool b_num = b.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kFloat ||
                     b.kind() == Value::Kind::kBool;
  if (a_num && b_num) {
    auto as_double = [](const Value& v) {
      return v.kind() == Value::Kind::kBool ? (v.boolean() ? 1.0 : 0.0) : v.number();
    };
    return as_double(a) == as_double(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, item] : a.dict()) {
        if (!Equal(item, b.Get(key))) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace jinja_internal
}  // namespace coil::chat
