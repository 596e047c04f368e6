#include "common/command_line.h"

#include "absl/flags/parse.h"

namespace coil {

std::vector<std::string> DashedFlagsToUnderscores(int argc, char** argv) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(argc));
  bool flags_ended = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && !flags_ended && arg == "--") flags_ended = true;
    if (i > 0 && !flags_ended && arg.size() > 2 && arg[0] == '-') {
      const size_t name_begin = arg[1] == '-' ? 2 : 1;
      const size_t name_end = std::min(arg.find('='), arg.size());
      for (size_t j = name_begin; j < name_end; ++j) {
        if (arg[j] == '-') arg[j] = '_';
      }
    }
    out.push_back(std::move(arg));
  }
  return out;
}

std::vector<std::string> ParseDashedCommandLine(int argc, char** argv) {
  std::vector<std::string> rewritten = DashedFlagsToUnderscores(argc, argv);
  std::vector<char*> pointers;
  pointers.reserve(rewritten.size() + 1);
  for (std::string& arg : rewritten) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(rewritten.size()), pointers.data());
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace coil
