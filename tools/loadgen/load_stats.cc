#include "tools/loadgen/load_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace coil::load {

void RecordTokens(RequestRecord& record, double now_s, int tokens) {
  if (tokens <= 0) return;
  if (record.first_token_s < 0) {
    // Tokens that came with the first one arrived with no gap.
    record.first_token_s = now_s;
    record.inter_token_s.insert(record.inter_token_s.end(), tokens - 1, 0.0);
  } else {
    record.inter_token_s.insert(record.inter_token_s.end(), tokens,
                                (now_s - record.last_token_s) / tokens);
  }
  record.last_token_s = now_s;
  record.output_tokens += tokens;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return sorted[lower] + (sorted[upper] - sorted[lower]) * fraction;
}

Distribution Summarize(std::vector<double> samples) {
  Distribution d;
  std::sort(samples.begin(), samples.end());
  d.count = static_cast<int64_t>(samples.size());
  if (!samples.empty()) {
    d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(d.count);
    d.p50 = Percentile(samples, 50);
    d.p90 = Percentile(samples, 90);
    d.p99 = Percentile(samples, 99);
    d.max = samples.back();
  }
  d.sorted = std::move(samples);
  return d;
}

int64_t LoadReport::errors() const {
  int64_t n = 0;
  for (const auto& [code, count] : errors_by_code) n += count;
  return n;
}

std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);  // gRPC's spelling: "RESOURCE_EXHAUSTED"
  return name.empty() ? absl::StrFormat("CODE_%d", static_cast<int>(code)) : name;
}

LoadReport BuildReport(const std::vector<RequestRecord>& records, double phase_s) {
  LoadReport report;
  report.sent = static_cast<int64_t>(records.size());
  std::vector<double> ttft, itl, e2e;
  double last_done = 0;
  for (const RequestRecord& r : records) {
    last_done = std::max(last_done, r.done_s);
    if (r.code != absl::StatusCode::kOk) {
      ++report.errors_by_code[CodeName(r.code)];
      continue;
    }
    ++report.completed;
    report.prompt_tokens += r.prompt_tokens;
    report.output_tokens += r.output_tokens;
    report.cached_prompt_tokens += r.cached_prompt_tokens;
    report.cache_hits += r.cached_prompt_tokens > 0 ? 1 : 0;
    e2e.push_back(r.done_s - r.sent_s);
    if (r.first_token_s >= 0) ttft.push_back(r.first_token_s - r.sent_s);
    itl.insert(itl.end(), r.inter_token_s.begin(), r.inter_token_s.end());
  }
  // From the phase's start, not the first send: an open loop's first arrival comes after a
  // random gap that is part of the offered load.
  report.duration_s = std::max(phase_s, last_done);
  if (report.duration_s > 0) {
    report.requests_per_s = static_cast<double>(report.completed) / report.duration_s;
    report.output_tokens_per_s = static_cast<double>(report.output_tokens) / report.duration_s;
    report.total_tokens_per_s =
        static_cast<double>(report.prompt_tokens + report.output_tokens) / report.duration_s;
  }
  report.ttft_s = Summarize(std::move(ttft));
  report.itl_s = Summarize(std::move(itl));
  report.e2e_s = Summarize(std::move(e2e));
  return report;
}

namespace {

nlohmann::json DistributionMs(const Distribution& d, bool samples) {
  nlohmann::json j = {{"count", d.count},   {"mean", d.mean * 1e3}, {"p50", d.p50 * 1e3},
                      {"p90", d.p90 * 1e3}, {"p99", d.p99 * 1e3},   {"max", d.max * 1e3}};
  if (samples) {
    std::vector<double> ms(d.sorted.size());
    std::transform(d.sorted.begin(), d.sorted.end(), ms.begin(), [](double s) { return s * 1e3; });
    j["samples"] = std::move(ms);
  }
  return j;
}

}  // namespace

nlohmann::json ReportToJson(const LoadReport& report, const nlohmann::json& config,
                            const nlohmann::json& server, bool samples) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [code, count] : report.errors_by_code) errors[code] = count;
  return {
      {"config", config},
      {"server", server},
      {"counts",
       {{"sent", report.sent},
        {"completed", report.completed},
        {"errors", report.errors()},
        {"errors_by_code", errors}}},
      {"duration_s", report.duration_s},
      {"tokens",
       {{"prompt", report.prompt_tokens},
        {"output", report.output_tokens},
        {"cached_prompt", report.cached_prompt_tokens}}},
      {"prefix_cache",
       {{"hit_requests", report.cache_hits},
        {"hit_rate", report.completed > 0 ? static_cast<double>(report.cache_hits) /
                                                static_cast<double>(report.completed)
                                          : 0.0},
        {"token_hit_rate", report.prompt_tokens > 0
                               ? static_cast<double>(report.cached_prompt_tokens) /
                                     static_cast<double>(report.prompt_tokens)
                               : 0.0}}},
      {"throughput",
       {{"requests_per_s", report.requests_per_s},
        {"output_tokens_per_s", report.output_tokens_per_s},
        {"total_tokens_per_s", report.total_tokens_per_s}}},
      {"ttft_ms", DistributionMs(report.ttft_s, samples)},
      {"itl_ms", DistributionMs(report.itl_s, samples)},
      {"e2e_ms", DistributionMs(report.e2e_s, samples)},
  };
}

std::string FormatTable(const LoadReport& report) {
  std::string out;
  absl::StrAppendFormat(&out, "requests      sent %d, completed %d, errors %d\n", report.sent,
                        report.completed, report.errors());
  for (const auto& [code, count] : report.errors_by_code) {
    absl::StrAppendFormat(&out, "  %-22s %d\n", code, count);
  }
  absl::StrAppendFormat(&out, "duration      %.2f s\n", report.duration_s);
  absl::StrAppendFormat(&out, "tokens        prompt %d, output %d\n", report.prompt_tokens,
                        report.output_tokens);
  absl::StrAppendFormat(
      &out, "prefix cache  %d of %d requests hit, %d of %d prompt tokens (%.1f%%)\n",
      report.cache_hits, report.completed, report.cached_prompt_tokens, report.prompt_tokens,
      report.prompt_tokens > 0
          ? 100.0 * report.cached_prompt_tokens / static_cast<double>(report.prompt_tokens)
          : 0.0);
  absl::StrAppendFormat(&out, "throughput    %.2f req/s, %.1f output tok/s, %.1f total tok/s\n",
                        report.requests_per_s, report.output_tokens_per_s,
                        report.total_tokens_per_s);
  absl::StrAppendFormat(&out, "%-12s %8s %10s %10s %10s %10s %10s\n", "latency (ms)", "count",
                        "mean", "p50", "p90", "p99", "max");
  const auto row = [&out](const char* name, const Distribution& d) {
    absl::StrAppendFormat(&out, "%-12s %8d %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, d.count,
                          d.mean * 1e3, d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3, d.max * 1e3);
  };
  row("TTFT", report.ttft_s);
  row("ITL", report.itl_s);
  row("E2E", report.e2e_s);
  return out;
}

}  // namespace coil::load
