// What coil-loadgen measures and how it summarizes it: one RequestRecord per request sent,
// folded into a LoadReport (throughput, latency percentiles, errors by gRPC code). The
// invariant every report keeps: completed + sum(errors_by_code) = sent.
#ifndef COIL_TESTS_LOAD_LOAD_STATS_H_
#define COIL_TESTS_LOAD_LOAD_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace coil::load {

// One request as the client saw it. Times are seconds since the start of the phase (the
// measured run or the warm-up).
struct RequestRecord {
  double sent_s = 0;
  double first_token_s = -1;  // -1: no token arrived
  double last_token_s = -1;
  double done_s = 0;
  // One entry per output token after the first: the client-observed gap before it. Tokens the
  // server folded into one message share that message's gap evenly, so the gaps of a request
  // add up to its decode time (last token minus first token).
  std::vector<double> inter_token_s;
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // of prompt_tokens, resumed from the server's prefix cache
  int32_t output_tokens = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
};

// Records that `tokens` output tokens arrived in one message at time `now_s`.
void RecordTokens(RequestRecord& record, double now_s, int tokens);

// The percentile with linear interpolation between the closest ranks (numpy's
// default): p in [0, 100] over `sorted` (ascending, non-empty).
double Percentile(const std::vector<double>& sorted, double p);

struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // 0 when count is 0
  std::vector<double> sorted;                           // the samples, ascending
};

Distribution Summarize(std::vector<double> samples);

struct LoadReport {
  int64_t sent = 0;
  int64_t completed = 0;
  std::map<std::string, int64_t> errors_by_code;  // gRPC code name -> count
  double duration_s = 0;                          // the phase's start to its end
  int64_t prompt_tokens = 0;                      // over completed requests
  int64_t output_tokens = 0;
  // The server's prefix cache, over completed requests: those that resumed from it, and
  // the prompt tokens they did not compute.
  int64_t cache_hits = 0;
  int64_t cached_prompt_tokens = 0;
  double requests_per_s = 0, output_tokens_per_s = 0, total_tokens_per_s = 0;
  Distribution ttft_s, itl_s, e2e_s;

  int64_t errors() const;
};

// The gRPC name of a status code ("RESOURCE_EXHAUSTED").
std::string CodeName(absl::StatusCode code);

// `phase_s` is how long the phase lasted (an open loop lasts its whole sending window even
// when its last request ends early); 0 takes the last completion instead.
LoadReport BuildReport(const std::vector<RequestRecord>& records, double phase_s = 0);

// The report as JSON (latencies in milliseconds); `config` and `server` are copied in as is.
// With `samples`, each latency block also lists its sorted samples (for CDF plots).
nlohmann::json ReportToJson(const LoadReport& report, const nlohmann::json& config,
                            const nlohmann::json& server, bool samples);

// A fixed-width table for a terminal.
std::string FormatTable(const LoadReport& report);

}  // namespace coil::load

#endif  // COIL_TESTS_LOAD_LOAD_STATS_H_
