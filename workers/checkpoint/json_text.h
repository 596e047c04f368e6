// Parses untrusted JSON (config.json, safetensors headers, index files) without
// exceptions and with limits: nesting depth at most 16, Python's `Infinity`/`-Infinity`
// tokens (which json.dumps writes, e.g. in time_step_limit) read as +-1e308, NaN refused,
// and, on request, duplicate keys in the top-level object refused (nlohmann keeps the last
// silently, which would let two entries claim one name).
#ifndef COIL_WORKERS_CHECKPOINT_JSON_TEXT_H_
#define COIL_WORKERS_CHECKPOINT_JSON_TEXT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace coil::checkpoint {

// Values at or above this magnitude stand for infinity (see above).
inline constexpr double kJsonInfinity = 1e308;

// `what` names the text in errors ("config.json", "safetensors header of x").
absl::StatusOr<nlohmann::json> ParseJsonText(absl::string_view text, absl::string_view what,
                                             bool refuse_duplicate_top_level_keys = false);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_JSON_TEXT_H_
