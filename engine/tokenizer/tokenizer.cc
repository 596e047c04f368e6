#include "engine/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path,
                                                               const TokenizerOptions& options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot open tokenizer file ", path, "; check the path (--tokenizer FILE)"));
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) {
    return absl::DataLossError(absl::StrCat("cannot read tokenizer file ", path));
  }
  auto tokenizer = FromJson(contents.str(), options);
  if (!tokenizer.ok()) return Annotate(tokenizer.status(), path);
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json_text,
                                                               const TokenizerOptions& options) {
  COIL_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseTokenizerJson(json_text));
  return std::make_unique<Tokenizer>(std::move(spec), options);
}

Tokenizer::Tokenizer(TokenizerSpec spec, const TokenizerOptions& options)
    : nfc_(spec.nfc),
      add_prefix_space_(spec.add_prefix_space),
      use_regex_(spec.use_regex),
      bpe_(spec.byte_tokens, spec.merges, options.word_cache_entries),
      token_bytes_(std::move(spec.token_bytes)),
      present_(std::move(spec.present)),
      special_(token_bytes_.size(), false) {
  for (const AddedTokenSpec& token : spec.added_tokens) {
    special_[token.id] = token.special;
    added_ids_.try_emplace(token.content, token.id);
    if (!token.normalized) {
      raw_added_.Add(token.content, token.id);
    } else if (!nfc_ || IsNfc(token.content)) {
      normalized_added_.Add(token.content, token.id);
    } else {
      // The reference normalizes a normalized token's content before matching it.
      const absl::StatusOr<std::string> content = ToNfc(token.content);
      if (content.ok()) normalized_added_.Add(*content, token.id);
    }
  }
}

std::optional<int32_t> Tokenizer::AddedTokenId(absl::string_view content) const {
  const auto it = added_ids_.find(content);
  if (it == added_ids_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<absl::string_view> Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !present_[static_cast<size_t>(id)]) {
    return absl::InvalidArgumentError(
        absl::StrCat("token id ", id, " names no token; ids are in [0, ", vocab_size(), ")"));
  }
  return absl::string_view(token_bytes_[static_cast<size_t>(id)]);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  COIL_RETURN_IF_ERROR(CheckUtf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  absl::Status status;
  raw_added_.Split(
      text,
      [&](absl::string_view segment) {
        if (status.ok()) status = EncodeSegment(segment, &ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  COIL_RETURN_IF_ERROR(status);
  return ids;
}

absl::Status Tokenizer::EncodeSegment(absl::string_view segment, std::vector<int32_t>* ids) const {
  std::string normalized;
  if (nfc_ && !IsNfc(segment)) {
    COIL_ASSIGN_OR_RETURN(normalized, ToNfc(segment));
    segment = normalized;
  }
  normalized_added_.Split(
      segment, [&](absl::string_view text) { EncodePlain(text, ids); },
      [&](int32_t id) { ids->push_back(id); });
  return absl::OkStatus();
}

void Tokenizer::EncodePlain(absl::string_view text, std::vector<int32_t>* ids) const {
  std::string prefixed;
  if (add_prefix_space_ && text[0] != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  if (!use_regex_) {
    bpe_.Encode(text, ids);
    return;
  }
  ForEachGpt2Piece(text, [&](absl::string_view word) { bpe_.Encode(word, ids); });
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    COIL_ASSIGN_OR_RETURN(const absl::string_view token, TokenBytes(id));
    if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
    bytes.append(token.data(), token.size());
  }
  std::string text;
  text.reserve(bytes.size());
  AppendUtf8Lossy(bytes, /*final=*/true, &text);
  return text;
}

}  // namespace coil::tokenizer
