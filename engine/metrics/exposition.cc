#include "engine/metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace coil::metrics {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

absl::Status ValidateMetricName(absl::string_view name) {
  bool ok = !name.empty();
  for (size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    ok = IsAsciiLetter(c) || c == '_' || c == ':' || (i > 0 && IsAsciiDigit(c));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metric name \"", name, "\" is invalid; use letters, digits, '_' and ':' only, ",
        "not starting with a digit"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelName(absl::string_view name) {
  bool ok = !name.empty() && !(name.size() >= 2 && name[0] == '_' && name[1] == '_');
  for (size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    ok = IsAsciiLetter(c) || c == '_' || (i > 0 && IsAsciiDigit(c));
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("label name \"", name, "\" is invalid; use letters, digits and '_' only, not ",
                     "starting with a digit or \"__\""));
  }
  return absl::OkStatus();
}

void AppendEscapedHelp(absl::string_view text, std::string* out) {
  for (const char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

void AppendEscapedLabelValue(absl::string_view value, std::string* out) {
  for (const char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '"') {
      out->append("\\\"");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

void AppendValue(double value, std::string* out) {
  if (std::isnan(value)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(value)) {
    out->append(value > 0 ? "+Inf" : "-Inf");
    return;
  }
  constexpr double kExactIntegerLimit = 9007199254740992.0;  // 2^53
  if (value == std::trunc(value) && std::fabs(value) < kExactIntegerLimit) {
    absl::StrAppend(out, static_cast<int64_t>(value));
    return;
  }
  // Shortest round-trip digits; fixed notation across the usual range so that a bucket
  // bound reads "0.0005", as dashboards' `le` matchers expect, not "5e-04".
  char buffer[64];
  const double magnitude = std::fabs(value);
  const std::to_chars_result result =
      magnitude >= 1e-6 && magnitude < 1e15
          ? std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed)
          : std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

}  // namespace coil::metrics
