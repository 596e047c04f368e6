// Lets coil's programs take flags spelled with dashes (--max-model-len) as well as with
// underscores (--max_model_len): Abseil flag names are C++ identifiers, so the dashes of a
// flag's name (never of its value) become underscores before absl::ParseCommandLine.
#ifndef COIL_COMMON_DASHED_FLAGS_H_
#define COIL_COMMON_DASHED_FLAGS_H_

#include <algorithm>
#include <string>
#include <vector>

namespace coil {

// Rewrites argv[1..] in place (up to a "--" that ends the flags). Each rewritten argument is
// kept in `storage`, which must outlive argv's use.
inline void AcceptDashedFlags(int argc, char** argv, std::vector<std::string>& storage) {
  storage.reserve(static_cast<size_t>(argc));
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg[0] != '-' || arg[1] != '-') continue;
    const size_t end = arg.find('=');
    bool changed = false;
    for (size_t c = 2; c < std::min(end, arg.size()); ++c) {
      if (arg[c] == '-') {
        arg[c] = '_';
        changed = true;
      }
    }
    if (!changed) continue;
    storage.push_back(std::move(arg));
    argv[i] = storage.back().data();
  }
}

}  // namespace coil

#endif  // COIL_COMMON_DASHED_FLAGS_H_
