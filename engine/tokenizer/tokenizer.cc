#include "engine/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
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
  (*tokenizer)->source_path_ = path;
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json_text,
                                                               const TokenizerOptions& options) {
  COIL_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseTokenizerJson(json_text));
  return FromSpec(std::move(spec), options);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSpec(TokenizerSpec spec,
                                                               const TokenizerOptions& options) {
  COIL_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::Create(spec.normalizer));
  COIL_ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer, PreTokenizer::Create(spec.pre_tokenizer));
  for (const std::string& warning : spec.id_warnings) COIL_LOG(WARNING) << "tokenizer: " << warning;

  // The string the reference's decoder gets for each id: an added token's content (its
  // normalized form when it is matched normalized and the normalizer changes it), else the
  // vocabulary entry. The last added token given an id is the one the reference keeps.
  std::vector<std::string> strings(static_cast<size_t>(spec.vocab_size));
  std::vector<bool> present(static_cast<size_t>(spec.vocab_size), false);
  for (size_t id = 0; id < spec.model_tokens.size(); ++id) {
    if (!spec.model_present[id]) continue;
    strings[id] = spec.model_tokens[id];
    present[id] = true;
  }
  // The tokens that keep their id (the last added with it), in the file's order.
  absl::flat_hash_map<int32_t, size_t> last_with_id;
  for (size_t i = 0; i < spec.added_tokens.size(); ++i) last_with_id[spec.added_tokens[i].id] = i;
  std::vector<size_t> kept;
  for (size_t i = 0; i < spec.added_tokens.size(); ++i) {
    if (last_with_id[spec.added_tokens[i].id] == i) kept.push_back(i);
  }
  std::vector<std::string> matched_form(spec.added_tokens.size());
  for (const size_t index : kept) {
    const AddedTokenSpec& token = spec.added_tokens[index];
    const int32_t id = token.id;
    std::string form = token.content;
    if (token.normalized && !normalizer.empty()) {
      int32_t head = 1;
      COIL_RETURN_IF_ERROR(normalizer.Apply(&form, &head));
    }
    matched_form[index] = form;
    strings[static_cast<size_t>(id)] = form;
    present[static_cast<size_t>(id)] = true;
  }
  COIL_ASSIGN_OR_RETURN(Decoder decoder, Decoder::Create(spec.has_decoder, spec.decoder, strings));
  for (const std::vector<int32_t>* ids :
       {&spec.post_processor.prefix, &spec.post_processor.suffix}) {
    for (const int32_t id : *ids) {
      if (id >= spec.vocab_size || !present[static_cast<size_t>(id)]) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed tokenizer.json: post_processor adds the token id ", id,
                         ", which names no token"));
      }
    }
  }
  auto tokenizer =
      std::unique_ptr<Tokenizer>(new Tokenizer(std::move(spec), options, std::move(normalizer),
                                               std::move(pre_tokenizer), std::move(decoder)));
  tokenizer->token_strings_ = std::move(strings);
  tokenizer->present_ = std::move(present);
  // Special by content, as the reference decides it when decoding.
  absl::flat_hash_set<std::string> special_contents;
  for (const AddedTokenSpec& token : tokenizer->added_tokens_) {
    if (token.special) special_contents.insert(token.content);
  }
  tokenizer->special_.assign(tokenizer->present_.size(), false);
  for (size_t id = 0; id < tokenizer->present_.size(); ++id) {
    tokenizer->special_[id] =
        tokenizer->present_[id] && special_contents.contains(tokenizer->token_strings_[id]);
  }
  // Where several tokens match the same text (their normalized forms can coincide), the
  // first in the file wins; the reference picks one at random.
  for (const size_t index : kept) {
    const AddedTokenSpec& token = tokenizer->added_tokens_[index];
    const int32_t id = token.id;
    const AddedTokenMatcher::Options match{token.lstrip, token.rstrip, token.single_word};
    if (token.normalized) {
      tokenizer->normalized_added_.Add(matched_form[index], id, match);
    } else {
      tokenizer->raw_added_.Add(token.content, id, match);
    }
  }
  return tokenizer;
}

Tokenizer::Tokenizer(TokenizerSpec spec, const TokenizerOptions& options, Normalizer normalizer,
                     PreTokenizer pre_tokenizer, Decoder decoder)
    : normalizer_(std::move(normalizer)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      bpe_(spec.model_tokens, spec.model_present, spec.merges, spec.bpe,
           options.word_cache_entries),
      decoder_(std::move(decoder)),
      special_prefix_(std::move(spec.post_processor.prefix)),
      special_suffix_(std::move(spec.post_processor.suffix)),
      added_tokens_(std::move(spec.added_tokens)),
      description_(std::move(spec.description)) {
  for (const AddedTokenSpec& token : added_tokens_) added_ids_[token.content] = token.id;
  vocab_ids_.reserve(spec.model_tokens.size());
  for (size_t id = 0; id < spec.model_tokens.size(); ++id) {
    if (spec.model_present[id]) vocab_ids_.emplace(spec.model_tokens[id], static_cast<int32_t>(id));
  }
}

std::optional<int32_t> Tokenizer::AddedTokenId(absl::string_view content) const {
  const auto it = added_ids_.find(content);
  if (it == added_ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Tokenizer::TokenId(absl::string_view token) const {
  if (std::optional<int32_t> added = AddedTokenId(token); added.has_value()) return added;
  const auto it = vocab_ids_.find(token);
  if (it == vocab_ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::TokenString(int32_t id) const {
  if (!CheckId(id).ok()) return std::nullopt;
  return token_strings_[static_cast<size_t>(id)];
}

absl::Status Tokenizer::CheckId(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !present_[static_cast<size_t>(id)]) {
    return absl::InvalidArgumentError(
        absl::StrCat("token id ", id, " names no token; ids are in [0, ", vocab_size(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_special_tokens) const {
  COIL_RETURN_IF_ERROR(CheckUtf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = special_prefix_;
  absl::Status status;
  raw_added_.Split(
      text,
      [&](absl::string_view segment) {
        // Only a stretch at the very start of the text stands for its first character.
        const int32_t head = segment.data() == text.data() ? 1 : 0;
        if (status.ok()) status = EncodeSegment(segment, head, &ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  COIL_RETURN_IF_ERROR(status);
  if (add_special_tokens) ids.insert(ids.end(), special_suffix_.begin(), special_suffix_.end());
  return ids;
}

absl::Status Tokenizer::EncodeSegment(absl::string_view segment, int32_t head,
                                      std::vector<int32_t>* ids) const {
  std::string normalized;
  if (!normalizer_.empty()) {
    normalized.assign(segment.data(), segment.size());
    COIL_RETURN_IF_ERROR(normalizer_.Apply(&normalized, &head));
    segment = normalized;
  }
  normalized_added_.Split(
      segment,
      [&](absl::string_view text) {
        int32_t text_head = 0;
        if (head > 0 && pre_tokenizer_.needs_head()) {
          // The characters before this stretch use up the head.
          const auto offset = static_cast<size_t>(text.data() - segment.data());
          text_head = std::max(0, head - CodePointCount(segment.substr(0, offset)));
        }
        EncodePlain(text, text_head, ids);
      },
      [&](int32_t id) { ids->push_back(id); });
  return absl::OkStatus();
}

void Tokenizer::EncodePlain(absl::string_view text, int32_t head, std::vector<int32_t>* ids) const {
  pre_tokenizer_.Split(text, head, [&](absl::string_view word) { bpe_.Encode(word, ids); });
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  for (const int32_t id : ids) COIL_RETURN_IF_ERROR(CheckId(id));
  Decoder::Stream stream = decoder_.NewStream();
  std::string text;
  text.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    if (skip_special_tokens && special_[static_cast<size_t>(id)]) continue;
    stream.Push(id, &text);
  }
  stream.Finish(&text);
  return text;
}

}  // namespace coil::tokenizer
