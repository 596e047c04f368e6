// The GPT-NeoX-20B tokenizer against Hugging Face's tokenizers library: the expected ids
// and decodes in tests/data/tokenizer/*.jsonl come from that independent implementation
// (gen_vectors.mjs). Also the invariants: decode(encode(s)) is NFC(s) (NFC as computed by
// JavaScript's String.normalize, recorded in the vectors), and streaming detokenization
// concatenates to the full decode in valid UTF-8 pieces.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_files.h"

namespace coil::tokenizer {
namespace {

using Json = nlohmann::json;

std::vector<Json> ReadJsonLines(const std::string& path) {
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
bool IsValidUtf8ByJson(const std::string& text) {
  try {
    (void)Json(text).dump();
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

class GptNeoxTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = Tokenizer::FromFile(COIL_GPT_NEOX_TOKENIZER);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    tokenizer_ = std::move(*loaded);
    vectors_ = ReadJsonLines(COIL_TOKENIZER_TEST_DATA_DIR "/gpt_neox_vectors.jsonl");
    decode_vectors_ = ReadJsonLines(COIL_TOKENIZER_TEST_DATA_DIR "/gpt_neox_decode_vectors.jsonl");
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    vectors_.clear();
    decode_vectors_.clear();
  }

  // Streams `ids` through an IncrementalDetokenizer; checks each piece is valid UTF-8.
  static std::string Stream(const std::vector<int32_t>& ids, bool skip_special) {
    IncrementalDetokenizer detokenizer(*tokenizer_, skip_special);
    std::string text;
    for (const int32_t id : ids) {
      const absl::StatusOr<std::string> piece = detokenizer.Push(id);
      EXPECT_TRUE(piece.ok()) << piece.status();
      if (!piece.ok()) return text;
      EXPECT_TRUE(IsValidUtf8ByJson(*piece)) << "piece after id " << id;
      EXPECT_LE(detokenizer.pending_bytes(), 3u);
      text += *piece;
    }
    const std::string last = detokenizer.Finish();
    EXPECT_TRUE(IsValidUtf8ByJson(last));
    return text + last;
  }

  // Loaded once for the suite: parsing the 2.4 MB file takes a noticeable fraction of a second.
  static std::unique_ptr<Tokenizer> tokenizer_;
  static std::vector<Json> vectors_;
  static std::vector<Json> decode_vectors_;
};
std::unique_ptr<Tokenizer> GptNeoxTest::tokenizer_;
std::vector<Json> GptNeoxTest::vectors_;
std::vector<Json> GptNeoxTest::decode_vectors_;

TEST_F(GptNeoxTest, HasTheReferenceVocabulary) {
  // SOURCE.md: 50,254 vocabulary entries plus added tokens up to id 50276.
  EXPECT_EQ(tokenizer_->vocab_size(), 50277);
  EXPECT_EQ(tokenizer_->AddedTokenId("<|endoftext|>"), 0);
  EXPECT_EQ(tokenizer_->AddedTokenId("<|padding|>"), 1);
  EXPECT_EQ(tokenizer_->AddedTokenId("  "), 50276);
  EXPECT_TRUE(tokenizer_->IsSpecial(0));
  EXPECT_FALSE(tokenizer_->IsSpecial(50276));
  EXPECT_FALSE(tokenizer_->IsSpecial(12092));
}

TEST_F(GptNeoxTest, EncodesLikeTheReference) {
  ASSERT_GE(vectors_.size(), 200u);
  for (const Json& vector : vectors_) {
    const std::string text = vector["text"].get<std::string>();
    const absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, vector["ids"].get<std::vector<int32_t>>()) << Json(text).dump();
  }
}

TEST_F(GptNeoxTest, DecodesLikeTheReference) {
  for (const std::vector<Json>* set : {&vectors_, &decode_vectors_}) {
    for (const Json& vector : *set) {
      const auto ids = vector["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tokenizer_->Decode(ids, false).value(), vector["decoded"].get<std::string>())
          << vector["ids"].dump();
      EXPECT_EQ(tokenizer_->Decode(ids, true).value(),
                vector["decoded_skip_special"].get<std::string>())
          << vector["ids"].dump();
    }
  }
}

TEST_F(GptNeoxTest, RoundTripGivesTheNfcText) {
  for (const Json& vector : vectors_) {
    const std::string text = vector["text"].get<std::string>();
    const std::vector<int32_t> ids = tokenizer_->Encode(text).value();
    EXPECT_EQ(tokenizer_->Decode(ids).value(), vector["nfc"].get<std::string>())
        << Json(text).dump();
  }
}

TEST_F(GptNeoxTest, StreamingConcatenatesToTheFullDecode) {
  for (const std::vector<Json>* set : {&vectors_, &decode_vectors_}) {
    for (const Json& vector : *set) {
      const auto ids = vector["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(Stream(ids, false), vector["decoded"].get<std::string>()) << vector["ids"].dump();
      EXPECT_EQ(Stream(ids, true), vector["decoded_skip_special"].get<std::string>())
          << vector["ids"].dump();
    }
  }
}

// "👍" is F0 9F 91 8D; GPT-NeoX spells it with byte-level tokens, so the first tokens
// end mid-sequence and the detokenizer must hold them back, then give the emoji whole.
TEST_F(GptNeoxTest, StreamingHoldsBackASplitEmoji) {
  const std::vector<int32_t> ids = tokenizer_->Encode("ok \xF0\x9F\x91\x8D").value();
  IncrementalDetokenizer detokenizer(*tokenizer_);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(detokenizer.Push(id).value());
  pieces.push_back(detokenizer.Finish());
  std::string joined;
  for (const std::string& piece : pieces) {
    // A piece is either free of the emoji's bytes or holds all four.
    const bool has_lead = piece.find('\xF0') != std::string::npos;
    EXPECT_EQ(has_lead, piece.find("\xF0\x9F\x91\x8D") != std::string::npos);
    joined += piece;
  }
  EXPECT_EQ(joined, "ok \xF0\x9F\x91\x8D");
  EXPECT_GT(ids.size(), 2u);  // the emoji really was split over tokens
}

TEST_F(GptNeoxTest, RefusesBadInput) {
  const auto encoded = tokenizer_->Encode("bad \xC3");
  EXPECT_EQ(encoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(encoded.status().message()), testing::HasSubstr("UTF-8"));
  const std::vector<int32_t> out_of_range = {12092, 50277};
  const auto decoded = tokenizer_->Decode(out_of_range);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(decoded.status().message()), testing::HasSubstr("50277"));
  IncrementalDetokenizer detokenizer(*tokenizer_);
  EXPECT_EQ(detokenizer.Push(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

// Encoding from several threads at once (the word cache is shared) gives the same ids.
TEST_F(GptNeoxTest, EncodesConcurrently) {
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&mismatches, t] {
      for (size_t i = t; i < vectors_.size(); i += 2) {
        const Json& vector = vectors_[i];
        const auto ids = tokenizer_->Encode(vector["text"].get<std::string>());
        if (!ids.ok() || *ids != vector["ids"].get<std::vector<int32_t>>()) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Invariant on random id sequences: byte tokens (which cut UTF-8 sequences anywhere),
// special tokens and ordinary ones, mixed. Streaming must equal the full decode.
TEST_F(GptNeoxTest, StreamingEqualsDecodeOnRandomIds) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> ids;
    const int count = 1 + static_cast<int>(rng() % 16);
    for (int i = 0; i < count; ++i) {
      switch (rng() % 4) {
        case 0:  // a byte token: GPT-NeoX ids 0..255 of the vocabulary are mostly bytes
          ids.push_back(static_cast<int32_t>(2 + rng() % 254));
          break;
        case 1:
          ids.push_back(static_cast<int32_t>(rng() % 2));  // <|endoftext|>, <|padding|>
          break;
        default:
          ids.push_back(static_cast<int32_t>(rng() % tokenizer_->vocab_size()));
      }
    }
    for (const bool skip : {false, true}) {
      ASSERT_EQ(Stream(ids, skip), tokenizer_->Decode(ids, skip).value())
          << testing::PrintToString(ids);
    }
  }
}

// Invariant on random text from NFC-stable fragments: decoding the encoding gives the
// text back unchanged.
TEST_F(GptNeoxTest, RoundTripOnRandomText) {
  const std::vector<std::string> fragments = {"the",
                                              " The",
                                              "'s",
                                              "'LL",
                                              " ",
                                              "  ",
                                              "   ",
                                              "\t",
                                              "\n",
                                              "\r\n",
                                              "42",
                                              "!?",
                                              "...",
                                              "\xC3\xA9",
                                              "\xE4\xB8\xAD",
                                              "\xF0\x9F\x98\x80",
                                              "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                                              "<|endoftext|>",
                                              "<|padding|>",
                                              "<|endoftext",
                                              "\xC2\xA0",
                                              "\xE3\x80\x80",
                                              "\x01",
                                              "x"};
  std::mt19937 rng(17);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int count = static_cast<int>(rng() % 24);
    for (int i = 0; i < count; ++i) text += fragments[rng() % fragments.size()];
    const std::vector<int32_t> ids = tokenizer_->Encode(text).value();
    ASSERT_EQ(tokenizer_->Decode(ids).value(), text) << Json(text).dump();
  }
}

TEST(ShippedTokenizerTest, IsFoundFromTheBuildTree) {
  const absl::StatusOr<std::string> path = ShippedTokenizerPath();
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_THAT(*path, testing::EndsWith("gpt-neox-20b/tokenizer.json"));
}

}  // namespace
}  // namespace coil::tokenizer
