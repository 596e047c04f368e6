// coil's programs take GNU-style dashed flags (--max-tokens 16) while Abseil flags are named
// with underscores (max_tokens). ParseDashedCommandLine rewrites the name part of every
// "--some-flag" / "--some-flag=value" argument (never a value, never after "--") and hands
// the result to absl::ParseCommandLine, so both spellings work.
#ifndef COIL_COMMON_COMMAND_LINE_H_
#define COIL_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

namespace coil {

// The rewritten arguments (argv[0] unchanged). Exposed for tests.
std::vector<std::string> DashedFlagsToUnderscores(int argc, char** argv);

// Parses flags as absl::ParseCommandLine does and returns the positional arguments
// (argv[0] first).
std::vector<std::string> ParseDashedCommandLine(int argc, char** argv);

}  // namespace coil

#endif  // COIL_COMMON_COMMAND_LINE_H_
