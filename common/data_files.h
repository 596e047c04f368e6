// Where coil's programs find the data shipped with them (the GPT-NeoX-20B tokenizer): in
// share/coil/ of the prefix they are installed in (<exe dir>/../share/coil/), or, in a build
// tree, in the share/coil/ the build writes at its top, found by looking in share/coil/ of
// each directory above the executable's. Never in the source tree, so an installed program
// does not depend on the checkout it was built from.
#ifndef COIL_COMMON_DATA_FILES_H_
#define COIL_COMMON_DATA_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil {

// The places `relative` (e.g. "gpt-neox-20b/tokenizer.json") is looked for, in order:
// <dir>/share/coil/<relative> for each of the first kDataSearchLevels directories above the
// executable's (its parent first: the install prefix).
inline constexpr int kDataSearchLevels = 4;
std::vector<std::string> DataFileCandidates(absl::string_view relative);

// The first candidate that is a regular file; NOT_FOUND listing every candidate otherwise.
absl::StatusOr<std::string> FindDataFile(absl::string_view relative);

}  // namespace coil

#endif  // COIL_COMMON_DATA_FILES_H_
