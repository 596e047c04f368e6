// The metrics coil-serve exports, named once here so that dashboards and alerts have one
// list to follow. Every name starts with `coil_`, says its unit (`_seconds`, `_tokens`)
// and ends in `_total` when it is a counter. Every labelled series exists from the start
// (at zero), so a rate() over it is defined before the first event.
#ifndef COIL_ENGINE_METRICS_COIL_METRICS_H_
#define COIL_ENGINE_METRICS_COIL_METRICS_H_

#include <array>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/metrics/registry.h"

namespace coil::metrics {

// How a request ended without an error. Mirrors the finish reasons coil.v1.FinishReason
// sends, kept here so that the metrics library needs no Protobuf. A request that ends any
// other way (refused, cancelled by its client, past its deadline, cut short by the server)
// ends with an error code and is counted by that code.
enum class FinishReason { kLength = 0, kStop = 1, kEos = 2 };
inline constexpr int kNumFinishReasons = 3;

// The `reason` label value: "length", "stop" or "eos".
const char* FinishReasonLabel(FinishReason reason);

// Bucket upper bounds (seconds) of the latency histograms.
std::vector<double> TimeToFirstTokenBuckets();
std::vector<double> InterTokenLatencyBuckets();
std::vector<double> RequestLatencyBuckets();
std::vector<double> StepDurationBuckets();

class CoilMetrics {
 public:
  static absl::StatusOr<std::unique_ptr<CoilMetrics>> Create();

  // Only Create() can make the key: a CoilMetrics is always fully registered.
  class Key {
    friend class CoilMetrics;
    Key() = default;
  };
  explicit CoilMetrics(Key) {}

  const Registry& registry() const { return registry_; }

  // coil_requests_finished_total{reason}: requests that ended without an error.
  Counter& RequestsFinished(FinishReason reason) {
    return *requests_finished_[static_cast<int>(reason)];
  }
  // coil_requests_failed_total{code}: requests that ended with an error, by status code
  // name ("INVALID_ARGUMENT", ...): CANCELLED when the client cancelled, DEADLINE_EXCEEDED
  // when its deadline passed, UNAVAILABLE when the server drained or lost a rank. An
  // unknown code counts as UNKNOWN. Every request is counted exactly once, in one of the
  // two families, so their sum is the number of requests received.
  Counter& RequestsFailed(absl::StatusCode code);

  Gauge& requests_waiting() { return *requests_waiting_; }    // coil_requests_waiting
  Gauge& requests_running() { return *requests_running_; }    // coil_requests_running
  Gauge& state_rows_used() { return *state_rows_used_; }      // coil_state_rows_used
  Gauge& state_rows_free() { return *state_rows_free_; }      // coil_state_rows_free
  Gauge& kv_pages_used() { return *kv_pages_used_; }          // coil_kv_pages_used
  Gauge& kv_pages_free() { return *kv_pages_free_; }          // coil_kv_pages_free
  Counter& preemptions() { return *preemptions_; }            // coil_preemptions_total
  Counter& prompt_tokens() { return *prompt_tokens_; }        // coil_prompt_tokens_total
  Counter& generated_tokens() { return *generated_tokens_; }  // coil_generated_tokens_total
  // The prefix cache: coil_prefix_cache_hits_total, _misses_total (admissions that did or
  // did not resume from a snapshot), _hit_tokens_total (prompt tokens not computed again),
  // _evictions_total (snapshots dropped for their row or pages), coil_prefix_cache_rows
  // (state rows holding snapshots) and coil_prefix_cache_pages (KV pages they hold).
  Counter& prefix_cache_hits() { return *prefix_cache_hits_; }
  Counter& prefix_cache_misses() { return *prefix_cache_misses_; }
  Counter& prefix_cache_hit_tokens() { return *prefix_cache_hit_tokens_; }
  Counter& prefix_cache_evictions() { return *prefix_cache_evictions_; }
  Gauge& prefix_cache_rows() { return *prefix_cache_rows_; }
  Gauge& prefix_cache_pages() { return *prefix_cache_pages_; }

  // coil_time_to_first_token_seconds: arrival to the first generated token.
  Histogram& time_to_first_token() { return *time_to_first_token_; }
  // coil_inter_token_latency_seconds: between consecutive tokens of one request.
  Histogram& inter_token_latency() { return *inter_token_latency_; }
  // coil_request_latency_seconds: arrival to the final response (end to end).
  Histogram& request_latency() { return *request_latency_; }
  // coil_step_duration_seconds: one engine step (schedule, forward on every rank, update).
  Histogram& step_duration() { return *step_duration_; }

 private:
  absl::Status Register();

  static constexpr int kNumStatusCodes = 17;  // OK (unused) .. UNAUTHENTICATED

  Registry registry_;
  std::array<Counter*, kNumFinishReasons> requests_finished_{};
  std::array<Counter*, kNumStatusCodes> requests_failed_{};
  Gauge* requests_waiting_ = nullptr;
  Gauge* requests_running_ = nullptr;
  Gauge* state_rows_used_ = nullptr;
  Gauge* state_rows_free_ = nullptr;
  Gauge* kv_pages_used_ = nullptr;
  Gauge* kv_pages_free_ = nullptr;
  Counter* preemptions_ = nullptr;
  Counter* prompt_tokens_ = nullptr;
  Counter* generated_tokens_ = nullptr;
  Counter* prefix_cache_hits_ = nullptr;
  Counter* prefix_cache_misses_ = nullptr;
  Counter* prefix_cache_hit_tokens_ = nullptr;
  Counter* prefix_cache_evictions_ = nullptr;
  Gauge* prefix_cache_rows_ = nullptr;
  Gauge* prefix_cache_pages_ = nullptr;
  Histogram* time_to_first_token_ = nullptr;
  Histogram* inter_token_latency_ = nullptr;
  Histogram* request_latency_ = nullptr;
  Histogram* step_duration_ = nullptr;
};

}  // namespace coil::metrics

#endif  // COIL_ENGINE_METRICS_COIL_METRICS_H_
