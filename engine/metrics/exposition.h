// Pieces of the Prometheus text exposition format 0.0.4 that every metric type shares:
// name validation, escaping and number formatting. Everything written here parses back
// with the format's grammar (names match [a-zA-Z_:][a-zA-Z0-9_:]*, label values and HELP
// text are escaped, values are Go-parsable floats: "+Inf", "-Inf", "NaN" or a decimal).
#ifndef COIL_ENGINE_METRICS_EXPOSITION_H_
#define COIL_ENGINE_METRICS_EXPOSITION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace coil::metrics {

// OK when `name` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*).
absl::Status ValidateMetricName(absl::string_view name);

// OK when `name` is a valid label name ([a-zA-Z_][a-zA-Z0-9_]*) that does not start with
// "__" (reserved for Prometheus itself).
absl::Status ValidateLabelName(absl::string_view name);

// HELP text: backslash becomes \\ and line feed becomes \n.
void AppendEscapedHelp(absl::string_view text, std::string* out);

// A label value: backslash, double quote and line feed become \\, \" and \n.
void AppendEscapedLabelValue(absl::string_view value, std::string* out);

// The shortest decimal text that reads back as the same double; integers below 2^53
// print without exponent ("1000000", not "1e+06"), and the special values as Prometheus
// spells them.
void AppendValue(double value, std::string* out);

}  // namespace coil::metrics

#endif  // COIL_ENGINE_METRICS_EXPOSITION_H_
