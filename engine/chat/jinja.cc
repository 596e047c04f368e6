// Template::Parse and Render: the lexer (jinja_lexer), the parser (jinja_parser) and the
// evaluator (jinja_eval, with jinja_builtins), their errors turned into a Status.
#include "engine/chat/jinja.h"

#include <memory>
#include <string>
#include <utility>

#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_eval.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/jinja_parser.h"
#include "engine/chat/jinja_value.h"

namespace coil::chat {

absl::StatusOr<Template> Template::Parse(absl::string_view source) {
  try {
    auto root = std::make_shared<Node>();
    root->body = jinja_internal::ParseSegments(jinja_internal::Lex(source));
    return Template(std::move(root));
  } catch (const jinja_internal::JinjaError& error) {
    return absl::InvalidArgumentError(error.message);
  }
}

absl::StatusOr<std::string> Template::Render(const Value::Dict& variables) const {
  try {
    return jinja_internal::Evaluate(root_->body, variables);
  } catch (const jinja_internal::JinjaError& error) {
    return absl::InvalidArgumentError(error.message);
  }
}

}  // namespace coil::chat
