// A tiny tokenizer.json built in the test (the 256 byte tokens, four merges, two added
// tokens) to check the pipeline options one at a time, malformed and unsupported files,
// and where LoadTokenizerForModel finds its file. The expected ids were worked out by hand
// below and agree with Hugging Face's tokenizers 0.23.2 on the same file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_files.h"

namespace coil::tokenizer {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Byte b is token b. Merges, by rank: "iĠ" 256, "Ġh" 257, "hi" 258, "Ġhi" 259. Added:
// "<s>" 260 (special, matched in the raw text), "ḱ" (U+1E31) 261 (matched after NFC).
Json TinyTokenizer() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[BytesToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  vocab["i\xC4\xA0"] = 256;
  vocab["\xC4\xA0h"] = 257;
  vocab["hi"] = 258;
  vocab["\xC4\xA0hi"] = 259;
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 260}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
        {{"id", 261}, {"content", "\xE1\xB8\xB1"}, {"special", false}, {"normalized", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", byte_level},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", {"i \xC4\xA0", "\xC4\xA0 h", "h i", "\xC4\xA0h i"}}}},
  };
}

std::unique_ptr<Tokenizer> Load(const Json& json) {
  auto tokenizer = Tokenizer::FromJson(json.dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& tokenizer, const std::string& text) {
  return tokenizer.Encode(text).value();
}

TEST(TinyTokenizerTest, SplitsThenMerges) {
  const auto tokenizer = Load(TinyTokenizer());
  ASSERT_NE(tokenizer, nullptr);
  // "hi" -> h i -> 258; " hi" -> Ġ h i: Ġh (rank 1) before hi (rank 2), then Ġh+i -> 259.
  EXPECT_THAT(Ids(*tokenizer, "hi hi"), ElementsAre(258, 259));
  EXPECT_THAT(Ids(*tokenizer, "x<s>y"), ElementsAre('x', 260, 'y'));
  EXPECT_THAT(Ids(*tokenizer, "hi <s>hi"), ElementsAre(258, ' ', 260, 258));
  // k + U+0301 is U+1E31 after NFC, then the normalized added token.
  EXPECT_THAT(Ids(*tokenizer, "k\xCC\x81"), ElementsAre(261));
  EXPECT_EQ(tokenizer->Decode({261, 260, 258}).value(), "\xE1\xB8\xB1<s>hi");
  EXPECT_EQ(tokenizer->Decode({261, 260, 258}, true).value(), "\xE1\xB8\xB1hi");
}

TEST(TinyTokenizerTest, AddPrefixSpace) {
  Json json = TinyTokenizer();
  json["pre_tokenizer"]["add_prefix_space"] = true;
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  // Each stretch between added tokens gets its own space: " hi hi", " x", " y".
  EXPECT_THAT(Ids(*tokenizer, "hi hi"), ElementsAre(259, 259));
  EXPECT_THAT(Ids(*tokenizer, "x<s>y"), ElementsAre(' ', 'x', 260, ' ', 'y'));
}

TEST(TinyTokenizerTest, WithoutTheSplitPattern) {
  Json json = TinyTokenizer();
  json["pre_tokenizer"]["use_regex"] = false;
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  // One word "hiĠhi": iĠ (rank 0) merges first, which the split would have prevented.
  EXPECT_THAT(Ids(*tokenizer, "hi hi"), ElementsAre('h', 256, 258));
}

TEST(TinyTokenizerTest, MergesAsPairsOfStrings) {
  Json json = TinyTokenizer();
  json["model"]["merges"] =
      Json::array({Json::array({"i", "\xC4\xA0"}), Json::array({"\xC4\xA0", "h"}),
                   Json::array({"h", "i"}), Json::array({"\xC4\xA0h", "i"})});
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(Ids(*tokenizer, "hi hi"), ElementsAre(258, 259));
}

absl::Status LoadStatus(const std::string& text) { return Tokenizer::FromJson(text).status(); }

TEST(MalformedTokenizerTest, BadJson) {
  const absl::Status status = LoadStatus("{\"model\": {\"type\": \"BPE\",");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("not valid JSON"));
  EXPECT_EQ(LoadStatus("[1, 2]").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(LoadStatus("{}").message()), HasSubstr("no \"model\""));
}

TEST(MalformedTokenizerTest, MergeNamingAnUnknownToken) {
  Json json = TinyTokenizer();
  json["model"]["merges"].push_back("hi zz");
  const absl::Status status = LoadStatus(json.dump());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("model.merges[4] ('hi', 'zz') names 'zz', which is not in model.vocab"));
}

TEST(MalformedTokenizerTest, MergeMakingAnUnknownToken) {
  Json json = TinyTokenizer();
  json["model"]["merges"].push_back("hi hi");
  const absl::Status status = LoadStatus(json.dump());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("makes 'hihi'"));
}

TEST(MalformedTokenizerTest, BadMergeAndVocabEntries) {
  Json json = TinyTokenizer();
  json["model"]["merges"].push_back("h i x");
  EXPECT_THAT(std::string(LoadStatus(json.dump()).message()),
              HasSubstr("two tokens separated by one space"));
  json = TinyTokenizer();
  json["model"]["vocab"]["dup"] = 258;
  EXPECT_THAT(std::string(LoadStatus(json.dump()).message()), HasSubstr("id 258 is given to both"));
  json = TinyTokenizer();
  json["model"]["vocab"]["neg"] = -5;
  EXPECT_THAT(std::string(LoadStatus(json.dump()).message()), HasSubstr("'neg' has id -5"));
  json = TinyTokenizer();
  json["added_tokens"].push_back({{"id", "seven"}, {"content", "x"}});
  EXPECT_THAT(std::string(LoadStatus(json.dump()).message()), HasSubstr("added_tokens[2]"));
}

TEST(UnsupportedTokenizerTest, OtherModelType) {
  Json json = TinyTokenizer();
  json["model"]["type"] = "WordPiece";
  const absl::Status status = LoadStatus(json.dump());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model type 'WordPiece'"));
}

// Everything a file needs that coil lacks is named, with where it sits in the file, at once.
TEST(UnsupportedTokenizerTest, NamesEachComponentAndWhereItIs) {
  Json json = TinyTokenizer();
  json["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}};
  json["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Split"},
                              {"pattern", {{"Regex", "(?<=a)b"}}},
                              {"behavior", "Isolated"},
                              {"invert", false}},
                             {{"type", "UnicodeScripts"}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}},
                             {{"type", "Digits"}, {"individual_digits", true}}}}};
  json["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  json["post_processor"] = {{"type", "RobertaProcessing"}};
  json["model"]["dropout"] = 0.1;
  json["model"]["continuing_subword_prefix"] = "##";
  json["truncation"] = {{"max_length", 512}};
  json["padding"] = {{"strategy", {{"Fixed", 512}}}, {"pad_id", 0}};
  const absl::Status status = LoadStatus(json.dump());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  const std::string message(status.message());
  for (const char* missing :
       {"normalizer.normalizers[1]: normalizer 'BertNormalizer'",
        "pre_tokenizer.pretokenizers[0].pattern: ", "a lookbehind",
        "pre_tokenizer.pretokenizers[1]: pre-tokenizer 'UnicodeScripts'",
        "pre_tokenizer.pretokenizers[3]: pre-tokenizer 'Digits' after a "
        "ByteLevel pre-tokenizer",
        "decoder: decoder 'WordPiece'", "post_processor: post-processor 'RobertaProcessing'",
        "model.dropout: BPE dropout", "model.continuing_subword_prefix", "truncation",
        "padding: padding to a fixed length"}) {
    EXPECT_THAT(message, HasSubstr(missing));
  }
}

// The added-token options, with ids worked out by hand from the rules the reference applies:
// lstrip takes the whitespace before the token into it, rstrip the whitespace after it, and
// single_word refuses a match that touches a word character (the text is then encoded as
// if the token were not there).
TEST(TinyTokenizerTest, AddedTokenOptions) {
  Json json = TinyTokenizer();
  json["added_tokens"].push_back({{"id", 262},
                                  {"content", "<l>"},
                                  {"special", true},
                                  {"normalized", false},
                                  {"lstrip", true}});
  json["added_tokens"].push_back({{"id", 263},
                                  {"content", "<r>"},
                                  {"special", true},
                                  {"normalized", false},
                                  {"rstrip", true}});
  json["added_tokens"].push_back({{"id", 264},
                                  {"content", "xy"},
                                  {"special", false},
                                  {"normalized", false},
                                  {"single_word", true}});
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  // Without lstrip "a  " would end in two space bytes.
  EXPECT_THAT(Ids(*tokenizer, "a  <l>b"), ElementsAre('a', 262, 'b'));
  EXPECT_THAT(Ids(*tokenizer, "a<r>  b"), ElementsAre('a', 263, 'b'));
  EXPECT_THAT(Ids(*tokenizer, "a <r>\n b"), ElementsAre('a', ' ', 263, 'b'));
  EXPECT_THAT(Ids(*tokenizer, "xy z"), ElementsAre(264, ' ', 'z'));
  EXPECT_THAT(Ids(*tokenizer, "axy z"), ElementsAre('a', 'x', 'y', ' ', 'z'));
  EXPECT_THAT(Ids(*tokenizer, "(xy)"), ElementsAre('(', 264, ')'));
  // Decoding gives the tokens' content, the stripped whitespace gone.
  EXPECT_EQ(tokenizer->Decode(Ids(*tokenizer, "a  <l>b")).value(), "a<l>b");
}

// Padding to a batch's longest sequence changes no single encoding: accepted.
TEST(TinyTokenizerTest, BatchLongestPaddingIsHarmless) {
  Json json = TinyTokenizer();
  json["padding"] = {{"strategy", "BatchLongest"}, {"pad_to_multiple_of", nullptr}, {"pad_id", 0}};
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(Ids(*tokenizer, "hi hi"), ElementsAre(258, 259));
}

// The reference gives an added token that is not in the vocabulary the next free id, not
// the one the file writes.
TEST(TinyTokenizerTest, AddedTokensTakeTheNextFreeId) {
  Json json = TinyTokenizer();
  json["added_tokens"].push_back({{"id", 300}, {"content", "<x>"}, {"special", true}});
  json["added_tokens"].push_back({{"id", 7}, {"content", "hi"}, {"special", true}});
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->AddedTokenId("<x>"), 262);
  EXPECT_EQ(tokenizer->AddedTokenId("hi"), 258);  // a vocabulary entry keeps its id
  EXPECT_EQ(tokenizer->vocab_size(), 263);
}

// Post-processor special tokens come only when asked for.
TEST(TinyTokenizerTest, TemplateProcessingWhenAsked) {
  Json json = TinyTokenizer();
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        "<s>:0"}},
      {"pair", Json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {260}}, {"tokens", {"<s>"}}}}}}};
  const auto tokenizer = Load(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("hi", false).value(), ElementsAre(258));
  EXPECT_THAT(tokenizer->Encode("hi", true).value(), ElementsAre(260, 258, 260));
  EXPECT_THAT(tokenizer->special_prefix(), ElementsAre(260));
  EXPECT_THAT(tokenizer->special_suffix(), ElementsAre(260));
  json["post_processor"]["special_tokens"]["<s>"]["ids"] = {9999};
  EXPECT_THAT(std::string(LoadStatus(json.dump()).message()), HasSubstr("9999"));
}

class TokenizerFilesTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("coil_tokenizer_files_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_ / "model");
    std::filesystem::create_directories(dir_ / "empty_model");
    std::ofstream(dir_ / "model" / "tokenizer.json") << TinyTokenizer().dump();
    Json other = TinyTokenizer();
    other["added_tokens"].push_back({{"id", 300}, {"content", "<x>"}, {"special", true}});
    std::ofstream(dir_ / "override.json") << other.dump();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// The files are told apart by their vocabulary sizes: the tiny one 262, the override 263
// (its "<x>" takes the next free id, 262), the shipped GPT-NeoX one 50277.
TEST_F(TokenizerFilesTest, OverrideThenModelDirectoryThenShipped) {
  const std::string model = (dir_ / "model").string();
  const std::string override_path = (dir_ / "override.json").string();
  EXPECT_EQ(LoadTokenizerForModel(model, override_path).value()->vocab_size(), 263);
  EXPECT_EQ(LoadTokenizerForModel(model, "").value()->vocab_size(), 262);
  EXPECT_EQ(LoadTokenizerForModel((dir_ / "empty_model").string(), "").value()->vocab_size(),
            50277);
  EXPECT_EQ(LoadTokenizerForModel("", "").value()->vocab_size(), 50277);
  const absl::Status missing =
      LoadTokenizerForModel(model, (dir_ / "absent.json").string()).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("absent.json"));
}

}  // namespace
}  // namespace coil::tokenizer
