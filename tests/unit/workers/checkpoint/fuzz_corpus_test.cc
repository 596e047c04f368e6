// Replays every input in tests/fuzz/corpus/<target>/ through the fuzz target's body in
// the normal build: the seeds and any input saved after a finding (the regression tests
// for fuzzing) must run to completion. The bodies abort or trip the sanitizers on a bug;
// under plain ctest a crash fails this test.
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_bodies.h"
#include "tests/unit/workers/checkpoint/test_util.h"

namespace coil::checkpoint {
namespace {

void Replay(const std::string& target, void (*body)(const uint8_t*, size_t)) {
  std::filesystem::path dir = std::filesystem::path(COIL_FUZZ_CORPUS) / target;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string bytes = testing::ReadFileBytes(entry.path().string());
    SCOPED_TRACE(entry.path().string());
    body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    // Every prefix too: truncation is the commonest damage.
    for (size_t length = 0; length < bytes.size(); length += 1 + bytes.size() / 64) {
      body(reinterpret_cast<const uint8_t*>(bytes.data()), length);
    }
    ++files;
  }
  EXPECT_GT(files, 0) << "no corpus in " << dir;
}

TEST(FuzzCorpusTest, Safetensors) { Replay("safetensors", fuzz::FuzzSafetensors); }
TEST(FuzzCorpusTest, TorchZip) { Replay("torch_zip", fuzz::FuzzTorchZip); }
TEST(FuzzCorpusTest, Config) { Replay("config", fuzz::FuzzConfig); }

}  // namespace
}  // namespace coil::checkpoint
