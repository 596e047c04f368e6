#include "engine/tokenizer/tokenizer_files.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil::tokenizer {
namespace {

bool IsRegularFile(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

}  // namespace

std::vector<std::string> ShippedTokenizerCandidates() {
  std::vector<std::string> candidates;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path dir = exe.parent_path();
    candidates.push_back((dir / ".." / "share" / "coil" / "gpt-neox-20b" / "tokenizer.json")
                             .lexically_normal()
                             .string());
    candidates.push_back((dir / "gpt-neox-20b" / "tokenizer.json").string());
  }
#ifdef COIL_TOKENIZER_SOURCE_FILE
  candidates.push_back(COIL_TOKENIZER_SOURCE_FILE);
#endif
  return candidates;
}

absl::StatusOr<std::string> ShippedTokenizerPath() {
  const std::vector<std::string> candidates = ShippedTokenizerCandidates();
  for (const std::string& candidate : candidates) {
    if (IsRegularFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("the GPT-NeoX-20B tokenizer.json shipped with coil is not at any of: ",
                   absl::StrJoin(candidates, ", "), "; reinstall coil or pass --tokenizer FILE"));
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
