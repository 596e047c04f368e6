#include "engine/chat/jinja_parser.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_value.h"

namespace coil::chat::jinja_internal {
namespace {

// Statements that real templates sometimes use and this interpreter does not implement.
const absl::flat_hash_set<std::string>& UnsupportedStatements() {
  static const auto* statements = new absl::flat_hash_set<std::string>{
      "macro", "call", "filter", "block",      "extends", "include", "import",
      "from",  "with", "raw",    "autoescape", "do",      "trans"};
  return *statements;
}

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, int line) : tokens_(tokens), line_(line) {}

  ExprPtr ParseExpression() {
    ExprPtr value = ParseOr();
    if (PeekName("if")) {
      Next();
      auto cond = std::make_shared<Expr>();
      cond->kind = ExprKind::kCond;
      cond->line = line_;
      ExprPtr test = ParseOr();
      ExprPtr otherwise;
      if (PeekName("else")) {
        Next();
        otherwise = ParseExpression();
      }
      cond->args = {value, test, otherwise};
      return cond;
    }
    return value;
  }

  // A comma-separated list of expressions without brackets is a tuple (for x in a, b).
  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (PeekName("or")) {
      Next();
      left = Binary("or", left, ParseAnd());
    }
    return left;
  }

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool PeekName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  bool PeekOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOp && Peek(ahead).text == op;
  }
  const Token& Next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool AtEnd() const { return Peek().kind == TokenKind::kEnd; }
  void ExpectOp(absl::string_view op) {
    if (!PeekOp(op)) Fail(line_, absl::StrCat("expected '", op, "', found ", Describe(Peek())));
    Next();
  }
  std::string ExpectName() {
    if (Peek().kind != TokenKind::kName) {
      Fail(line_, absl::StrCat("expected a name, found ", Describe(Peek())));
    }
    return Next().text;
  }
  void ExpectEnd() {
    if (!AtEnd()) Fail(line_, absl::StrCat("unexpected ", Describe(Peek())));
  }
  static std::string Describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kEnd:
        return "the end of the tag";
      case TokenKind::kString:
        return absl::StrCat("string '", token.text, "'");
      default:
        return absl::StrCat("'", token.text.empty() ? std::to_string(token.integer) : token.text,
                            "'");
    }
  }

 private:
  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::kBinary;
    e->line = line_;
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }
  ExprPtr Unary(const std::string& op, ExprPtr a) {
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::kUnary;
    e->line = line_;
    e->name = op;
    e->args = {std::move(a)};
    return e;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (PeekName("and")) {
      Next();
      left = Binary("and", left, ParseNot());
    }
    return left;
  }
  ExprPtr ParseNot() {
    if (PeekName("not")) {
      Next();
      return Unary("not", ParseNot());
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr left = ParseMath1();
    for (;;) {
      const Token& t = Peek();
      if (t.kind == TokenKind::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                       t.text == "<=" || t.text == ">" || t.text == ">=")) {
        const std::string op = Next().text;
        left = Binary(op, left, ParseMath1());
      } else if (PeekName("in")) {
        Next();
        left = Binary("in", left, ParseMath1());
      } else if (PeekName("not") && PeekName("in", 1)) {
        Next();
        Next();
        left = Unary("not", Binary("in", left, ParseMath1()));
      } else {
        return left;
      }
    }
  }
  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (PeekOp("+") || PeekOp("-")) {
      const std::string op = Next().text;
      left = Binary(op, left, ParseConcat());
    }
    return left;
  }
  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (PeekOp("~")) {
      Next();
      left = Binary("~", left, ParseMath2());
    }
    return left;
  }
  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%")) {
      const std::string op = Next().text;
      left = Binary(op, left, ParsePow());
    }
    return left;
  }
  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (PeekOp("**")) {
      Next();
      left = Binary("**", left, ParseUnary(true));
    }
    return left;
  }
  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr node;
    if (PeekOp("-") || PeekOp("+")) {
      const std::string op = Next().text;
      node = Unary(op, ParseUnary(false));
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    if (with_filter) node = ParseFilterAndTests(node);
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token token = Next();
    auto e = std::make_shared<Expr>();
    e->line = line_;
    switch (token.kind) {
      case TokenKind::kName:
        if (token.text == "true" || token.text == "True") {
          e->literal = Value::Bool(true);
        } else if (token.text == "false" || token.text == "False") {
          e->literal = Value::Bool(false);
        } else if (token.text == "none" || token.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = token.text;
        }
        return e;
      case TokenKind::kString: {
        std::string text = token.text;
        while (Peek().kind == TokenKind::kString) text += Next().text;  // "a" "b"
        e->literal = Value::String(std::move(text));
        return e;
      }
      case TokenKind::kInt:
        e->literal = Value::Int(token.integer);
        return e;
      case TokenKind::kFloat:
        e->literal = Value::Float(token.number);
        return e;
      case TokenKind::kOp:
        if (token.text == "(") {
          if (PeekOp(")")) {
            Next();
            e->kind = ExprKind::kTuple;
            return e;
          }
          ExprPtr first = ParseExpression();
          if (!PeekOp(",")) {
            ExpectOp(")");
            return first;
          }
          e->kind = ExprKind::kTuple;
          e->args.push_back(first);
          while (PeekOp(",")) {
            Next();
            if (PeekOp(")")) break;
            e->args.push_back(ParseExpression());
          }
          ExpectOp(")");
          return e;
        }
        if (token.text == "[") {
          e->kind = ExprKind::kList;
          while (!PeekOp("]")) {
            e->args.push_back(ParseExpression());
            if (!PeekOp(",")) break;
            Next();
          }
          ExpectOp("]");
          return e;
        }
        if (token.text == "{") {
          e->kind = ExprKind::kDict;
          while (!PeekOp("}")) {
            ExprPtr key = ParseExpression();
            ExpectOp(":");
            e->args.push_back(key);
            e->args.push_back(ParseExpression());
            if (!PeekOp(",")) break;
            Next();
          }
          ExpectOp("}");
          return e;
        }
        break;
      default:
        break;
    }
    Fail(line_, absl::StrCat("unexpected ", Describe(token), " in an expression"));
  }

  void ParseArguments(Expr& call) {
    ExpectOp("(");
    while (!PeekOp(")")) {
      if (Peek().kind == TokenKind::kName && PeekOp("=", 1)) {
        const std::string key = Next().text;
        Next();
        call.kwargs.emplace_back(key, ParseExpression());
      } else {
        call.args.push_back(ParseExpression());
      }
      if (!PeekOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    for (;;) {
      if (PeekOp(".")) {
        Next();
        auto e = std::make_shared<Expr>();
        e->kind = ExprKind::kAttr;
        e->line = line_;
        if (Peek().kind == TokenKind::kInt) {  // foo.0 is foo[0]
          auto index = std::make_shared<Expr>();
          index->literal = Value::Int(Next().integer);
          e->kind = ExprKind::kIndex;
          e->args = {node, index};
        } else {
          e->name = ExpectName();
          e->args = {node};
        }
        node = e;
      } else if (PeekOp("[")) {
        Next();
        ExprPtr parts[3];
        int colons = 0;
        while (!PeekOp("]")) {
          if (PeekOp(":")) {
            Next();
            if (++colons > 2) Fail(line_, "a slice has at most two ':'");
            continue;
          }
          if (parts[colons] != nullptr) Fail(line_, "expected ':' or ']' in a subscript");
          parts[colons] = ParseExpression();
        }
        ExpectOp("]");
        auto e = std::make_shared<Expr>();
        e->line = line_;
        if (colons == 0) {
          if (parts[0] == nullptr) Fail(line_, "an empty subscript []");
          e->kind = ExprKind::kIndex;
          e->args = {node, parts[0]};
        } else {
          e->kind = ExprKind::kSlice;
          e->args = {node, parts[0], parts[1], parts[2]};
        }
        node = e;
      } else if (PeekOp("(")) {
        auto e = std::make_shared<Expr>();
        e->kind = ExprKind::kCall;
        e->line = line_;
        if (node->kind == ExprKind::kName) {
          if (!KnownFunctions().contains(node->name)) {
            Fail(line_, absl::StrCat("the function '", node->name,
                                     "' is not supported by coil's chat template interpreter"));
          }
          e->name = node->name;
        } else if (node->kind == ExprKind::kAttr) {
          if (!KnownMethods().contains(node->name)) {
            Fail(line_, absl::StrCat("the method '", node->name,
                                     "' is not supported by coil's chat template interpreter"));
          }
          e->name = node->name;
          e->method = true;
          e->args.push_back(node->args[0]);  // the object; arguments follow
        } else {
          Fail(line_, "only functions and methods can be called");
        }
        ParseArguments(*e);
        node = e;
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseFilterAndTests(ExprPtr node) {
    for (;;) {
      if (PeekOp("|")) {
        Next();
        auto e = std::make_shared<Expr>();
        e->kind = ExprKind::kFilter;
        e->line = line_;
        e->name = ExpectName();
        if (!KnownFilters().contains(e->name)) {
          Fail(line_, absl::StrCat("the filter '", e->name,
                                   "' is not supported by coil's chat template interpreter"));
        }
        e->args.push_back(node);
        if (PeekOp("(")) ParseArguments(*e);
        node = e;
      } else if (PeekName("is")) {
        Next();
        auto e = std::make_shared<Expr>();
        e->kind = ExprKind::kTest;
        e->line = line_;
        if (PeekName("not")) {
          Next();
          e->negated = true;
        }
        // "is none", "is true", "is false": the literals are test names here.
        const Token& name = Next();
        if (name.kind != TokenKind::kName) Fail(line_, "expected a test name after 'is'");
        e->name = absl::AsciiStrToLower(name.text);
        if (!KnownTests().contains(e->name)) {
          Fail(line_, absl::StrCat("the test '", name.text,
                                   "' is not supported by coil's chat template interpreter"));
        }
        e->args.push_back(node);
        if (PeekOp("(")) {
          ParseArguments(*e);
        } else if (Peek().kind == TokenKind::kString || Peek().kind == TokenKind::kInt ||
                   Peek().kind == TokenKind::kFloat ||
                   (Peek().kind == TokenKind::kName && !PeekName("and") && !PeekName("or") &&
                    !PeekName("if") && !PeekName("else") && !PeekName("is") && !PeekName("in") &&
                    !PeekName("not"))) {
          e->args.push_back(ParsePostfix(ParsePrimary()));  // "is divisibleby 3"
        }
        node = e;
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int line_;
};

// Builds the statement tree from the segments.
class StatementParser {
 public:
  explicit StatementParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  Body ParseAll() {
    Body body = ParseBody({});
    if (pos_ < segments_.size()) {
      Fail(segments_[pos_].line, absl::StrCat("unexpected '{% ", Keyword(segments_[pos_]), " %}'"));
    }
    return body;
  }

 private:
  static std::string Keyword(const Segment& segment) {
    const Token& first = segment.tokens.front();
    return first.kind == TokenKind::kName ? first.text : std::string();
  }

  // Parses statements until a statement whose keyword is in `ends` (left unconsumed) or the
  // end of the template.
  Body ParseBody(const std::vector<std::string>& ends) {
    Body body;
    while (pos_ < segments_.size()) {
      const Segment& segment = segments_[pos_];
      if (segment.kind == SegmentKind::kText) {
        auto stmt = std::make_shared<Stmt>();
        stmt->kind = StmtKind::kText;
        stmt->text = segment.text;
        body.push_back(stmt);
        ++pos_;
        continue;
      }
      if (segment.kind == SegmentKind::kOutput) {
        ExprParser parser(segment.tokens, segment.line);
        auto stmt = std::make_shared<Stmt>();
        stmt->kind = StmtKind::kOutput;
        stmt->line = segment.line;
        stmt->expr = parser.ParseExpression();
        parser.ExpectEnd();
        body.push_back(stmt);
        ++pos_;
        continue;
      }
      const std::string keyword = Keyword(segment);
      if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) return body;
      if (auto stmt = ParseStatement(keyword)) body.push_back(stmt);
    }
    if (!ends.empty()) {
      Fail(open_line_, absl::StrCat("'{% ", ends.back(), " %}' is missing"));
    }
    return body;
  }

  std::shared_ptr<const Stmt> ParseStatement(const std::string& keyword) {
    const Segment& segment = segments_[pos_];
    const int line = segment.line;
    ExprParser parser(segment.tokens, line);
    if (keyword.empty()) Fail(line, "a statement must start with a keyword");
    parser.Next();  // the keyword
    auto stmt = std::make_shared<Stmt>();
    stmt->line = line;
    if (keyword == "if") {
      ParseIf(parser, *stmt, line);
      return stmt;
    }
    if (keyword == "for") {
      ParseFor(parser, *stmt, line);
      return stmt;
    }
    if (keyword == "set") {
      ParseSet(parser, *stmt, line);
      return stmt;
    }
    if (keyword == "break" || keyword == "continue") {
      parser.ExpectEnd();
      stmt->kind = keyword == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      ++pos_;
      return stmt;
    }
    if (keyword == "generation" || keyword == "endgeneration") {
      // transformers' marker for assistant tokens: no output of its own.
      parser.ExpectEnd();
      ++pos_;
      return nullptr;
    }
    if (UnsupportedStatements().contains(keyword)) {
      Fail(line, absl::StrCat("'{% ", keyword,
                              " %}' is not supported by coil's chat template interpreter"));
    }
    Fail(line, absl::StrCat("unexpected '{% ", keyword, " %}'"));
  }

  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}, the parser past the keyword.
  void ParseIf(ExprParser& parser, Stmt& stmt, int line) {
    stmt.kind = StmtKind::kIf;
    stmt.conditions.push_back(parser.ParseExpression());
    parser.ExpectEnd();
    ++pos_;
    const int saved = open_line_;
    open_line_ = line;
    for (;;) {
      stmt.branches.push_back(ParseBody({"elif", "else", "endif"}));
      const Segment& end = segments_[pos_];
      const std::string which = Keyword(end);
      ExprParser end_parser(end.tokens, end.line);
      end_parser.Next();
      ++pos_;
      if (which == "elif") {
        stmt.conditions.push_back(end_parser.ParseExpression());
        end_parser.ExpectEnd();
        continue;
      }
      end_parser.ExpectEnd();
      if (which == "else") {
        stmt.branches.push_back(ParseBody({"endif"}));
        ExprParser endif(segments_[pos_].tokens, segments_[pos_].line);
        endif.Next();
        endif.ExpectEnd();
        ++pos_;
      }
      break;
    }
    open_line_ = saved;
  }

  // {% for %} ... {% else %} ... {% endfor %}, the parser past the keyword.
  void ParseFor(ExprParser& parser, Stmt& stmt, int line) {
    stmt.kind = StmtKind::kFor;
    stmt.targets.push_back(parser.ExpectName());
    while (parser.PeekOp(",")) {
      parser.Next();
      stmt.targets.push_back(parser.ExpectName());
    }
    if (!parser.PeekName("in")) Fail(line, "expected 'in' in a for loop");
    parser.Next();
    stmt.expr = parser.ParseOr();
    if (parser.PeekName("if")) {
      parser.Next();
      stmt.filter = parser.ParseOr();
    }
    if (parser.PeekName("recursive")) Fail(line, "recursive for loops are not supported");
    parser.ExpectEnd();
    ++pos_;
    const int saved = open_line_;
    open_line_ = line;
    stmt.body = ParseBody({"else", "endfor"});
    if (Keyword(segments_[pos_]) == "else") {
      ++pos_;
      stmt.else_body = ParseBody({"endfor"});
    }
    ++pos_;  // endfor
    open_line_ = saved;
  }

  // {% set x = ... %}, {% set ns.x = ... %} or {% set x %} ... {% endset %}, the parser
  // past the keyword.
  void ParseSet(ExprParser& parser, Stmt& stmt, int line) {
    stmt.targets.push_back(parser.ExpectName());
    if (parser.PeekOp(".")) {
      parser.Next();
      stmt.targets.push_back(parser.ExpectName());
    }
    if (parser.PeekOp(",")) Fail(line, "'{% set a, b = ... %}' (tuple unpacking) is not supported");
    if (parser.AtEnd()) {
      if (stmt.targets.size() != 1) Fail(line, "a set block assigns a plain name");
      stmt.kind = StmtKind::kSetBlock;
      ++pos_;
      const int saved = open_line_;
      open_line_ = line;
      stmt.body = ParseBody({"endset"});
      ++pos_;
      open_line_ = saved;
      return;
    }
    stmt.kind = StmtKind::kSet;
    parser.ExpectOp("=");
    stmt.expr = parser.ParseExpression();
    if (parser.PeekOp(",")) Fail(line, "'{% set x = a, b %}' (a bare tuple) is not supported");
    parser.ExpectEnd();
    ++pos_;
  }

  std::vector<Segment> segments_;
  size_t pos_ = 0;
  int open_line_ = 0;
};

}  // namespace

Body ParseSegments(std::vector<Segment> segments) {
  return StatementParser(std::move(segments)).ParseAll();
}

}  // namespace coil::chat::jinja_internal
