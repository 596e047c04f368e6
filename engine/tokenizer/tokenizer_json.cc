#include "engine/tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/regex.h"
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

const Json& Field(const Json& object, const char* key) {
  static const Json* const kNull = new Json();
  if (!object.is_object()) return *kNull;
  const auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

// Collects what a file needs that coil does not implement, each with its place in the file,
// so that all of it is reported at once.
class Reader {
 public:
  void Unsupported(absl::string_view where, absl::string_view what) {
    unsupported_.push_back(absl::StrCat(where, ": ", what));
  }
  const std::vector<std::string>& unsupported() const { return unsupported_; }

  // Reads an optional boolean field: absent or null gives `fallback`.
  absl::StatusOr<bool> Bool(const Json& object, const char* key, bool fallback,
                            absl::string_view where) const {
    const Json& value = Field(object, key);
    if (value.is_null()) return fallback;
    if (!value.is_boolean()) {
      return Malformed(
          absl::StrCat(where, ".", key, " is ", value.dump(), "; expected true or false"));
    }
    return value.get<bool>();
  }

  absl::StatusOr<std::string> String(const Json& object, const char* key,
                                     absl::string_view where) const {
    const Json& value = Field(object, key);
    if (!value.is_string()) {
      return Malformed(absl::StrCat(where, ".", key, " is ", value.dump(), "; expected a string"));
    }
    return value.get<std::string>();
  }

  absl::StatusOr<uint32_t> Count(const Json& object, const char* key,
                                 absl::string_view where) const {
    const Json& value = Field(object, key);
    if (!value.is_number_unsigned() || value.get<uint64_t>() > (1u << 20)) {
      return Malformed(absl::StrCat(where, ".", key, " is ", value.dump(),
                                    "; expected a count from 0 to ", 1u << 20));
    }
    return static_cast<uint32_t>(value.get<uint64_t>());
  }

  // A pattern {"String": "..."} or {"Regex": "..."}; a regex is compiled here so that an
  // unsupported construct is reported when the file is loaded.
  absl::StatusOr<PatternSpec> Pattern(const Json& object, absl::string_view where) {
    const Json& value = Field(object, "pattern");
    const std::string place = absl::StrCat(where, ".pattern");
    PatternSpec pattern;
    if (value.is_object() && value.size() == 1 && value.contains("String") &&
        value["String"].is_string()) {
      pattern.text = value["String"].get<std::string>();
    } else if (value.is_object() && value.size() == 1 && value.contains("Regex") &&
               value["Regex"].is_string()) {
      pattern.is_regex = true;
      pattern.text = value["Regex"].get<std::string>();
    } else {
      return Malformed(absl::StrCat(place, " is ", value.dump(),
                                    "; expected {\"String\": ...} or {\"Regex\": ...}"));
    }
    if (pattern.text.empty()) {
      Unsupported(place, "an empty pattern");
      return pattern;
    }
    if (pattern.is_regex) {
      const auto regex = Regex::Compile(pattern.text);
      if (regex.status().code() == absl::StatusCode::kUnimplemented) {
        Unsupported(place, regex.status().message());
      } else if (!regex.ok()) {
        return Malformed(absl::StrCat(place, ": ", regex.status().message()));
      }
    }
    return pattern;
  }

  // One character, as Rust deserializes a char.
  absl::StatusOr<std::string> Character(const Json& object, const char* key,
                                        absl::string_view where) const {
    COIL_ASSIGN_OR_RETURN(std::string text, String(object, key, where));
    size_t length = 0;
    if (text.empty() || ValidUtf8Length(text, 0) != text.size()) {
      return Malformed(absl::StrCat(where, ".", key, " is \"", text, "\"; expected one character"));
    }
    (void)DecodeUtf8(text, 0, &length);
    return text;
  }

  absl::StatusOr<SplitBehavior> Behavior(const Json& object, absl::string_view where,
                                         std::optional<SplitBehavior> fallback) const {
    const Json& value = Field(object, "behavior");
    if (value.is_null() && fallback.has_value()) return *fallback;
    const std::string name = value.is_string() ? value.get<std::string>() : "";
    if (name == "Removed") return SplitBehavior::kRemoved;
    if (name == "Isolated") return SplitBehavior::kIsolated;
    if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (name == "Contiguous") return SplitBehavior::kContiguous;
    return Malformed(absl::StrCat(where, ".behavior is ", value.dump(),
                                  "; expected Removed, Isolated, MergedWithPrevious, "
                                  "MergedWithNext or Contiguous"));
  }

  // Metaspace's prepend_scheme, with the older add_prefix_space spelling.
  absl::StatusOr<PrependScheme> Scheme(const Json& object, absl::string_view where) const {
    const Json& value = Field(object, "prepend_scheme");
    PrependScheme scheme = PrependScheme::kAlways;
    if (!value.is_null()) {
      const std::string name = value.is_string() ? value.get<std::string>() : "";
      if (name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        scheme = PrependScheme::kNever;
      } else if (name == "always") {
        scheme = PrependScheme::kAlways;
      } else {
        return Malformed(absl::StrCat(where, ".prepend_scheme is ", value.dump(),
                                      "; expected \"first\", \"never\" or \"always\""));
      }
    }
    const Json& add_prefix_space = Field(object, "add_prefix_space");
    if (add_prefix_space.is_boolean() && !add_prefix_space.get<bool>()) {
      if (scheme != PrependScheme::kNever) {
        return Malformed(absl::StrCat(where,
                                      ": add_prefix_space false contradicts prepend_scheme; "
                                      "set prepend_scheme to \"never\""));
      }
    }
    return scheme;
  }

 private:
  std::vector<std::string> unsupported_;
};

// Parses tokenizer.json in one pass: model.vocab and model.merges (almost all of a file: a
// 262k-entry vocabulary and 515k merges for Gemma 3) go straight into flat lists, and only
// the rest is built as a JSON tree. A full tree would take seconds and hundreds of MB.
class TokenizerJsonReader : public nlohmann::json_sax<Json> {
 public:
  Json root;
  std::vector<std::pair<std::string, int64_t>> vocab;
  bool has_vocab = false;
  struct Merge {
    std::string left, right;
    bool legacy = false;  // "left right" in one string
    int parts = 0;        // strings seen in a ["left", "right"] pair
  };
  std::vector<Merge> merges;
  bool has_merges = false;
  std::string error;  // a malformed vocabulary or merge entry

  bool null() override { return Value(Json()); }
  bool boolean(bool value) override { return Value(Json(value)); }
  bool number_integer(number_integer_t value) override {
    if (mode_ == Mode::kVocab) return VocabId(value);
    return Value(Json(value));
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (mode_ == Mode::kVocab) {
      return VocabId(value > static_cast<uint64_t>(kMaxTokenId) ? kMaxTokenId
                                                                : static_cast<int64_t>(value));
    }
    return Value(Json(value));
  }
  bool number_float(number_float_t value, const string_t&) override {
    if (mode_ == Mode::kVocab)
      return Fail(absl::StrCat("model.vocab: token '", vocab_token_, "' has id ", value,
                               "; an id is an integer"));
    return Value(Json(value));
  }
  bool string(string_t& value) override {
    if (mode_ == Mode::kMerges) {
      Merge merge;
      merge.legacy = true;
      merge.left = std::move(value);
      merges.push_back(std::move(merge));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      Merge& merge = merges.back();
      if (merge.parts == 0) merge.left = std::move(value);
      if (merge.parts == 1) merge.right = std::move(value);
      ++merge.parts;
      return true;
    }
    if (mode_ == Mode::kVocab)
      return Fail(absl::StrCat("model.vocab: token '", vocab_token_, "' has id \"", value,
                               "\"; an id is an integer"));
    return Value(Json(std::move(value)));
  }
  bool binary(binary_t&) override { return Fail("binary data"); }
  bool start_object(std::size_t) override {
    if (mode_ == Mode::kDom && pending_ == Mode::kVocab) {
      mode_ = Mode::kVocab;
      has_vocab = true;
      pending_ = Mode::kDom;
      return true;
    }
    if (mode_ != Mode::kDom) return Fail("model.vocab and model.merges hold no objects");
    pending_ = Mode::kDom;
    return Open(Json::object());
  }
  bool key(string_t& value) override {
    if (mode_ == Mode::kVocab) {
      vocab_token_ = std::move(value);
      return true;
    }
    // model.vocab and model.merges are read into the flat lists.
    if (stack_.size() == 2 && keys_.size() == 2 && keys_[1] == "model") {
      pending_ = value == "vocab" ? Mode::kVocab : value == "merges" ? Mode::kMerges : Mode::kDom;
    }
    slot_ = &(*stack_.back())[value];
    last_key_ = std::move(value);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    return Close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kDom && pending_ == Mode::kMerges) {
      mode_ = Mode::kMerges;
      has_merges = true;
      pending_ = Mode::kDom;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      merges.emplace_back();
      return true;
    }
    if (mode_ != Mode::kDom) return Fail("a merge is \"left right\" or [\"left\", \"right\"]");
    pending_ = Mode::kDom;
    return Open(Json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    return Close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    if (error.empty()) error = absl::StrCat("not valid JSON: ", e.what());
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  bool Fail(absl::string_view what) {
    if (error.empty()) error = std::string(what);
    return false;
  }
  bool VocabId(int64_t id) {
    vocab.emplace_back(std::move(vocab_token_), id);
    return true;
  }
  // Places a value in the tree: the root, the next array element, or the last key's slot.
  Json* Place(Json value) {
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair || mode_ == Mode::kVocab) {
      Fail("model.merges holds only strings and pairs of strings");
      return nullptr;
    }
    pending_ = Mode::kDom;
    if (stack_.empty()) {
      root = std::move(value);
      return &root;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(value));
      return &stack_.back()->back();
    }
    *slot_ = std::move(value);
    return slot_;
  }
  bool Value(Json value) { return Place(std::move(value)) != nullptr; }
  bool Open(Json container) {
    Json* placed = Place(std::move(container));
    if (placed == nullptr) return false;
    keys_.push_back(stack_.empty() || stack_.back()->is_array() ? std::string() : last_key_);
    stack_.push_back(placed);
    return true;
  }
  bool Close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  Mode mode_ = Mode::kDom;
  Mode pending_ = Mode::kDom;  // what the value after the current key is read into
  std::vector<Json*> stack_;
  std::vector<std::string> keys_;  // the key each open container sits under
  Json* slot_ = nullptr;
  std::string last_key_;
  std::string vocab_token_;
};

// Appends the members of `component` to `out`, flattening nested Sequences (a Sequence of
// normalizers, pre-tokenizers or decoders applies its members in order).
void Flatten(const Json& component, const std::string& where, const char* members,
             std::vector<std::pair<const Json*, std::string>>* out) {
  if (TypeOf(component) == "Sequence" && Field(component, members).is_array()) {
    const Json& list = component[members];
    for (size_t i = 0; i < list.size(); ++i) {
      Flatten(list[i], absl::StrCat(where, ".", members, "[", i, "]"), members, out);
    }
    return;
  }
  out->emplace_back(&component, where);
}

absl::Status ReadNormalizer(const Json& root, Reader* reader, TokenizerSpec* spec) {
  const Json& normalizer = Field(root, "normalizer");
  if (normalizer.is_null()) return absl::OkStatus();
  std::vector<std::pair<const Json*, std::string>> items;
  Flatten(normalizer, "normalizer", "normalizers", &items);
  for (const auto& [item, where] : items) {
    const std::string type = TypeOf(*item);
    NormalizerStep step;
    step.where = where;
    using Kind = NormalizerStep::Kind;
    if (type == "NFC") {
      step.kind = Kind::kNfc;
    } else if (type == "NFD") {
      step.kind = Kind::kNfd;
    } else if (type == "NFKC") {
      step.kind = Kind::kNfkc;
    } else if (type == "NFKD") {
      step.kind = Kind::kNfkd;
    } else if (type == "Lowercase") {
      step.kind = Kind::kLowercase;
    } else if (type == "Prepend") {
      step.kind = Kind::kPrepend;
      COIL_ASSIGN_OR_RETURN(step.text, reader->String(*item, "prepend", where));
    } else if (type == "Replace") {
      step.kind = Kind::kReplace;
      COIL_ASSIGN_OR_RETURN(step.pattern, reader->Pattern(*item, where));
      COIL_ASSIGN_OR_RETURN(step.text, reader->String(*item, "content", where));
    } else if (type == "Strip") {
      step.kind = Kind::kStrip;
      COIL_ASSIGN_OR_RETURN(step.left, reader->Bool(*item, "strip_left", true, where));
      COIL_ASSIGN_OR_RETURN(step.right, reader->Bool(*item, "strip_right", true, where));
    } else {
      reader->Unsupported(where, absl::StrCat("normalizer '", type, "'"));
      continue;
    }
    spec->normalizer.push_back(std::move(step));
  }
  return absl::OkStatus();
}

absl::Status ReadPreTokenizer(const Json& root, Reader* reader, TokenizerSpec* spec) {
  const Json& pre = Field(root, "pre_tokenizer");
  if (pre.is_null()) return absl::OkStatus();
  std::vector<std::pair<const Json*, std::string>> items;
  Flatten(pre, "pre_tokenizer", "pretokenizers", &items);
  bool after_byte_level = false;
  for (const auto& [item, where] : items) {
    const std::string type = TypeOf(*item);
    PreTokenizerStep step;
    step.where = where;
    using Kind = PreTokenizerStep::Kind;
    if (after_byte_level) {
      // After ByteLevel the pieces are spelled in its alphabet, which coil does not keep.
      reader->Unsupported(
          where, absl::StrCat("pre-tokenizer '", type, "' after a ByteLevel pre-tokenizer"));
      continue;
    }
    if (type == "ByteLevel") {
      step.kind = Kind::kByteLevel;
      COIL_ASSIGN_OR_RETURN(step.add_prefix_space,
                            reader->Bool(*item, "add_prefix_space", true, where));
      COIL_ASSIGN_OR_RETURN(step.use_regex, reader->Bool(*item, "use_regex", true, where));
      after_byte_level = true;
      spec->bpe.byte_level = true;
    } else if (type == "Split") {
      step.kind = Kind::kSplit;
      COIL_ASSIGN_OR_RETURN(step.pattern, reader->Pattern(*item, where));
      COIL_ASSIGN_OR_RETURN(step.behavior, reader->Behavior(*item, where, std::nullopt));
      COIL_ASSIGN_OR_RETURN(step.invert, reader->Bool(*item, "invert", false, where));
    } else if (type == "Metaspace") {
      step.kind = Kind::kMetaspace;
      COIL_ASSIGN_OR_RETURN(step.replacement, reader->Character(*item, "replacement", where));
      COIL_ASSIGN_OR_RETURN(step.prepend_scheme, reader->Scheme(*item, where));
      COIL_ASSIGN_OR_RETURN(step.split, reader->Bool(*item, "split", true, where));
    } else if (type == "Digits") {
      step.kind = Kind::kDigits;
      COIL_ASSIGN_OR_RETURN(step.individual_digits,
                            reader->Bool(*item, "individual_digits", false, where));
    } else if (type == "Punctuation") {
      step.kind = Kind::kPunctuation;
      COIL_ASSIGN_OR_RETURN(step.behavior,
                            reader->Behavior(*item, where, SplitBehavior::kIsolated));
    } else if (type == "Whitespace") {
      step.kind = Kind::kWhitespace;
    } else if (type == "WhitespaceSplit") {
      step.kind = Kind::kWhitespaceSplit;
    } else {
      reader->Unsupported(where, absl::StrCat("pre-tokenizer '", type, "'"));
      continue;
    }
    spec->pre_tokenizer.push_back(std::move(step));
  }
  return absl::OkStatus();
}

absl::Status ReadDecoder(const Json& root, Reader* reader, TokenizerSpec* spec) {
  const Json& decoder = Field(root, "decoder");
  if (decoder.is_null()) return absl::OkStatus();
  spec->has_decoder = true;
  std::vector<std::pair<const Json*, std::string>> items;
  Flatten(decoder, "decoder", "decoders", &items);
  for (const auto& [item, where] : items) {
    const std::string type = TypeOf(*item);
    DecoderStep step;
    step.where = where;
    using Kind = DecoderStep::Kind;
    if (type == "ByteLevel") {
      step.kind = Kind::kByteLevel;
    } else if (type == "Metaspace") {
      step.kind = Kind::kMetaspace;
      COIL_ASSIGN_OR_RETURN(step.replacement, reader->Character(*item, "replacement", where));
      COIL_ASSIGN_OR_RETURN(step.prepend_scheme, reader->Scheme(*item, where));
    } else if (type == "ByteFallback") {
      step.kind = Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = Kind::kFuse;
    } else if (type == "Strip") {
      step.kind = Kind::kStrip;
      COIL_ASSIGN_OR_RETURN(step.content, reader->Character(*item, "content", where));
      COIL_ASSIGN_OR_RETURN(step.start, reader->Count(*item, "start", where));
      COIL_ASSIGN_OR_RETURN(step.stop, reader->Count(*item, "stop", where));
    } else if (type == "Replace") {
      step.kind = Kind::kReplace;
      COIL_ASSIGN_OR_RETURN(step.pattern, reader->Pattern(*item, where));
      COIL_ASSIGN_OR_RETURN(step.content, reader->String(*item, "content", where));
    } else {
      reader->Unsupported(where, absl::StrCat("decoder '", type, "'"));
      continue;
    }
    spec->decoder.push_back(std::move(step));
  }
  return absl::OkStatus();
}

// The id of a token the post-processor names, as the reference resolves it.
absl::StatusOr<std::vector<int32_t>> SpecialTokenIds(const Json& special_tokens,
                                                     const std::string& name,
                                                     const std::string& where) {
  const Json& entry = Field(special_tokens, name.c_str());
  if (!entry.is_object() || !Field(entry, "ids").is_array()) {
    return Malformed(absl::StrCat(where, " names the special token \"", name,
                                  "\", which special_tokens does not define with its ids"));
  }
  std::vector<int32_t> ids;
  for (const Json& id : entry["ids"]) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= static_cast<uint64_t>(kMaxTokenId)) {
      return Malformed(absl::StrCat(where, ": special token \"", name, "\" has the id ", id.dump(),
                                    "; ids are integers in [0, ", kMaxTokenId, ")"));
    }
    ids.push_back(static_cast<int32_t>(id.get<uint64_t>()));
  }
  return ids;
}

// A TemplateProcessing "single" template: the ids before and after the sequence.
absl::Status ReadTemplate(const Json& processor, const std::string& where, Reader* reader,
                          PostProcessorSpec* post) {
  const Json& single = Field(processor, "single");
  if (!single.is_array()) {
    return Malformed(absl::StrCat(where, ".single is ", single.dump(), "; expected a template"));
  }
  const Json& special_tokens = Field(processor, "special_tokens");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const Json& piece = single[i];
    const std::string place = absl::StrCat(where, ".single[", i, "]");
    std::string special;
    bool is_sequence = false;
    std::string sequence_id;
    if (piece.is_object() && piece.contains("SpecialToken")) {
      COIL_ASSIGN_OR_RETURN(special, reader->String(piece["SpecialToken"], "id", place));
    } else if (piece.is_object() && piece.contains("Sequence")) {
      is_sequence = true;
      COIL_ASSIGN_OR_RETURN(sequence_id, reader->String(piece["Sequence"], "id", place));
    } else if (piece.is_string()) {
      // The string form: "$A", "$0", "$B:1", "[CLS]", "<s>:0".
      std::string text = piece.get<std::string>();
      if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
        text = text.substr(0, colon);
      }
      if (!text.empty() && text[0] == '$') {
        is_sequence = true;
        const absl::string_view name = absl::string_view(text).substr(1);
        const bool is_a =
            name.empty() || name == "a" || name == "A" || absl::ascii_isdigit(name[0]);
        sequence_id = is_a ? "A" : name == "b" ? "B" : std::string(name);
      } else {
        special = text;
      }
    } else {
      return Malformed(absl::StrCat(place, " is ", piece.dump(), "; expected a template piece"));
    }
    if (is_sequence) {
      if (sequence_id != "A") {
        reader->Unsupported(place, "a single-sequence template that uses sequence B");
      }
      seen_sequence = true;
      continue;
    }
    COIL_ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                          SpecialTokenIds(special_tokens, special, place));
    std::vector<int32_t>& side = seen_sequence ? after : before;
    side.insert(side.end(), ids.begin(), ids.end());
  }
  // An outer template wraps what the inner ones made.
  post->prefix.insert(post->prefix.begin(), before.begin(), before.end());
  post->suffix.insert(post->suffix.end(), after.begin(), after.end());
  std::string description = "TemplateProcessing";
  for (const Json& piece : single) {
    if (piece.contains("SpecialToken")) {
      absl::StrAppend(&description, " ", Field(piece["SpecialToken"], "id").get<std::string>());
    } else if (piece.contains("Sequence")) {
      absl::StrAppend(&description, " $A");
    } else if (piece.is_string()) {
      absl::StrAppend(&description, " ", piece.get<std::string>());
    }
  }
  post->description =
      post->description.empty() ? description : absl::StrCat(post->description, ", ", description);
  return absl::OkStatus();
}

absl::Status ReadPostProcessor(const Json& root, Reader* reader, TokenizerSpec* spec) {
  const Json& post = Field(root, "post_processor");
  if (post.is_null()) return absl::OkStatus();
  std::vector<std::pair<const Json*, std::string>> items;
  Flatten(post, "post_processor", "processors", &items);
  for (const auto& [item, where] : items) {
    const std::string type = TypeOf(*item);
    if (type == "ByteLevel") {
      // It only trims offsets, which coil does not report.
      if (spec->post_processor.description.empty()) spec->post_processor.description = "ByteLevel";
    } else if (type == "TemplateProcessing") {
      if (spec->post_processor.description == "ByteLevel") spec->post_processor.description.clear();
      COIL_RETURN_IF_ERROR(ReadTemplate(*item, where, reader, &spec->post_processor));
    } else {
      reader->Unsupported(where, absl::StrCat("post-processor '", type, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadVocab(const TokenizerJsonReader& reader, TokenizerSpec* spec,
                       absl::flat_hash_map<std::string, int32_t>* ids) {
  if (!reader.has_vocab) return Malformed("model.vocab is not an object of token -> id");
  ids->reserve(reader.vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id] : reader.vocab) {
    if (id < 0 || id >= kMaxTokenId) {
      return Malformed(absl::StrCat("model.vocab: token '", token, "' has id ", id,
                                    "; an id is an integer in [0, ", kMaxTokenId, ")"));
    }
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  spec->model_tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  spec->model_present.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, value] : reader.vocab) {
    const auto id = static_cast<int32_t>(value);
    if (spec->model_present[id]) {
      return Malformed(absl::StrCat("model.vocab: id ", id, " is given to both '",
                                    spec->model_tokens[id], "' and '", token,
                                    "'; each id must name one token"));
    }
    spec->model_present[id] = true;
    spec->model_tokens[id] = token;
    ids->emplace(token, id);
  }
  spec->model_entries = static_cast<int32_t>(reader.vocab.size());
  return absl::OkStatus();
}

absl::Status ReadMerges(const TokenizerJsonReader& reader,
                        const absl::flat_hash_map<std::string, int32_t>& ids, TokenizerSpec* spec) {
  if (!reader.has_merges) return Malformed("model.merges is not an array");
  spec->merges.reserve(reader.merges.size());
  std::string merged;
  for (size_t index = 0; index < reader.merges.size(); ++index) {
    const TokenizerJsonReader::Merge& merge = reader.merges[index];
    absl::string_view left, right;
    if (merge.legacy) {
      // The older spelling "left right"; "#version" lines are comments.
      const absl::string_view line = merge.left;
      if (absl::StartsWith(line, "#version")) continue;
      const size_t space = line.find(' ');
      if (space == absl::string_view::npos ||
          line.find(' ', space + 1) != absl::string_view::npos) {
        return Malformed(absl::StrCat("model.merges[", index, "] is \"", line,
                                      "\"; a merge is two tokens separated by one space"));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.parts == 2) {
      left = merge.left;
      right = merge.right;
    } else {
      return Malformed(
          absl::StrCat("model.merges[", index, "] has ", merge.parts,
                       " strings; a merge is \"left right\" or [\"left\", \"right\"]"));
    }
    MergeRule rule;
    const auto lookup = [&](absl::string_view token, int32_t* id) {
      const auto it = ids.find(token);
      if (it == ids.end()) return false;
      *id = it->second;
      return true;
    };
    for (const auto& [token, id] : {std::pair{left, &rule.left}, std::pair{right, &rule.right}}) {
      if (!lookup(token, id)) {
        return Malformed(absl::StrCat("model.merges[", index, "] ('", left, "', '", right,
                                      "') names '", token,
                                      "', which is not in model.vocab; the file is corrupt"));
      }
    }
    merged.assign(left.data(), left.size());
    merged.append(right.data(), right.size());
    if (!lookup(merged, &rule.result)) {
      return Malformed(absl::StrCat("model.merges[", index, "] ('", left, "', '", right,
                                    "') makes '", merged,
                                    "', which is not in model.vocab; the file is corrupt"));
    }
    spec->merges.push_back(rule);
  }
  return absl::OkStatus();
}

absl::Status ReadModelOptions(const Json& model,
                              const absl::flat_hash_map<std::string, int32_t>& ids, Reader* reader,
                              TokenizerSpec* spec) {
  COIL_ASSIGN_OR_RETURN(spec->bpe.byte_fallback,
                        reader->Bool(model, "byte_fallback", false, "model"));
  COIL_ASSIGN_OR_RETURN(spec->bpe.ignore_merges,
                        reader->Bool(model, "ignore_merges", false, "model"));
  COIL_ASSIGN_OR_RETURN(spec->bpe.fuse_unk, reader->Bool(model, "fuse_unk", false, "model"));
  const Json& dropout = Field(model, "dropout");
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
    reader->Unsupported("model.dropout", "BPE dropout (tokenization is deterministic in coil)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json& value = Field(model, key);
    if (!value.is_null() && !(value.is_string() && value.get<std::string>().empty())) {
      reader->Unsupported(absl::StrCat("model.", key), absl::StrCat("BPE ", key));
    }
  }
  const Json& unk = Field(model, "unk_token");
  if (!unk.is_null()) {
    if (!unk.is_string()) return Malformed(absl::StrCat("model.unk_token is ", unk.dump()));
    const auto it = ids.find(unk.get<std::string>());
    if (it == ids.end()) {
      return Malformed(
          absl::StrCat("model.unk_token '", unk.get<std::string>(), "' is not in model.vocab"));
    }
    spec->bpe.unk_id = it->second;
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const Json& root, const absl::flat_hash_map<std::string, int32_t>& ids,
                             TokenizerSpec* spec) {
  const Json& added = Field(root, "added_tokens");
  if (added.is_null()) return absl::OkStatus();
  if (!added.is_array()) return Malformed("added_tokens is not an array");
  // The reference adds the tokens one by one: a token whose content is already a token (an
  // earlier added one, or a vocabulary entry) takes that id; the others take new ids from
  // the vocabulary's size on, whatever id the file says.
  absl::flat_hash_map<std::string, int32_t> added_ids;
  int32_t next_id = spec->model_entries;
  for (size_t i = 0; i < added.size(); ++i) {
    const Json& token = added[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!token.is_object() || !Field(token, "content").is_string()) {
      return Malformed(absl::StrCat(where, " is ", token.dump(),
                                    "; an added token has an integer id and a string content"));
    }
    if (!Field(token, "id").is_number_unsigned() ||
        token["id"].get<uint64_t>() >= static_cast<uint64_t>(kMaxTokenId)) {
      return Malformed(absl::StrCat(where, " is ", token.dump(),
                                    "; an added token has an integer id in [0, ", kMaxTokenId,
                                    ") and a string content"));
    }
    AddedTokenSpec spec_token;
    spec_token.content = token["content"].get<std::string>();
    if (spec_token.content.empty()) continue;  // the reference ignores it
    const auto file_id = static_cast<int32_t>(token["id"].get<uint64_t>());
    Reader reader;
    COIL_ASSIGN_OR_RETURN(spec_token.special, reader.Bool(token, "special", false, where));
    COIL_ASSIGN_OR_RETURN(spec_token.normalized,
                          reader.Bool(token, "normalized", !spec_token.special, where));
    COIL_ASSIGN_OR_RETURN(spec_token.lstrip, reader.Bool(token, "lstrip", false, where));
    COIL_ASSIGN_OR_RETURN(spec_token.rstrip, reader.Bool(token, "rstrip", false, where));
    COIL_ASSIGN_OR_RETURN(spec_token.single_word, reader.Bool(token, "single_word", false, where));
    if (const auto it = added_ids.find(spec_token.content); it != added_ids.end()) {
      spec_token.id = it->second;
    } else if (const auto in_vocab = ids.find(spec_token.content); in_vocab != ids.end()) {
      spec_token.id = in_vocab->second;
    } else {
      spec_token.id = next_id++;
    }
    if (spec_token.id != file_id) {
      spec->id_warnings.push_back(absl::StrCat("added token '", spec_token.content, "' (", where,
                                               ") has id ", spec_token.id, ", not ", file_id,
                                               " as the file says, as in the reference library"));
    }
    added_ids[spec_token.content] = spec_token.id;
    spec->added_tokens.push_back(std::move(spec_token));
  }
  return absl::OkStatus();
}

std::string DescribeSteps(const TokenizerSpec& spec) {
  std::vector<std::string> parts;
  std::vector<std::string> model = {"BPE"};
  if (spec.bpe.byte_level) model.push_back("byte-level");
  if (spec.bpe.byte_fallback) model.push_back("byte_fallback");
  if (spec.bpe.ignore_merges) model.push_back("ignore_merges");
  parts.push_back(absl::StrJoin(model, " "));
  static constexpr const char* kNormalizers[] = {"NFC",     "NFD",     "NFKC",  "NFKD",
                                                 "Prepend", "Replace", "Strip", "Lowercase"};
  static constexpr const char* kPreTokenizers[] = {
      "ByteLevel", "Split", "Metaspace", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit"};
  static constexpr const char* kDecoders[] = {"ByteLevel", "Metaspace", "ByteFallback",
                                              "Fuse",      "Strip",     "Replace"};
  std::vector<std::string> names;
  for (const NormalizerStep& step : spec.normalizer) {
    names.push_back(kNormalizers[static_cast<int>(step.kind)]);
  }
  if (!names.empty()) parts.push_back(absl::StrCat("normalizer ", absl::StrJoin(names, "+")));
  names.clear();
  for (const PreTokenizerStep& step : spec.pre_tokenizer) {
    std::string name = kPreTokenizers[static_cast<int>(step.kind)];
    if (step.kind == PreTokenizerStep::Kind::kSplit) {
      absl::StrAppend(&name, step.pattern.is_regex ? "(regex)" : "(string)");
    }
    names.push_back(name);
  }
  if (!names.empty()) parts.push_back(absl::StrCat("pre-tokenizer ", absl::StrJoin(names, "+")));
  names.clear();
  for (const DecoderStep& step : spec.decoder)
    names.push_back(kDecoders[static_cast<int>(step.kind)]);
  if (!names.empty()) parts.push_back(absl::StrCat("decoder ", absl::StrJoin(names, "+")));
  if (!spec.post_processor.description.empty()) {
    parts.push_back(absl::StrCat("post-processor ", spec.post_processor.description));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(absl::string_view json_text) {
  // Deserializing a string that is not valid UTF-8 (nlohmann_json does not check) would
  // make tokens that are not text; the reference refuses such a file too.
  if (const absl::Status utf8 = CheckUtf8(json_text); !utf8.ok()) {
    return Malformed(utf8.message());
  }
  TokenizerJsonReader parsed;
  const bool ok = Json::sax_parse(json_text.begin(), json_text.end(), &parsed);
  if (!ok || !parsed.error.empty()) {
    return Malformed(parsed.error.empty() ? std::string("not valid JSON") : parsed.error);
  }
  const Json& root = parsed.root;
  if (!root.is_object()) return Malformed("the top level is not a JSON object");
  const Json& model = Field(root, "model");
  if (!model.is_object()) return Malformed("no \"model\" object");
  const std::string model_type = TypeOf(model);
  if (model_type != "BPE" && !(model_type.empty() && parsed.has_merges)) {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json has model type '", model_type.empty() ? "(none)" : model_type,
                     "'; coil implements the BPE model only; use a BPE tokenizer.json"));
  }
  // The vocabulary and merges are checked first: a corrupt file is reported as corrupt,
  // whatever else it contains. Unsupported components are then reported all at once.
  TokenizerSpec spec;
  Reader reader;
  absl::flat_hash_map<std::string, int32_t> ids;
  try {
    COIL_RETURN_IF_ERROR(ReadVocab(parsed, &spec, &ids));
    COIL_RETURN_IF_ERROR(ReadMerges(parsed, ids, &spec));
    COIL_RETURN_IF_ERROR(ReadModelOptions(model, ids, &reader, &spec));
    COIL_RETURN_IF_ERROR(ReadAddedTokens(root, ids, &spec));
    COIL_RETURN_IF_ERROR(ReadNormalizer(root, &reader, &spec));
    COIL_RETURN_IF_ERROR(ReadPreTokenizer(root, &reader, &spec));
    COIL_RETURN_IF_ERROR(ReadDecoder(root, &reader, &spec));
    COIL_RETURN_IF_ERROR(ReadPostProcessor(root, &reader, &spec));
    if (!Field(root, "truncation").is_null()) {
      reader.Unsupported("truncation",
                         "truncation (coil bounds prompts itself; set \"truncation\" to null)");
    }
    // Padding to the longest sequence of a batch leaves a single sequence as it is.
    const Json& padding = Field(root, "padding");
    if (!padding.is_null() && !(Field(padding, "strategy") == "BatchLongest" &&
                                Field(padding, "pad_to_multiple_of").is_null())) {
      reader.Unsupported("padding",
                         "padding to a fixed length or multiple (set \"padding\" to null)");
    }
  } catch (const Json::exception& error) {
    return Malformed(error.what());
  }
  if (!reader.unsupported().empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.json needs what coil does not implement: ",
        absl::StrJoin(reader.unsupported(), "; "),
        ". coil implements BPE models with the normalizers NFC, NFD, NFKC, NFKD, Prepend, "
        "Replace, Strip, Lowercase; the pre-tokenizers ByteLevel (last), Split, Metaspace, "
        "Digits, Punctuation, Whitespace, WhitespaceSplit; the decoders ByteLevel, Metaspace, "
        "ByteFallback, Fuse, Strip, Replace; and the post-processors TemplateProcessing and "
        "ByteLevel"));
  }
  spec.vocab_size = static_cast<int32_t>(spec.model_tokens.size());
  for (const AddedTokenSpec& token : spec.added_tokens) {
    spec.vocab_size = std::max(spec.vocab_size, token.id + 1);
  }
  spec.description = DescribeSteps(spec);
  return spec;
}

}  // namespace coil::tokenizer
