// BPE merging: small cases worked by hand, then the fast priority-queue implementation
// against the textbook GPT-2 loop (find the lowest-ranked adjacent pair, merge every
// occurrence of it left to right, repeat) over the real GPT-NeoX merges.
#include "engine/tokenizer/bpe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace coil::tokenizer {
namespace {

using ::testing::ElementsAre;

std::array<int32_t, 256> IdentityBytes() {
  std::array<int32_t, 256> bytes{};
  for (int b = 0; b < 256; ++b) bytes[b] = b;
  return bytes;
}

std::vector<int32_t> EncodeWord(const BpeModel& model, const std::string& word) {
  std::vector<int32_t> ids;
  model.Encode(word, &ids);
  return ids;
}

TEST(BpeTest, MergesByRankWorkedByHand) {
  // ab -> 256 (rank 0), bc -> 257 (rank 1), (ab)c -> 258 (rank 2), aa -> 259 (rank 3).
  const BpeModel model(IdentityBytes(),
                       {{'a', 'b', 256}, {'b', 'c', 257}, {256, 'c', 258}, {'a', 'a', 259}});
  // "abc": ab (rank 0) beats bc (rank 1); then (ab)c.
  EXPECT_THAT(EncodeWord(model, "abc"), ElementsAre(258));
  // "bcab": ab first, then bc; (bc)(ab) has no rule.
  EXPECT_THAT(EncodeWord(model, "bcab"), ElementsAre(257, 256));
  // "aaa": the leftmost aa merges; the last a is left alone.
  EXPECT_THAT(EncodeWord(model, "aaa"), ElementsAre(259, 'a'));
  EXPECT_THAT(EncodeWord(model, "abab"), ElementsAre(256, 256));
  EXPECT_THAT(EncodeWord(model, "x"), ElementsAre('x'));
  EXPECT_THAT(EncodeWord(model, "xyz"), ElementsAre('x', 'y', 'z'));
}

TEST(BpeTest, BytesWithoutATokenAreDropped) {
  std::array<int32_t, 256> bytes = IdentityBytes();
  bytes['-'] = -1;
  const BpeModel model(bytes, {{'a', 'b', 256}});
  // With '-' gone, a and b become neighbours and merge, as in the reference.
  EXPECT_THAT(EncodeWord(model, "a-b"), ElementsAre(256));
  EXPECT_THAT(EncodeWord(model, "-"), ElementsAre());
}

// The textbook loop of GPT-2's encoder.py, over token ids.
std::vector<int32_t> TextbookBpe(const TokenizerSpec& spec,
                                 const std::array<int32_t, 256>& byte_tokens,
                                 const absl::flat_hash_map<uint64_t, int>& ranks,
                                 const std::string& word) {
  std::vector<int32_t> symbols;
  for (char c : word) {
    const int32_t token = byte_tokens[static_cast<unsigned char>(c)];
    if (token >= 0) symbols.push_back(token);  // no token for the byte: dropped
  }
  const auto key = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  while (symbols.size() > 1) {
    int best = std::numeric_limits<int>::max();
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks.find(key(symbols[i], symbols[i + 1]));
      if (it != ranks.end() && it->second < best) best = it->second;
    }
    if (best == std::numeric_limits<int>::max()) break;
    const MergeRule& rule = spec.merges[best];
    std::vector<int32_t> merged;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == rule.left && symbols[i + 1] == rule.right) {
        merged.push_back(rule.result);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }
  return symbols;
}

TEST(BpeTest, MatchesTheTextbookLoopOnGptNeoxMerges) {
  std::ifstream file(COIL_GPT_NEOX_TOKENIZER);
  std::stringstream contents;
  contents << file.rdbuf();
  const absl::StatusOr<TokenizerSpec> spec = ParseTokenizerJson(contents.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::flat_hash_map<uint64_t, int> ranks;
  for (size_t rank = 0; rank < spec->merges.size(); ++rank) {
    const MergeRule& rule = spec->merges[rank];
    // A later rule for the same pair replaces an earlier one, as in the reference.
    ranks.insert_or_assign((static_cast<uint64_t>(static_cast<uint32_t>(rule.left)) << 32) |
                               static_cast<uint32_t>(rule.right),
                           static_cast<int>(rank));
  }
  // The token of each byte: the vocabulary entry spelling it in ByteLevel characters.
  std::array<int32_t, 256> byte_tokens;
  byte_tokens.fill(-1);
  for (size_t id = 0; id < spec->model_tokens.size(); ++id) {
    const std::optional<std::string> bytes = ByteLevelToBytes(spec->model_tokens[id]);
    if (spec->model_present[id] && bytes.has_value() && bytes->size() == 1) {
      byte_tokens[static_cast<unsigned char>((*bytes)[0])] = static_cast<int32_t>(id);
    }
  }
  ASSERT_TRUE(spec->bpe.byte_level);
  const BpeModel model(spec->model_tokens, spec->model_present, spec->merges, spec->bpe);
  // Words: ASCII letters (the common case), long runs, and random UTF-8-ish bytes.
  std::mt19937 rng(11);
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string word = trial % 3 == 0 ? " " : "";
    // Lengths above 48 take the priority-queue path, the others the rescanning one.
    const int length = 1 + static_cast<int>(rng() % (trial % 10 == 0 ? 200 : 12));
    for (int i = 0; i < length; ++i) {
      if (trial % 5 == 4) {
        word.push_back(static_cast<char>(0x80 + rng() % 0x40 + (i == 0 ? 0x40 : 0)));
      } else {
        word.push_back(letters[rng() % (trial % 7 == 0 ? 3 : letters.size())]);
      }
    }
    std::vector<int32_t> fast;
    model.EncodeUncached(word, &fast);
    ASSERT_EQ(fast, TextbookBpe(*spec, byte_tokens, ranks, word)) << word;
    // The cached path gives the same, the first time (filling) and the second (hit).
    ASSERT_EQ(EncodeWord(model, word), fast);
    ASSERT_EQ(EncodeWord(model, word), fast);
  }
}

}  // namespace
}  // namespace coil::tokenizer
