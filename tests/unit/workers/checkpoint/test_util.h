// Helpers shared by the model tests: a scratch directory removed at the end of the test,
// and file helpers. Nothing here computes an expected value.
#ifndef COIL_TESTS_UNIT_WORKERS_CHECKPOINT_TEST_UTIL_H_
#define COIL_TESTS_UNIT_WORKERS_CHECKPOINT_TEST_UTIL_H_

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace coil::checkpoint::testing {

class ScratchDir {
 public:
  ScratchDir() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("coil_checkpoint_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string Sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

inline std::string Fixture(const std::string& name) {
  return ReadFileBytes(std::string(COIL_CHECKPOINT_TESTDATA) + "/" + name);
}

inline absl::Span<const uint8_t> Bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

inline std::string Text(absl::Span<const uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace coil::checkpoint::testing

#endif  // COIL_TESTS_UNIT_WORKERS_CHECKPOINT_TEST_UTIL_H_
