// A second, independent reader of the Prometheus text exposition format 0.0.4, written
// from the format's grammar for the tests: every line must be a HELP, TYPE or comment
// line or a sample line; label values and HELP text are unescaped; the samples of a
// family must follow its TYPE line as one group. CheckHistogram adds the histogram rules
// (cumulative buckets in increasing `le` order, a +Inf bucket equal to _count, a _sum).
#ifndef COIL_TESTS_UNIT_ENGINE_METRICS_EXPOSITION_PARSER_H_
#define COIL_TESTS_UNIT_ENGINE_METRICS_EXPOSITION_PARSER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coil::metrics::testing {

struct ParsedSample {
  std::string name;                           // e.g. x_bucket for a histogram x
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0.0;
};

struct ParsedFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;  // unescaped
  bool has_help = false;
  std::vector<ParsedSample> samples;
};

// Parses a whole exposition; fails naming the line that breaks the grammar.
absl::StatusOr<std::vector<ParsedFamily>> ParseExposition(const std::string& text);

// Checks the histogram rules for every label set of `family` (type histogram).
absl::Status CheckHistogram(const ParsedFamily& family);

// The family named `name`, or nullptr.
const ParsedFamily* FindFamily(const std::vector<ParsedFamily>& families, const std::string& name);

// The value of the sample `name` whose labels are exactly `labels`; NaN when absent.
double SampleValue(const ParsedFamily& family, const std::string& name,
                   const std::map<std::string, std::string>& labels);

}  // namespace coil::metrics::testing

#endif  // COIL_TESTS_UNIT_ENGINE_METRICS_EXPOSITION_PARSER_H_
