#include "engine/tokenizer/incremental_detokenizer.h"

#include <utility>

#include "common/status_macros.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

absl::StatusOr<std::string> IncrementalDetokenizer::Push(int32_t id) {
  COIL_ASSIGN_OR_RETURN(const absl::string_view bytes, tokenizer_->TokenBytes(id));
  std::string text;
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return text;
  // Lossy repair decides each sequence from its own bytes only, left to right, so
  // deciding a prefix now and the rest later gives the same result as one full pass.
  pending_.append(bytes.data(), bytes.size());
  const size_t consumed = AppendUtf8Lossy(pending_, /*final=*/false, &text);
  pending_.erase(0, consumed);
  return text;
}

std::string IncrementalDetokenizer::Finish() {
  std::string text;
  AppendUtf8Lossy(pending_, /*final=*/true, &text);
  pending_.clear();
  return text;
}

}  // namespace coil::tokenizer
