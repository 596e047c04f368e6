#include "engine/chat/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_value.h"

namespace coil::chat::jinja_internal {
namespace {

int LineAt(absl::string_view source, size_t position) {
  return 1 + static_cast<int>(std::count(source.begin(), source.begin() + position, '\n'));
}

void AppendUtf8(uint32_t code_point, std::string& out) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

std::vector<Token> Tokenize(absl::string_view code, int line) {
  std::vector<Token> tokens;
  size_t i = 0;
  auto is_name_start = [](char c) { return absl::ascii_isalpha(c) || c == '_'; };
  while (i < code.size()) {
    const char c = code[i];
    if (absl::ascii_isspace(c)) {
      ++i;
      continue;
    }
    Token token;
    if (is_name_start(c)) {
      size_t j = i;
      while (j < code.size() && (absl::ascii_isalnum(code[j]) || code[j] == '_')) ++j;
      token.kind = TokenKind::kName;
      token.text = std::string(code.substr(i, j - i));
      i = j;
    } else if (absl::ascii_isdigit(c)) {
      size_t j = i;
      while (j < code.size() && absl::ascii_isdigit(code[j])) ++j;
      bool is_float = false;
      if (j + 1 < code.size() && code[j] == '.' && absl::ascii_isdigit(code[j + 1])) {
        is_float = true;
        ++j;
        while (j < code.size() && absl::ascii_isdigit(code[j])) ++j;
      }
      const std::string text(code.substr(i, j - i));
      if (is_float) {
        token.kind = TokenKind::kFloat;
        token.number = std::strtod(text.c_str(), nullptr);
      } else {
        token.kind = TokenKind::kInt;
        token.integer = std::strtoll(text.c_str(), nullptr, 10);
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string value;
      size_t j = i + 1;
      for (; j < code.size() && code[j] != c; ++j) {
        if (code[j] != '\\' || j + 1 >= code.size()) {
          value += code[j];
          continue;
        }
        const char e = code[++j];
        switch (e) {
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          case 'b':
            value += '\b';
            break;
          case 'f':
            value += '\f';
            break;
          case '\\':
            value += '\\';
            break;
          case '\'':
            value += '\'';
            break;
          case '"':
            value += '"';
            break;
          case 'u':
            if (j + 4 < code.size()) {
              uint32_t code_point = 0;
              const std::string hex(code.substr(j + 1, 4));
              auto [end, ec] = std::from_chars(hex.data(), hex.data() + 4, code_point, 16);
              if (ec == std::errc() && end == hex.data() + 4) {
                AppendUtf8(code_point, value);
                j += 4;
                break;
              }
            }
            [[fallthrough]];
          default:
            value += '\\';
            value += e;
        }
      }
      if (j >= code.size()) Fail(line, "a string literal is not closed");
      token.kind = TokenKind::kString;
      token.text = std::move(value);
      i = j + 1;
    } else {
      static constexpr const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
      token.kind = TokenKind::kOp;
      // assign(op, 2), every entry being two characters: `= op` draws a false -Wrestrict
      // from GCC 12 at -O3.
      for (const char* op : kTwo) {
        if (code.substr(i, 2) == op) token.text.assign(op, 2);
      }
      if (token.text.empty()) {
        if (std::string("+-*/%~<>()[]{}.,:|=").find(c) == std::string::npos) {
          Fail(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        token.text = std::string(1, c);
      }
      i += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
  tokens.push_back(Token{});
  return tokens;
}

// Where the tag that opens at `open` (just after "{{", "{%" or "{#") closes: the index of
// its closing delimiter, skipping string literals.
size_t FindClose(absl::string_view source, size_t open, char kind) {
  if (kind == '#') {
    const size_t close = source.find("#}", open);
    return close;
  }
  const char closer = kind == '{' ? '}' : '%';
  char quote = 0;
  for (size_t i = open; i + 1 < source.size(); ++i) {
    const char c = source[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == closer && source[i + 1] == '}') {
      return i;
    }
  }
  return absl::string_view::npos;
}
}  // namespace

std::vector<Segment> Lex(absl::string_view input) {
  std::string source(input);
  if (!source.empty() && source.back() == '\n') source.pop_back();  // keep_trailing_newline=False
  std::vector<Segment> segments;
  std::string text;
  bool strip_next_whitespace = false;  // the previous tag ended with "-"
  bool strip_next_newline = false;     // trim_blocks after a block or comment tag
  size_t i = 0;
  auto flush_text = [&](int line) {
    if (!text.empty()) segments.push_back(Segment{SegmentKind::kText, std::move(text), {}, line});
    text.clear();
  };
  while (i < source.size()) {
    const size_t open = source.find('{', i);
    const bool is_tag =
        open != std::string::npos && open + 1 < source.size() &&
        (source[open + 1] == '{' || source[open + 1] == '%' || source[open + 1] == '#');
    const size_t stop = open == std::string::npos ? source.size() : (is_tag ? open : open + 1);
    std::string chunk = source.substr(i, stop - i);
    if (strip_next_whitespace) {
      size_t k = 0;
      while (k < chunk.size() && absl::ascii_isspace(chunk[k])) ++k;
      chunk.erase(0, k);
      strip_next_whitespace = false;
    }
    if (strip_next_newline) {
      if (!chunk.empty() && chunk[0] == '\n') chunk.erase(0, 1);
      strip_next_newline = false;
    }
    text += chunk;
    i = stop;
    if (!is_tag) continue;
    strip_next_whitespace = false;
    const char kind = source[open + 1];
    size_t inner = open + 2;
    bool strip_before = false;
    bool keep_before = false;
    if (inner < source.size() && source[inner] == '-') {
      strip_before = true;
      ++inner;
    } else if (inner < source.size() && source[inner] == '+') {
      keep_before = true;
      ++inner;
    }
    const int line = LineAt(source, open);
    const size_t close = FindClose(source, inner, kind);
    if (close == std::string::npos) {
      Fail(line, kind == '#'
                     ? "a comment is not closed with #}"
                     : absl::StrCat("a tag is not closed with ", kind == '{' ? "}}" : "%}"));
    }
    size_t inner_end = close;
    bool strip_after = false;
    bool keep_after = false;
    if (inner_end > inner && source[inner_end - 1] == '-') {
      strip_after = true;
      --inner_end;
    } else if (inner_end > inner && source[inner_end - 1] == '+' && kind != '{') {
      keep_after = true;
      --inner_end;
    }
    // The text before the tag: "-" strips all its trailing whitespace; lstrip_blocks
    // strips the spaces and tabs between a line's start and a block or comment tag.
    if (strip_before) {
      while (!text.empty() && absl::ascii_isspace(text.back())) text.pop_back();
    } else if (kind != '{' && !keep_before) {
      size_t j = open;
      while (j > 0 && (source[j - 1] == ' ' || source[j - 1] == '\t')) --j;
      if (j == 0 || source[j - 1] == '\n') {
        while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.pop_back();
      }
    }
    flush_text(line);
    const absl::string_view body = absl::string_view(source).substr(inner, inner_end - inner);
    if (kind == '{') {
      segments.push_back(
          Segment{SegmentKind::kOutput, std::string(body), Tokenize(body, line), line});
    } else if (kind == '%') {
      segments.push_back(
          Segment{SegmentKind::kStatement, std::string(body), Tokenize(body, line), line});
    }
    i = close + 2;
    if (strip_after) strip_next_whitespace = true;
    if (kind != '{' && !strip_after && !keep_after) strip_next_newline = true;
  }
  flush_text(LineAt(source, source.size()));
  return segments;
}

}  // namespace coil::chat::jinja_internal
