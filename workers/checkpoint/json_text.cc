#include "workers/checkpoint/json_text.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"

namespace coil::checkpoint {

namespace {
constexpr int kMaxDepth = 16;
}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonText(absl::string_view text, absl::string_view what,
                                             bool refuse_duplicate_top_level_keys) {
  // One pass outside strings: depth limit and Python's non-standard number tokens.
  std::string clean;
  clean.reserve(text.size());
  bool in_string = false;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      clean.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        clean.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": JSON nesting deeper than ", kMaxDepth, " at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (text.substr(i, 8) == "Infinity") {
      clean.append("1e308");
      i += 7;
      continue;
    } else if (text.substr(i, 3) == "NaN") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": NaN at byte ", i, " is not a valid setting"));
    }
    clean.push_back(c);
  }

  std::set<std::string> top_keys;
  std::string duplicate;
  nlohmann::json::parser_callback_t callback =
      [&](int cb_depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (refuse_duplicate_top_level_keys && cb_depth == 1 &&
            event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!top_keys.insert(key).second && duplicate.empty()) duplicate = key;
        }
        return true;
      };
  nlohmann::json root = nlohmann::json::parse(clean, callback, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not well-formed JSON; the file is corrupt or truncated"));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": name '", duplicate, "' appears twice; names must be unique"));
  }
  return root;
}

}  // namespace coil::checkpoint
