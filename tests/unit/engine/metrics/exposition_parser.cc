#include "tests/unit/engine/metrics/exposition_parser.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace coil::metrics::testing {
namespace {

// Go's strconv.ParseFloat forms that Prometheus writes: a decimal with optional
// exponent, or the spelled specials.
const std::regex& FloatPattern() {
  static const std::regex pattern(R"([+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)");
  return pattern;
}

bool ParseFloat(const std::string& text, double* value) {
  if (text == "+Inf" || text == "Inf") {
    *value = std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == "-Inf") {
    *value = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == "NaN") {
    *value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (!std::regex_match(text, FloatPattern())) return false;
  *value = std::strtod(text.c_str(), nullptr);
  return true;
}

bool IsNameStart(char c, bool colon_ok) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
}
bool IsNameChar(char c, bool colon_ok) {
  return IsNameStart(c, colon_ok) || (c >= '0' && c <= '9');
}

// Reads a metric name (colon_ok) or label name at `pos`; empty when there is none.
std::string ReadName(const std::string& line, size_t* pos, bool colon_ok) {
  const size_t start = *pos;
  if (*pos < line.size() && IsNameStart(line[*pos], colon_ok)) {
    ++*pos;
    while (*pos < line.size() && IsNameChar(line[*pos], colon_ok)) ++*pos;
  }
  return line.substr(start, *pos - start);
}

absl::Status LineError(int line_number, const std::string& line, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line_number, " \"", line, "\": ", why));
}

// The family a sample belongs to: its own name, or for histograms the name less the
// _bucket / _sum / _count suffix.
bool BelongsTo(const ParsedFamily& family, const std::string& sample_name) {
  if (sample_name == family.name) return family.type != "histogram";
  if (family.type == "histogram") {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (sample_name == family.name + suffix) return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<ParsedFamily>> ParseExposition(const std::string& text) {
  std::vector<ParsedFamily> families;
  std::set<std::string> closed;  // families whose group of lines has ended
  std::set<std::pair<std::string, std::map<std::string, std::string>>> seen;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the exposition does not end with a line feed");
  }
  size_t start = 0;
  int line_number = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.empty()) continue;

    if (line[0] == '#') {
      const bool help = line.rfind("# HELP ", 0) == 0;
      const bool type = line.rfind("# TYPE ", 0) == 0;
      if (!help && !type) continue;  // a comment
      size_t pos = 7;
      const std::string name = ReadName(line, &pos, /*colon_ok=*/true);
      if (name.empty() || pos >= line.size() || line[pos] != ' ') {
        return LineError(line_number, line, "expected a metric name and a space");
      }
      const std::string rest = line.substr(pos + 1);
      ParsedFamily* family = families.empty() ? nullptr : &families.back();
      if (family == nullptr || family->name != name) {
        if (closed.count(name)) {
          return LineError(line_number, line, "a second group of lines for this metric");
        }
        if (family != nullptr) closed.insert(family->name);
        families.emplace_back();
        families.back().name = name;
        family = &families.back();
      }
      if (type) {
        if (!family->type.empty()) return LineError(line_number, line, "a second TYPE line");
        if (!family->samples.empty()) return LineError(line_number, line, "TYPE after samples");
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped") {
          return LineError(line_number, line, "unknown metric type");
        }
        family->type = rest;
      } else {
        if (family->has_help) return LineError(line_number, line, "a second HELP line");
        family->has_help = true;
        std::string unescaped;
        for (size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] != '\\') {
            unescaped.push_back(rest[i]);
          } else if (i + 1 < rest.size() && rest[i + 1] == '\\') {
            unescaped.push_back('\\');
            ++i;
          } else if (i + 1 < rest.size() && rest[i + 1] == 'n') {
            unescaped.push_back('\n');
            ++i;
          } else {
            return LineError(line_number, line, "a bad escape in HELP");
          }
        }
        family->help = unescaped;
      }
      continue;
    }

    ParsedSample sample;
    size_t pos = 0;
    sample.name = ReadName(line, &pos, /*colon_ok=*/true);
    if (sample.name.empty()) return LineError(line_number, line, "expected a metric name");
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      while (true) {
        if (pos < line.size() && line[pos] == '}') {
          ++pos;
          break;
        }
        const std::string label = ReadName(line, &pos, /*colon_ok=*/false);
        if (label.empty()) return LineError(line_number, line, "expected a label name");
        if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
          return LineError(line_number, line, "expected =\" after a label name");
        }
        pos += 2;
        std::string value;
        bool closed_quote = false;
        while (pos < line.size()) {
          const char c = line[pos++];
          if (c == '"') {
            closed_quote = true;
            break;
          }
          if (c != '\\') {
            value.push_back(c);
            continue;
          }
          if (pos >= line.size()) break;
          const char escaped = line[pos++];
          if (escaped == '\\') {
            value.push_back('\\');
          } else if (escaped == '"') {
            value.push_back('"');
          } else if (escaped == 'n') {
            value.push_back('\n');
          } else {
            return LineError(line_number, line, "a bad escape in a label value");
          }
        }
        if (!closed_quote) return LineError(line_number, line, "an unterminated label value");
        if (!sample.labels.emplace(label, value).second) {
          return LineError(line_number, line, "a label given twice");
        }
        if (pos < line.size() && line[pos] == ',') {
          ++pos;
        } else if (pos >= line.size() || line[pos] != '}') {
          return LineError(line_number, line, "expected , or } after a label");
        }
      }
    }
    if (pos >= line.size() || line[pos] != ' ') {
      return LineError(line_number, line, "expected a space before the value");
    }
    const std::string rest = line.substr(pos + 1);
    const size_t space = rest.find(' ');
    const std::string value_text = rest.substr(0, space);
    if (!ParseFloat(value_text, &sample.value)) {
      return LineError(line_number, line, "the value is not a float");
    }
    if (space != std::string::npos &&
        !std::regex_match(rest.substr(space + 1), std::regex(R"(-?\d+)"))) {
      return LineError(line_number, line, "the timestamp is not an integer");
    }
    if (families.empty() || !BelongsTo(families.back(), sample.name)) {
      return LineError(line_number, line,
                       "a sample outside its metric's group (no TYPE before it)");
    }
    if (families.back().type.empty()) return LineError(line_number, line, "a sample before TYPE");
    if (!seen.emplace(sample.name, sample.labels).second) {
      return LineError(line_number, line, "a duplicate sample");
    }
    families.back().samples.push_back(std::move(sample));
  }
  return families;
}

absl::Status CheckHistogram(const ParsedFamily& family) {
  if (family.type != "histogram") {
    return absl::InvalidArgumentError(absl::StrCat(family.name, " is not a histogram"));
  }
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, cumulative count) in text order
    bool has_sum = false;
    bool has_count = false;
    double count = 0.0;
  };
  std::map<std::map<std::string, std::string>, Series> series;
  for (const ParsedSample& sample : family.samples) {
    std::map<std::string, std::string> labels = sample.labels;
    if (sample.name == family.name + "_bucket") {
      auto le = labels.find("le");
      if (le == labels.end()) return absl::InvalidArgumentError("a bucket without le");
      double bound = 0.0;
      if (!ParseFloat(le->second, &bound)) {
        return absl::InvalidArgumentError(absl::StrCat("le=\"", le->second, "\" is not a float"));
      }
      labels.erase(le);
      series[labels].buckets.emplace_back(bound, sample.value);
    } else if (sample.name == family.name + "_sum") {
      series[labels].has_sum = true;
    } else {
      series[labels].has_count = true;
      series[labels].count = sample.value;
    }
  }
  for (const auto& [labels, s] : series) {
    if (s.buckets.empty() || !s.has_sum || !s.has_count) {
      return absl::InvalidArgumentError(
          absl::StrCat(family.name, ": a series lacks buckets, _sum or _count"));
    }
    for (size_t i = 1; i < s.buckets.size(); ++i) {
      if (!(s.buckets[i].first > s.buckets[i - 1].first)) {
        return absl::InvalidArgumentError(absl::StrCat(family.name, ": le not increasing"));
      }
      if (s.buckets[i].second < s.buckets[i - 1].second) {
        return absl::InvalidArgumentError(absl::StrCat(family.name, ": buckets not cumulative"));
      }
    }
    if (!std::isinf(s.buckets.back().first) || s.buckets.back().first < 0) {
      return absl::InvalidArgumentError(absl::StrCat(family.name, ": no +Inf bucket"));
    }
    if (s.buckets.back().second != s.count) {
      return absl::InvalidArgumentError(absl::StrCat(
          family.name, ": +Inf bucket ", s.buckets.back().second, " != _count ", s.count));
    }
  }
  return absl::OkStatus();
}

const ParsedFamily* FindFamily(const std::vector<ParsedFamily>& families, const std::string& name) {
  for (const ParsedFamily& family : families) {
    if (family.name == name) return &family;
  }
  return nullptr;
}

double SampleValue(const ParsedFamily& family, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (const ParsedSample& sample : family.samples) {
    if (sample.name == name && sample.labels == labels) return sample.value;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace coil::metrics::testing
