#include "engine/tokenizer/incremental_detokenizer.h"

#include "common/status_macros.h"

namespace coil::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer),
      skip_special_tokens_(skip_special_tokens),
      stream_(tokenizer.NewDecodeStream()) {}

absl::StatusOr<std::string> IncrementalDetokenizer::Push(int32_t id) {
  COIL_RETURN_IF_ERROR(tokenizer_->CheckId(id));
  std::string text;
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return text;
  stream_.Push(id, &text);
  return text;
}

std::string IncrementalDetokenizer::Finish() {
  std::string text;
  stream_.Finish(&text);
  return text;
}

}  // namespace coil::tokenizer
