#include "common/data_files.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace coil {

std::vector<std::string> DataFileCandidates(absl::string_view relative) {
  std::vector<std::string> candidates;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return candidates;
  std::filesystem::path dir = exe.parent_path();
  for (int level = 0; level < kDataSearchLevels && dir.has_parent_path(); ++level) {
    const std::filesystem::path parent = dir.parent_path();
    if (parent == dir) break;  // the root
    dir = parent;
    candidates.push_back((dir / "share" / "coil" / std::string(relative)).lexically_normal().string());
  }
  return candidates;
}

absl::StatusOr<std::string> FindDataFile(absl::string_view relative) {
  const std::vector<std::string> candidates = DataFileCandidates(relative);
  for (const std::string& candidate : candidates) {
    std::error_code error;
    if (std::filesystem::is_regular_file(candidate, error)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(
      relative, ", shipped with coil, is not at any of: ", absl::StrJoin(candidates, ", "),
      "; install coil (cmake --install) or run the programs from the build tree they were built in"));
}

}  // namespace coil
