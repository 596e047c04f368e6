#include "engine/tokenizer/tokenizer_files.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil::tokenizer {
namespace {

bool IsRegularFile(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

}  // namespace

absl::StatusOr<std::string> ShippedTokenizerPath() {
  absl::StatusOr<std::string> path = FindDataFile(kShippedTokenizer);
  if (path.ok()) return path;
  return absl::NotFoundError(
      absl::StrCat(path.status().message(), "; or pass --tokenizer FILE"));
}

absl::StatusOr<std::string> TokenizerPathForModel(const std::string& model_dir,
                                                  const std::string& override_path) {
  if (!override_path.empty()) return override_path;
  if (!model_dir.empty()) {
    const std::filesystem::path in_model = std::filesystem::path(model_dir) / "tokenizer.json";
    if (IsRegularFile(in_model)) return in_model.string();
  }
  return ShippedTokenizerPath();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_dir,
                                                                 const std::string& override_path) {
  COIL_ASSIGN_OR_RETURN(const std::string path, TokenizerPathForModel(model_dir, override_path));
  COIL_LOG(INFO) << "tokenizer: loading " << path;
  return Tokenizer::FromFile(path);
}

}  // namespace coil::tokenizer
