// Replays tests/fuzz/corpus/<target>/ of the checkpoint and config fuzz targets through
// their bodies (tests/fuzz/corpus_replay.h); the tokenizer's are replayed by
// tests/unit/tokenizer/fuzz_corpus_test.cc.
#include "gtest/gtest.h"
#include "tests/fuzz/corpus_replay.h"
#include "tests/fuzz/fuzz_bodies.h"

namespace coil::checkpoint {
namespace {

void Replay(const char* target, void (*body)(const uint8_t*, size_t)) {
  fuzz::ReplayCorpus(COIL_FUZZ_CORPUS, target, body);
}

TEST(FuzzCorpusTest, Safetensors) { Replay("safetensors", fuzz::FuzzSafetensors); }
TEST(FuzzCorpusTest, SafetensorsIndex) { Replay("safetensors_index", fuzz::FuzzSafetensorsIndex); }
TEST(FuzzCorpusTest, TorchZip) { Replay("torch_zip", fuzz::FuzzTorchZip); }
TEST(FuzzCorpusTest, TorchPickle) { Replay("torch_pickle", fuzz::FuzzTorchPickle); }
TEST(FuzzCorpusTest, Config) { Replay("config", fuzz::FuzzConfig); }

}  // namespace
}  // namespace coil::checkpoint
