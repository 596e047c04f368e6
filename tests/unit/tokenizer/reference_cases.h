// Test helpers: reading the reference library's expected outputs (tests/data/tokenizer,
// written by gen_vectors.mjs and gen_family_vectors.mjs) and checking a Tokenizer against
// them: encoding with and without special tokens, decoding with and without them, and
// streaming, which must give the full decode in valid UTF-8 pieces.
#ifndef COIL_TESTS_UNIT_TOKENIZER_REFERENCE_CASES_H_
#define COIL_TESTS_UNIT_TOKENIZER_REFERENCE_CASES_H_

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil::tokenizer::testing_support {

using Json = nlohmann::json;

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

inline std::vector<Json> ReadJsonLines(const std::string& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file) << "cannot open " << path;
  std::vector<Json> lines;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty()) lines.push_back(Json::parse(line));
  }
  return lines;
}

// True when `text` is valid UTF-8, by nlohmann_json's own checker (independent of coil's):
// dumping a string with invalid UTF-8 throws.
inline bool IsValidUtf8ByJson(const std::string& text) {
  try {
    (void)Json(text).dump();
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

// Streams `ids` through an IncrementalDetokenizer; checks that each piece is valid UTF-8.
inline std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                          bool skip_special) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special);
  std::string text;
  for (const int32_t id : ids) {
    const absl::StatusOr<std::string> piece = detokenizer.Push(id);
    EXPECT_TRUE(piece.ok()) << piece.status();
    if (!piece.ok()) return text;
    EXPECT_TRUE(IsValidUtf8ByJson(*piece)) << "piece after id " << id;
    text += *piece;
  }
  const std::string last = detokenizer.Finish();
  EXPECT_TRUE(IsValidUtf8ByJson(last));
  return text + last;
}

inline std::vector<int32_t> Ids(const Json& value) { return value.get<std::vector<int32_t>>(); }

// Checks one expected case: {"text", "ids", "ids_special", "decoded", "decoded_special",
// "decoded_special_skip"} for a text, or {"decode_ids", "decoded", "decoded_skip"} for an
// id list. `text` is the case's text (components give an index instead). Returns false
// after the first failure so that a broken tokenizer does not flood the log.
inline bool CheckCase(const Tokenizer& tokenizer, const Json& expected, const std::string& text,
                      const std::string& where) {
  const std::string label = where + " " + Json(text).dump();
  if (expected.contains("decode_ids")) {
    const std::vector<int32_t> ids = Ids(expected["decode_ids"]);
    const std::string id_label = where + " ids " + expected["decode_ids"].dump();
    const auto decoded = tokenizer.Decode(ids, false);
    const auto skipped = tokenizer.Decode(ids, true);
    EXPECT_TRUE(decoded.ok() && skipped.ok()) << id_label;
    if (!decoded.ok() || !skipped.ok()) return false;
    EXPECT_EQ(*decoded, expected["decoded"].get<std::string>()) << id_label;
    EXPECT_EQ(*skipped, expected["decoded_skip"].get<std::string>()) << id_label;
    EXPECT_EQ(Stream(tokenizer, ids, false), *decoded) << "streaming " << id_label;
    EXPECT_EQ(Stream(tokenizer, ids, true), *skipped) << "streaming " << id_label;
    return !::testing::Test::HasFailure();
  }
  const auto ids = tokenizer.Encode(text, false);
  const auto ids_special = tokenizer.Encode(text, true);
  EXPECT_TRUE(ids.ok() && ids_special.ok()) << label;
  if (!ids.ok() || !ids_special.ok()) return false;
  EXPECT_EQ(*ids, Ids(expected["ids"])) << label;
  EXPECT_EQ(*ids_special, Ids(expected["ids_special"])) << label << " with special tokens";
  // The decodes of the expected ids, so that a decoding fault shows on its own.
  const std::vector<int32_t> want = Ids(expected["ids"]);
  const std::vector<int32_t> want_special = Ids(expected["ids_special"]);
  EXPECT_EQ(tokenizer.Decode(want, false).value(), expected["decoded"].get<std::string>()) << label;
  EXPECT_EQ(tokenizer.Decode(want_special, false).value(),
            expected["decoded_special"].get<std::string>())
      << label;
  EXPECT_EQ(tokenizer.Decode(want_special, true).value(),
            expected["decoded_special_skip"].get<std::string>())
      << label;
  EXPECT_EQ(Stream(tokenizer, want_special, false), expected["decoded_special"].get<std::string>())
      << "streaming " << label;
  EXPECT_EQ(Stream(tokenizer, want_special, true),
            expected["decoded_special_skip"].get<std::string>())
      << "streaming " << label;
  return !::testing::Test::HasFailure();
}

// Invariant: streaming random ids (byte tokens, which cut UTF-8 anywhere; special tokens;
// any token) gives the full decode, with and without special tokens.
inline void CheckStreamingOnRandomIds(const Tokenizer& tokenizer, uint32_t seed, int trials) {
  std::vector<int32_t> bytes;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = tokenizer.TokenId(name); id.has_value()) bytes.push_back(*id);
  }
  std::vector<int32_t> specials;
  for (const AddedTokenSpec& token : tokenizer.added_tokens()) {
    if (token.special) specials.push_back(token.id);
  }
  std::mt19937 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<int32_t> ids;
    const int count = 1 + static_cast<int>(rng() % 16);
    while (static_cast<int>(ids.size()) < count) {
      const uint32_t kind = rng() % 4;
      int32_t id = static_cast<int32_t>(rng() % static_cast<uint32_t>(tokenizer.vocab_size()));
      if (kind == 0 && !bytes.empty()) id = bytes[rng() % bytes.size()];
      if (kind == 1 && !specials.empty()) id = specials[rng() % specials.size()];
      if (tokenizer.CheckId(id).ok()) ids.push_back(id);
    }
    for (const bool skip : {false, true}) {
      ASSERT_EQ(Stream(tokenizer, ids, skip), tokenizer.Decode(ids, skip).value())
          << ::testing::PrintToString(ids) << (skip ? " skipping special tokens" : "");
    }
  }
}

// The lines of components.jsonl (read once): {"texts"} first, then variants and normalizers.
inline const std::vector<Json>& ComponentLines() {
  static const std::vector<Json>* const lines = new std::vector<Json>(
      ReadJsonLines(std::string(COIL_TOKENIZER_TEST_DATA_DIR) + "/components.jsonl"));
  return *lines;
}

// The variant of `base` that `patch` describes, as gen_family_vectors.mjs builds it:
// top-level keys replaced, "model" keys merged, "added_tokens_extra" appended with ids from
// the vocabulary's size on.
inline Json ApplyPatch(Json base, const Json& patch) {
  for (const auto& [key, value] : patch.items()) {
    if (key == "model") {
      for (const auto& [field, setting] : value.items()) base["model"][field] = setting;
    } else if (key == "added_tokens_extra") {
      auto next = static_cast<int64_t>(base["model"]["vocab"].size() + base["added_tokens"].size());
      for (Json token : value) {
        token["id"] = next++;
        base["added_tokens"].push_back(token);
      }
    } else {
      base[key] = value;
    }
  }
  return base;
}

// Checks every variant of components.jsonl built on `base` (read from `base_path`) against
// its cases; returns how many variants it checked.
inline int CheckComponentVariants(const std::string& base, const std::string& base_path) {
  const std::vector<Json>& lines = ComponentLines();
  const Json& texts = lines.at(0)["texts"];
  Json base_json;
  int checked = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const Json& variant = lines[i];
    if (!variant.contains("base") || variant["base"] != base) continue;
    if (base_json.is_null()) base_json = Json::parse(ReadFileOrEmpty(base_path));
    const std::string name = variant["name"].get<std::string>();
    auto tokenizer = Tokenizer::FromJson(ApplyPatch(base_json, variant["patch"]).dump());
    EXPECT_TRUE(tokenizer.ok()) << name << ": " << tokenizer.status();
    if (!tokenizer.ok()) continue;
    for (const Json& expected : variant["cases"]) {
      const std::string text =
          expected.contains("text") ? texts[expected["text"].get<size_t>()].get<std::string>() : "";
      if (!CheckCase(**tokenizer, expected, text, name)) break;
    }
    ++checked;
  }
  return checked;
}

}  // namespace coil::tokenizer::testing_support

#endif  // COIL_TESTS_UNIT_TOKENIZER_REFERENCE_CASES_H_
