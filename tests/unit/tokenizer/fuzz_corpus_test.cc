// Replays tests/fuzz/corpus/tokenizer_json/ and tokenizer_regex/ through the tokenizer's
// fuzz bodies (tests/fuzz/corpus_replay.h, tests/fuzz/fuzz_tokenizer_bodies.h).
#include "gtest/gtest.h"
#include "tests/fuzz/corpus_replay.h"
#include "tests/fuzz/fuzz_tokenizer_bodies.h"

namespace coil::tokenizer {
namespace {

TEST(FuzzCorpusTest, TokenizerJson) {
  fuzz::ReplayCorpus(COIL_FUZZ_CORPUS, "tokenizer_json", fuzz::FuzzTokenizerJson);
}
// 16 cuts: each compiles its pattern (milliseconds for one with Unicode classes), and past
// the first line a cut changes only the text.
TEST(FuzzCorpusTest, TokenizerRegex) {
  fuzz::ReplayCorpus(COIL_FUZZ_CORPUS, "tokenizer_regex", fuzz::FuzzTokenizerRegex, 16);
}

}  // namespace
}  // namespace coil::tokenizer
