// EngineLoop: rank 0's one thread that owns the scheduler and runs steps (docs/ARCHITECTURE.md §1).
// gRPC threads only Submit requests, Cancel them and read snapshots; the loop takes those
// at each step boundary, plans a step, has the executor run it on every rank, applies the
// result, detokenizes each new token incrementally, matches stop strings across token
// boundaries (holding back text that may begin one) and pushes the output into each
// request's RequestStream. Invariant: only the loop's thread calls the scheduler and the
// executor (hence MPI); when no request is live it sleeps on a condition variable. The
// front ends count each request once, by how its client saw it end (CountOutcome); when the
// engine fails (a rank lost), every stream it holds ends with the failure, from whichever
// thread reports it, even while the loop's thread is stuck in a step that cannot finish.
#ifndef COIL_ENGINE_ENGINE_LOOP_H_
#define COIL_ENGINE_ENGINE_LOOP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/metrics/coil_metrics.h"
#include "engine/request_stream.h"
#include "engine/request_validation.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "scheduler/plan.h"
#include "scheduler/scheduler.h"

namespace coil {

// Runs a plan on every rank (rank 0's StepDriver in coil-serve).
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual StepResult Run(const StepPlan& plan) = 0;
  // Ends the workers (the shutdown plan).
  virtual absl::Status Shutdown() = 0;
};

// The scheduler's live figures, refreshed after every step boundary.
struct EngineSnapshot {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t rows_free = 0;
  int32_t rows_total = 0;
  int32_t pages_free = 0;
  int32_t pages_total = 0;
  int32_t prefix_cache_rows = 0;  // rows holding snapshots: counted in rows_total, not free
  int32_t prefix_cache_pages = 0;  // pages snapshots hold: counted as used
  int64_t steps = 0;
};

class EngineLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // `tokenizer`, `executor` and `metrics` (null: none recorded) must outlive the loop.
  EngineLoop(std::unique_ptr<Scheduler> scheduler, const tokenizer::Tokenizer& tokenizer,
             StepExecutor& executor, metrics::CoilMetrics* metrics = nullptr);
  ~EngineLoop();  // drains with no grace period if still running
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void Start();

  // A fresh id for a request (unique for the server's life).
  uint64_t NextRequestId() { return next_request_id_.fetch_add(1); }

  // Queues a validated request whose output goes to `stream` (stream->request_id() is its
  // id). While draining or failed the request is refused: the refusal (UNAVAILABLE) ends
  // the stream and is returned. A full queue is reported through the stream
  // (RESOURCE_EXHAUSTED) when the loop takes the request. The front end that owns the
  // stream counts the request, once, as its client saw it end (CountOutcome).
  absl::Status Submit(std::shared_ptr<RequestStream> stream, GenerationInput input);
  // OK while the engine takes new requests; else the UNAVAILABLE that refuses one: the
  // failure, or the drain. Every front end asks it before it reads a request further, and
  // Submit refuses by the same rule.
  absl::Status CheckAccepting() const;
  // Removes a request at the next step boundary and frees its row and pages (the caller
  // has ended its stream, e.g. with CANCELLED).
  void Cancel(uint64_t request_id);
  // Counts one request by how it ended (the request counters of the metrics). Every
  // request that reaches a front end is counted exactly once, whether it was refused
  // before Submit or not; any thread.
  void CountOutcome(const StreamOutcome& outcome);
  // An end observer that counts a stream's outcome when it ends (RequestStream::ObserveEnd):
  // for a front end whose streams end where its client sees them end.
  RequestStream::EndObserver OutcomeCounter();

  // Stops taking requests; in-flight ones run until `grace` passes, then end with
  // UNAVAILABLE (the client may retry elsewhere); then the workers are shut down and the
  // loop ends.
  void BeginDrain(std::chrono::milliseconds grace);
  bool draining() const;
  // Waits for the loop to end (after BeginDrain or Fail); returns the workers' shutdown
  // status, or the failure.
  absl::Status Join();

  // The engine cannot run steps any more (a rank died, stopped or hung, or a collective
  // failed): every queued and running request ends with `status` (its message names the
  // rank), new requests are refused with it, the loop stops without sending the shutdown
  // plan, and the failure callback runs. Any thread; the first failure wins.
  void Fail(const absl::Status& status);
  // OK until Fail.
  absl::Status failure() const;
  // Runs once, on the thread that called Fail (or the loop's, for a failed collective),
  // just before the streams are ended (new requests are already refused). Set before Start.
  void OnFailure(std::function<void(const absl::Status&)> callback);

  EngineSnapshot Snapshot() const;

 private:
  struct Submission {
    std::shared_ptr<RequestStream> stream;
    GenerationInput input;
    Clock::time_point arrival;
  };
  // A live request as the loop sees it.
  struct Active {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
    std::unique_ptr<StopMatcher> stop_matcher;
    bool wants_logprobs = false;
    int32_t prompt_tokens = 0;
    int32_t completion_tokens = 0;
    int32_t cached_prompt_tokens = 0;  // as the scheduler last reported it
    Clock::time_point arrival;
    std::optional<Clock::time_point> admitted;
    std::optional<Clock::time_point> first_token;
    Clock::time_point last_token;
  };

  void Loop();
  absl::Status CheckAcceptingLocked() const;  // with mu_ held
  void Admit(Submission submission);
  // Ends a running request with `error` (its stream may have ended already) and frees its
  // row and pages.
  void EndWithError(uint64_t request_id, const absl::Status& error);
  // Forgets a stream once it has ended (it no longer needs ending on a failure).
  void Forget(uint64_t request_id);
  void RunOneStep();
  void Apply(const RequestUpdate& update);
  // Sends the final event and forgets the request.
  void End(uint64_t request_id, Active& active, StreamBatch batch, StreamFinish reason,
           std::string matched_stop);
  void PublishSnapshot();

  std::unique_ptr<Scheduler> scheduler_;  // the loop's thread only
  const tokenizer::Tokenizer& tokenizer_;
  StepExecutor& executor_;
  metrics::CoilMetrics* metrics_;
  // Scheduler counters already added to the metrics' counters.
  SchedulerCounters counted_;
  absl::flat_hash_map<uint64_t, Active> active_;  // the loop's thread only
  std::atomic<uint64_t> next_request_id_{1};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  std::vector<Submission> inbox_;
  std::vector<uint64_t> cancels_;
  // Every submitted stream not yet ended by the loop, so that Fail can end them all.
  absl::flat_hash_map<uint64_t, std::shared_ptr<RequestStream>> live_;
  bool draining_ = false;
  Clock::time_point drain_deadline_;
  std::chrono::milliseconds drain_grace_{0};
  absl::Status failure_;
  std::function<void(const absl::Status&)> on_failure_;
  EngineSnapshot snapshot_;
  absl::Status shutdown_status_;
  bool finished_ = false;

  std::thread thread_;
};

}  // namespace coil

#endif  // COIL_ENGINE_ENGINE_LOOP_H_
