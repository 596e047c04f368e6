// Variants of GPT-NeoX's tokenizer.json with other components, and each normalizer alone,
// against Hugging Face's tokenizers library: components.jsonl holds the reference's outputs
// (gen_family_vectors.mjs builds each variant by patching the file; the test patches it the
// same way). tokenizer_families_test.cc checks the variants built on Llama 2's file.
#include <gtest/gtest.h>

#include <string>

#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/tokenizer_json.h"
#include "tests/unit/tokenizer/reference_cases.h"

namespace coil::tokenizer {
namespace {

using testing_support::Json;

TEST(ComponentsTest, VariantsOfGptNeoxLikeTheReference) {
  EXPECT_GE(testing_support::CheckComponentVariants("gpt-neox", COIL_GPT_NEOX_TOKENIZER), 30);
}

// Each normalizer alone, against the reference's normalizeString of the same texts.
TEST(ComponentsTest, NormalizersLikeTheReference) {
  const std::vector<Json>& lines = testing_support::ComponentLines();
  const Json& texts = lines.at(0)["texts"];
  int checked = 0;
  for (const Json& line : lines) {
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

}  // namespace
}  // namespace coil::tokenizer
