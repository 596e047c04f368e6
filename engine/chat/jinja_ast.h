// Internal to engine/chat (nothing outside engine/chat includes it). The syntax tree the
// Jinja parser builds and the evaluator walks: expressions, statements, and the Node that
// Template (jinja.h) holds.
#ifndef COIL_ENGINE_CHAT_JINJA_AST_H_
#define COIL_ENGINE_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja.h"

namespace coil::chat {
namespace jinja_internal {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

enum class ExprKind {
  kLiteral,
  kName,
  kList,
  kDict,
  kTuple,
  kAttr,
  kIndex,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCond
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;  // kName, kAttr, kCall (function or method), kFilter, kTest, operators
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: "is not"
  bool method = false;   // kCall: args[0] is the object whose method is called
};

enum class StmtKind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue };

struct Stmt;
using Body = std::vector<std::shared_ptr<const Stmt>>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  std::vector<ExprPtr> conditions;   // kIf: one per branch
  std::vector<Body> branches;        // kIf: one per condition, then the else body (if any)
  std::vector<std::string> targets;  // kFor loop variables; kSet: name (and attribute)
  ExprPtr filter;                    // kFor: "if" after the iterable
  Body body;
  Body else_body;
};

}  // namespace jinja_internal

// The parsed template.
struct Node {
  jinja_internal::Body body;
};

}  // namespace coil::chat

#endif  // COIL_ENGINE_CHAT_JINJA_AST_H_
