#include "engine/metrics/coil_metrics.h"

#include <string>

#include "common/status_macros.h"

namespace coil::metrics {
namespace {

absl::StatusOr<Gauge*> NewGauge(Registry& registry, const std::string& name,
                                const std::string& help) {
  COIL_ASSIGN_OR_RETURN(GaugeFamily * family, registry.AddGauge(name, help));
  return family->WithLabels({});
}

absl::StatusOr<Counter*> NewCounter(Registry& registry, const std::string& name,
                                    const std::string& help) {
  COIL_ASSIGN_OR_RETURN(CounterFamily * family, registry.AddCounter(name, help));
  return family->WithLabels({});
}

absl::StatusOr<Histogram*> NewHistogram(Registry& registry, const std::string& name,
                                        const std::string& help, std::vector<double> bounds) {
  COIL_ASSIGN_OR_RETURN(HistogramFamily * family,
                        registry.AddHistogram(name, help, std::move(bounds)));
  return family->WithLabels({});
}

}  // namespace

const char* FinishReasonLabel(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
  }
  return "unknown";
}

// Bounds cover a CPU engine (tens of ms to seconds per token) and a GPU one (ms).
std::vector<double> TimeToFirstTokenBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1,
          2.5,   5,    7.5,   10,   20,    40,  80,   160, 320};
}

std::vector<double> InterTokenLatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
          0.15,  0.2,    0.3,   0.4,  0.5,  0.75, 1,    2.5,  5};
}

std::vector<double> RequestLatencyBuckets() {
  return {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120, 240, 480, 960, 1920};
}

std::vector<double> StepDurationBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
          0.1,    0.15,  0.2,    0.3,   0.5,  0.75, 1,    2.5,  5};
}

absl::StatusOr<std::unique_ptr<CoilMetrics>> CoilMetrics::Create() {
  auto metrics = std::make_unique<CoilMetrics>(Key());
  COIL_RETURN_IF_ERROR(metrics->Register());
  return metrics;
}

Counter& CoilMetrics::RequestsFailed(absl::StatusCode code) {
  int index = static_cast<int>(code);
  if (index <= 0 || index >= kNumStatusCodes) index = static_cast<int>(absl::StatusCode::kUnknown);
  return *requests_failed_[index];
}

absl::Status CoilMetrics::Register() {
  Registry& r = registry_;
  COIL_ASSIGN_OR_RETURN(
      CounterFamily * finished,
      r.AddCounter("coil_requests_finished_total",
                   "Requests that ended without an error, by finish reason.", {"reason"}));
  for (int i = 0; i < kNumFinishReasons; ++i) {
    COIL_ASSIGN_OR_RETURN(requests_finished_[i],
                          finished->WithLabels({FinishReasonLabel(static_cast<FinishReason>(i))}));
  }
  COIL_ASSIGN_OR_RETURN(
      CounterFamily * failed,
      r.AddCounter("coil_requests_failed_total",
                   "Requests that ended with an error (refused, cancelled by the client, past "
                   "their deadline, cut short by the server), by gRPC status code.", {"code"}));
  for (int i = 1; i < kNumStatusCodes; ++i) {
    COIL_ASSIGN_OR_RETURN(
        requests_failed_[i],
        failed->WithLabels({absl::StatusCodeToString(static_cast<absl::StatusCode>(i))}));
  }
  COIL_ASSIGN_OR_RETURN(
      requests_waiting_,
      NewGauge(r, "coil_requests_waiting", "Requests queued for admission (no state row yet)."));
  COIL_ASSIGN_OR_RETURN(requests_running_,
                        NewGauge(r, "coil_requests_running",
                                 "Requests holding a state row (prefilling or decoding)."));
  COIL_ASSIGN_OR_RETURN(state_rows_used_, NewGauge(r, "coil_state_rows_used",
                                                   "Recurrent-state rows held by requests."));
  COIL_ASSIGN_OR_RETURN(state_rows_free_,
                        NewGauge(r, "coil_state_rows_free", "Recurrent-state rows free."));
  COIL_ASSIGN_OR_RETURN(kv_pages_used_,
                        NewGauge(r, "coil_kv_pages_used",
                                 "KV-cache pages held by requests (attention layers only)."));
  COIL_ASSIGN_OR_RETURN(kv_pages_free_, NewGauge(r, "coil_kv_pages_free", "KV-cache pages free."));
  COIL_ASSIGN_OR_RETURN(preemptions_, NewCounter(r, "coil_preemptions_total",
                                                 "Running requests preempted for lack of KV pages "
                                                 "(re-queued and recomputed)."));
  COIL_ASSIGN_OR_RETURN(prompt_tokens_,
                        NewCounter(r, "coil_prompt_tokens_total",
                                   "Prompt tokens prefilled (recomputation counts again)."));
  COIL_ASSIGN_OR_RETURN(generated_tokens_, NewCounter(r, "coil_generated_tokens_total",
                                                      "Tokens generated and sent to clients."));
  COIL_ASSIGN_OR_RETURN(prefix_cache_hits_,
                        NewCounter(r, "coil_prefix_cache_hits_total",
                                   "Requests admitted from a prefix-cache snapshot."));
  COIL_ASSIGN_OR_RETURN(prefix_cache_misses_,
                        NewCounter(r, "coil_prefix_cache_misses_total",
                                   "Requests admitted with no prefix-cache snapshot to resume."));
  COIL_ASSIGN_OR_RETURN(prefix_cache_hit_tokens_,
                        NewCounter(r, "coil_prefix_cache_hit_tokens_total",
                                   "Prompt tokens resumed from prefix-cache snapshots, not "
                                   "computed again."));
  COIL_ASSIGN_OR_RETURN(prefix_cache_evictions_,
                        NewCounter(r, "coil_prefix_cache_evictions_total",
                                   "Prefix-cache snapshots dropped to free their state row or "
                                   "KV pages."));
  COIL_ASSIGN_OR_RETURN(prefix_cache_rows_,
                        NewGauge(r, "coil_prefix_cache_rows",
                                 "Recurrent-state rows holding prefix-cache snapshots."));
  COIL_ASSIGN_OR_RETURN(prefix_cache_pages_,
                        NewGauge(r, "coil_prefix_cache_pages",
                                 "KV pages prefix-cache snapshots hold (hybrid models; also "
                                 "counted in coil_kv_pages_used)."));
  COIL_ASSIGN_OR_RETURN(
      time_to_first_token_,
      NewHistogram(r, "coil_time_to_first_token_seconds",
                   "Time from a request's arrival to its first token.", TimeToFirstTokenBuckets()));
  COIL_ASSIGN_OR_RETURN(
      inter_token_latency_,
      NewHistogram(r, "coil_inter_token_latency_seconds",
                   "Time between consecutive tokens of one request.", InterTokenLatencyBuckets()));
  COIL_ASSIGN_OR_RETURN(request_latency_,
                        NewHistogram(r, "coil_request_latency_seconds",
                                     "Time from a request's arrival to its final response.",
                                     RequestLatencyBuckets()));
  COIL_ASSIGN_OR_RETURN(step_duration_, NewHistogram(r, "coil_step_duration_seconds",
                                                     "Duration of one engine step on every rank.",
                                                     StepDurationBuckets()));
  return absl::OkStatus();
}

}  // namespace coil::metrics
