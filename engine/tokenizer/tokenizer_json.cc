#include "engine/tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {
namespace {

using Json = nlohmann::json;

// Ids beyond this are certainly a corrupt file (the largest vocabularies have ~256k).
constexpr int64_t kMaxTokenId = 1 << 24;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer.json: ", what));
}

// The "type" of a pipeline component, or "" when it has none.
std::string TypeOf(const Json& component) {
  if (!component.is_object()) return "";
  const auto it = component.find("type");
  return it != component.end() && it->is_string() ? it->get<std::string>() : "";
}

bool BoolOr(const Json& object, const char* key, bool fallback) {
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// True when `object[key]` is present and neither null nor an empty string: a BPE option
// that changes the encoding.
bool IsSet(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return false;
  if (it->is_string()) return !it->get<std::string>().empty();
  if (it->is_number()) return it->get<double>() != 0.0;
  if (it->is_boolean()) return it->get<bool>();
  return true;
}

// Reads the pipeline components (normalizer, pre-tokenizer, decoder, post-processor) and
// the model options into `spec`, and names in `unsupported` everything coil cannot do.
void ReadPipeline(const Json& root, TokenizerSpec* spec, std::vector<std::string>* unsupported) {
  // Normalizer: none, NFC, or a Sequence of NFC.
  const Json& normalizer = root.contains("normalizer") ? root["normalizer"] : Json();
  std::vector<const Json*> normalizers;
  if (TypeOf(normalizer) == "Sequence" && normalizer.contains("normalizers") &&
      normalizer["normalizers"].is_array()) {
    for (const Json& item : normalizer["normalizers"]) normalizers.push_back(&item);
  } else if (!normalizer.is_null()) {
    normalizers.push_back(&normalizer);
  }
  for (const Json* item : normalizers) {
    const std::string type = TypeOf(*item);
    if (type == "NFC") {
      spec->nfc = true;
    } else {
      unsupported->push_back(absl::StrCat("normalizer '", type, "'"));
    }
  }

  // Pre-tokenizer: ByteLevel, alone or as the only member of a Sequence.
  const Json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : Json();
  const Json* byte_level = nullptr;
  if (TypeOf(pre) == "ByteLevel") {
    byte_level = &pre;
  } else if (TypeOf(pre) == "Sequence" && pre.contains("pretokenizers") &&
             pre["pretokenizers"].is_array()) {
    for (const Json& item : pre["pretokenizers"]) {
      if (TypeOf(item) == "ByteLevel" && pre["pretokenizers"].size() == 1) {
        byte_level = &item;
      } else {
        unsupported->push_back(absl::StrCat("pre_tokenizer '", TypeOf(item), "'"));
      }
    }
  } else {
    unsupported->push_back(pre.is_null() ? std::string("no pre_tokenizer (ByteLevel is needed)")
                                         : absl::StrCat("pre_tokenizer '", TypeOf(pre), "'"));
  }
  if (byte_level != nullptr) {
    // The reference's defaults: add_prefix_space true, use_regex true. trim_offsets only
    // changes offsets, which coil does not report.
    spec->add_prefix_space = BoolOr(*byte_level, "add_prefix_space", true);
    spec->use_regex = BoolOr(*byte_level, "use_regex", true);
  }

  // Decoder: ByteLevel. Post-processor: none or ByteLevel (which adds no tokens).
  const Json& decoder = root.contains("decoder") ? root["decoder"] : Json();
  if (TypeOf(decoder) == "Sequence" && decoder.contains("decoders") &&
      decoder["decoders"].is_array()) {
    for (const Json& item : decoder["decoders"]) {
      unsupported->push_back(absl::StrCat("decoder '", TypeOf(item), "'"));
    }
  } else if (TypeOf(decoder) != "ByteLevel") {
    unsupported->push_back(decoder.is_null() ? std::string("no decoder (ByteLevel is needed)")
                                             : absl::StrCat("decoder '", TypeOf(decoder), "'"));
  }
  const Json& post = root.contains("post_processor") ? root["post_processor"] : Json();
  if (!post.is_null() && TypeOf(post) != "ByteLevel") {
    unsupported->push_back(absl::StrCat("post_processor '", TypeOf(post), "'"));
  }

  const Json& model = root["model"];
  if (BoolOr(model, "byte_fallback", false)) unsupported->push_back("BPE byte_fallback");
  if (BoolOr(model, "ignore_merges", false)) unsupported->push_back("BPE ignore_merges");
  if (IsSet(model, "dropout")) unsupported->push_back("BPE dropout");
  if (IsSet(model, "unk_token")) {
    // Only a byte that valid UTF-8 can contain would ever reach the unknown token.
    for (int b = 0; b < 0xF5; ++b) {
      if (spec->byte_tokens[b] < 0 && b != 0xC0 && b != 0xC1) {
        unsupported->push_back("BPE unk_token with a byte missing from the vocabulary");
        break;
      }
    }
  }
  if (IsSet(model, "continuing_subword_prefix")) {
    unsupported->push_back("BPE continuing_subword_prefix");
  }
  if (IsSet(model, "end_of_word_suffix")) unsupported->push_back("BPE end_of_word_suffix");
}

absl::Status ReadVocab(const Json& vocab, TokenizerSpec* spec,
                       absl::flat_hash_map<std::string, int32_t>* ids) {
  if (!vocab.is_object()) return Malformed("model.vocab is not an object of token -> id");
  ids->reserve(vocab.size());
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= kMaxTokenId) {
      return Malformed(absl::StrCat("model.vocab: token '", token, "' has id ", value.dump(),
                                    "; an id is an integer in [0, ", kMaxTokenId, ")"));
    }
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    ids->emplace(token, id);
    entries.emplace_back(token, id);
    max_id = std::max(max_id, id);
  }
  spec->vocab_size = max_id + 1;
  spec->token_bytes.assign(spec->vocab_size, std::string());
  spec->present.assign(spec->vocab_size, false);
  std::vector<const std::string*> owner(spec->vocab_size, nullptr);
  for (const auto& [token, id] : entries) {
    if (owner[id] != nullptr) {
      return Malformed(absl::StrCat("model.vocab: id ", id, " is given to both '", *owner[id],
                                    "' and '", token, "'; each id must name one token"));
    }
    owner[id] = &token;
    spec->present[id] = true;
    // The ByteLevel decoder turns a token it cannot map back to bytes into its own UTF-8.
    std::optional<std::string> bytes = ByteLevelToBytes(token);
    spec->token_bytes[id] = bytes.has_value() ? *std::move(bytes) : token;
  }
  // GPT-NeoX's vocabulary lacks the bytes no UTF-8 text contains (0xC0, 0xC1, 0xF5..0xFF).
  // A missing byte is dropped from a word, as the reference does without an unk_token.
  for (int b = 0; b < 256; ++b) {
    const auto it = ids->find(BytesToByteLevel(std::string(1, static_cast<char>(b))));
    spec->byte_tokens[b] = it == ids->end() ? -1 : it->second;
  }
  return absl::OkStatus();
}

absl::Status ReadMerges(const Json& merges, const absl::flat_hash_map<std::string, int32_t>& ids,
                        TokenizerSpec* spec) {
  if (!merges.is_array()) return Malformed("model.merges is not an array");
  spec->merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {
      // The older spelling "left right": tokens never contain U+0020 in ByteLevel BPE.
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return Malformed(absl::StrCat("model.merges[", rank, "] is \"", line,
                                      "\"; a merge is two tokens separated by one space"));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return Malformed(absl::StrCat("model.merges[", rank, "] is ", merge.dump(),
                                    "; a merge is \"left right\" or [\"left\", \"right\"]"));
    }
    MergeRule rule;
    const std::string* missing = nullptr;
    const auto lookup = [&](const std::string& token, int32_t* id) {
      const auto it = ids.find(token);
      if (it == ids.end()) {
        if (missing == nullptr) missing = &token;
        return;
      }
      *id = it->second;
    };
    lookup(left, &rule.left);
    lookup(right, &rule.right);
    if (missing != nullptr) {
      return Malformed(absl::StrCat("model.merges[", rank, "] ('", left, "', '", right,
                                    "') names '", *missing,
                                    "', which is not in model.vocab; the file is corrupt"));
    }
    const auto merged = ids.find(left + right);
    if (merged == ids.end()) {
      return Malformed(absl::StrCat("model.merges[", rank, "] ('", left, "', '", right,
                                    "') makes '", left, right,
                                    "', which is not in model.vocab; the file is corrupt"));
    }
    rule.result = merged->second;
    spec->merges.push_back(rule);
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const Json& root, const absl::flat_hash_map<std::string, int32_t>& ids,
                             TokenizerSpec* spec, std::vector<std::string>* unsupported) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return absl::OkStatus();
  const Json& added = root["added_tokens"];
  if (!added.is_array()) return Malformed("added_tokens is not an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const Json& token = added[i];
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
        !token.contains("content") || !token["content"].is_string()) {
      return Malformed(absl::StrCat("added_tokens[", i, "] is ", token.dump(),
                                    "; an added token has an integer id and a string content"));
    }
    AddedTokenSpec spec_token;
    const int64_t id = token["id"].get<int64_t>();
    spec_token.content = token["content"].get<std::string>();
    if (id < 0 || id >= kMaxTokenId || spec_token.content.empty()) {
      return Malformed(absl::StrCat("added_tokens[", i, "] is ", token.dump(),
                                    "; the id must be in [0, ", kMaxTokenId,
                                    ") and the content not empty"));
    }
    spec_token.id = static_cast<int32_t>(id);
    // The reference gives an added token that is also a vocabulary entry the vocabulary's
    // id, whatever id the file declares (GPT-NeoX's two agree: <|endoftext|> is 0 in both).
    if (const auto in_vocab = ids.find(spec_token.content); in_vocab != ids.end()) {
      spec_token.id = in_vocab->second;
    }
    spec_token.special = BoolOr(token, "special", false);
    spec_token.normalized = BoolOr(token, "normalized", !spec_token.special);
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (BoolOr(token, flag, false)) {
        unsupported->push_back(
            absl::StrCat("added token '", spec_token.content, "' with ", flag, " true"));
      }
    }
    if (spec_token.id >= spec->vocab_size) {
      spec->vocab_size = spec_token.id + 1;
      spec->token_bytes.resize(spec->vocab_size);
      spec->present.resize(spec->vocab_size, false);
    }
    spec->present[spec_token.id] = true;
    std::optional<std::string> bytes = ByteLevelToBytes(spec_token.content);
    spec->token_bytes[spec_token.id] = bytes.has_value() ? *std::move(bytes) : spec_token.content;
    spec->added_tokens.push_back(std::move(spec_token));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(absl::string_view json_text) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& error) {
    return Malformed(absl::StrCat("not valid JSON: ", error.what()));
  }
  if (!root.is_object()) return Malformed("the top level is not a JSON object");
  if (!root.contains("model") || !root["model"].is_object()) {
    return Malformed("no \"model\" object");
  }
  const Json& model = root["model"];
  const std::string model_type = TypeOf(model);
  if (model_type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json has model type '", model_type.empty() ? "(none)" : model_type,
                     "'; coil implements the BPE model only; use a BPE tokenizer.json"));
  }
  // The vocabulary and merges are checked first: a corrupt file is reported as corrupt,
  // whatever else it contains. Unsupported options are then reported all at once.
  TokenizerSpec spec;
  std::vector<std::string> unsupported;
  // Deserializing a string that is not valid UTF-8 (nlohmann_json does not check) would
  // make tokens that are not text; the reference refuses such a file too.
  if (const absl::Status utf8 = CheckUtf8(json_text); !utf8.ok()) {
    return Malformed(utf8.message());
  }
  absl::flat_hash_map<std::string, int32_t> ids;
  try {
    COIL_RETURN_IF_ERROR(ReadVocab(model.contains("vocab") ? model["vocab"] : Json(), &spec, &ids));
    COIL_RETURN_IF_ERROR(
        ReadMerges(model.contains("merges") ? model["merges"] : Json(), ids, &spec));
    COIL_RETURN_IF_ERROR(ReadAddedTokens(root, ids, &spec, &unsupported));
    ReadPipeline(root, &spec, &unsupported);
  } catch (const Json::exception& error) {
    return Malformed(error.what());
  }
  if (!unsupported.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.json needs what coil does not implement yet: ", absl::StrJoin(unsupported, ", "),
        "; coil implements the byte-level BPE family (NFC, ByteLevel pre-tokenizer and decoder, "
        "as GPT-2 and GPT-NeoX use); the SentencePiece-style family (Metaspace, byte_fallback) "
        "comes later"));
  }
  return spec;
}

}  // namespace coil::tokenizer
