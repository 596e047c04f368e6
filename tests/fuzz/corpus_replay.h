// Replays every input in tests/fuzz/corpus/<target>/ through a fuzz target's body, in the
// normal build (the corpus replay tests of tests/unit/workers/checkpoint/ and
// tests/unit/tokenizer/): the seeds and every input saved after a finding (the regression
// tests for fuzzing) must run to completion, and so must every prefix of each, since
// truncation is the commonest damage. The bodies abort or trip the sanitizers on a bug;
// under plain ctest a crash fails the test.
#ifndef COIL_TESTS_FUZZ_CORPUS_REPLAY_H_
#define COIL_TESTS_FUZZ_CORPUS_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace coil::fuzz {

// `corpus_root` is tests/fuzz/corpus; `target` the folder, without the "fuzz_" prefix;
// `cuts` the prefixes of each input replayed besides the whole (evenly spaced).
inline void ReplayCorpus(const std::string& corpus_root, const std::string& target,
                         void (*body)(const uint8_t*, size_t), size_t cuts = 64) {
  std::filesystem::path dir = std::filesystem::path(corpus_root) / target;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream file(entry.path(), std::ios::binary);
    std::ostringstream contents;
    contents << file.rdbuf();
    const std::string bytes = contents.str();
    SCOPED_TRACE(entry.path().string());
    body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    for (size_t length = 0; length < bytes.size(); length += 1 + bytes.size() / cuts) {
      body(reinterpret_cast<const uint8_t*>(bytes.data()), length);
    }
    ++files;
  }
  EXPECT_GT(files, 0) << "no corpus in " << dir;
}

}  // namespace coil::fuzz

#endif  // COIL_TESTS_FUZZ_CORPUS_REPLAY_H_
