// The scheduler: admits requests against the state-row and KV-page budgets, batches them
// continuously (every running decode gets its token first, prefill chunks fill the rest),
// splits long prompts at SSD-chunk multiples, preempts the newest request when pages run
// out, and applies the finishing rules to sampled tokens. Pure, deterministic and
// single-threaded: no gRPC, MPI or kernel headers. Invariant: every row and page is held
// by at most one live request, and all of them are free when no request is left.
//
// One step is `plan = Schedule()`, execution of the plan, then `Update(plan, result)`.
// Cancel/Finish may be called at any time between those calls.
#ifndef COIL_SCHEDULER_SCHEDULER_H_
#define COIL_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/kv_page_pool.h"
#include "scheduler/plan.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/state_row_pool.h"

namespace coil {

// A request as the engine hands it over: already tokenized and validated against the
// vocabulary and the sampling rules.
struct NewRequest {
  uint64_t request_id = 0;  // unique among live requests; the engine assigns it
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling;
  int32_t max_tokens = 0;  // output tokens; 0: up to max_model_len
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

enum class FinishReason {
  kNone,       // still running
  kLength,     // max_tokens or max_model_len reached
  kStop,       // a stop token id (or, through Finish, a stop string the engine matched)
  kEos,        // the end-of-sequence token
  kCancelled,  // Cancel
  kError,      // the step failed on a worker rank
};

// What the engine streams for one request after a step. A request preempted and
// recomputed produces no update until it samples a new token: nothing streamed is re-sent.
struct RequestUpdate {
  uint64_t request_id = 0;
  std::optional<SampledToken> token;  // the new token, when one was sampled
  FinishReason finish_reason = FinishReason::kNone;
  int32_t matched_stop_token_id = -1;  // with kStop from a stop token id
  absl::Status error;                  // INTERNAL naming the rank, with kError
  int32_t num_prompt_tokens = 0;       // usage, for the final response
  int32_t num_output_tokens = 0;
};

enum class RequestPhase { kWaiting, kRunning };

// Figures for metrics, read between steps.
struct SchedulerCounters {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t rows_free = 0;
  int32_t rows_used = 0;
  int32_t pages_free = 0;
  int32_t pages_used = 0;
  int64_t preemptions = 0;  // since start
  int32_t tokens_scheduled_last_step = 0;
  int64_t tokens_scheduled = 0;  // since start
  int64_t steps = 0;             // plans with at least one sequence
};

class Scheduler {
  // Only Create, which validates the config, can name it (the passkey idiom).
  struct ValidatedTag {
    explicit ValidatedTag() = default;
  };

 public:
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config);
  Scheduler(ValidatedTag, const SchedulerConfig& config);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (first come, first served). Refuses with INVALID_ARGUMENT a request
  // that could never run (empty prompt, prompt at or over max_model_len, prompt plus
  // max_tokens needing more KV pages than the whole pool), with RESOURCE_EXHAUSTED when
  // max_queue requests already wait, and with ALREADY_EXISTS a live request id.
  absl::Status AddRequest(NewRequest request);

  // Ends a live request at once and frees its row and pages. The engine calls it when a
  // client goes away (kCancelled), when it matched a stop string (kStop), or for any
  // reason of its own; the returned update (no token, the reason, usage) is the request's
  // final one. A request ended between Schedule and Update is skipped by that Update.
  // NOT_FOUND for an id that is not live; INVALID_ARGUMENT for kNone.
  absl::StatusOr<RequestUpdate> Finish(uint64_t request_id, FinishReason reason);
  absl::StatusOr<RequestUpdate> Cancel(uint64_t request_id) {
    return Finish(request_id, FinishReason::kCancelled);
  }

  // Plans the next step. May return a plan with no sequences (nothing can run); such a
  // plan needs no Update. A plan with sequences must be answered by Update before the
  // next Schedule.
  StepPlan Schedule();

  // Applies a step's result: appends each sampled token and applies the finishing rules
  // (EOS unless ignored, stop token ids, max_tokens, max_model_len). A failed step (or a
  // result that does not match the plan) fails the plan's requests with INTERNAL.
  // FAILED_PRECONDITION when `plan` is not the plan awaiting its result.
  absl::StatusOr<std::vector<RequestUpdate>> Update(const StepPlan& plan, const StepResult& result);

  // The plan that ends the workers.
  StepPlan ShutdownPlan();

  bool HasUnfinishedRequests() const { return !requests_.empty(); }
  std::optional<RequestPhase> Phase(uint64_t request_id) const;
  SchedulerCounters counters() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Request {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // the prompt, then the outputs so far
    int32_t num_prompt_tokens = 0;
    int32_t max_output_tokens = 0;
    SamplingParams sampling;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    // Tokens whose state (and K/V) is computed, counting those of the plan in flight:
    // it advances when the plan is made, as in vLLM.
    int32_t num_computed_tokens = 0;
    bool running = false;
    uint64_t scheduled_step = 0;  // the last plan that included it
    StateRow row;
    KvBlocks blocks;

    int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
    int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  };

  // A request's share of the step being planned.
  struct Scheduled {
    Request* request;
    int32_t num_tokens;
  };

  // One token from carried state: the request's next step is exactly its last token.
  static bool IsDecode(const Request& request);
  // The longest run of `request`'s pending tokens within `budget` that ends at an SSD
  // chunk multiple or at its last token; 0 when none fits.
  int32_t ChunkLength(const Request& request, int32_t budget) const;
  // Grows the request's block table to cover num_tokens positions; always true for a
  // model without attention layers.
  bool GrowPages(Request* request, int32_t num_tokens);
  // Frees the newest running request's row and pages and queues it first to recompute.
  Request* PreemptNewest();
  // Frees a request's row and pages and forgets it.
  void Release(Request* request);
  // A token-less update ending the request with `reason`, with its usage.
  static RequestUpdate FinalUpdate(const Request& request, FinishReason reason);
  FinishReason CheckFinished(const Request& request, int32_t token, int32_t* matched) const;
  // Cuts the request's run into the plan and advances its computed tokens.
  ScheduledSequence MakeSequence(const Scheduled& scheduled, uint64_t step_id);
  std::vector<RequestUpdate> FailStep(const StepPlan& plan, const absl::Status& error);

  SchedulerConfig config_;
  StateRowPool rows_;
  KvPagePool pages_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<Request*> running_;  // in admission order: the newest is at the back
  uint64_t last_step_id_ = 0;
  uint64_t awaiting_update_step_ = 0;  // 0: no plan awaits its result
  int64_t preemptions_ = 0;
  int32_t tokens_scheduled_last_step_ = 0;
  int64_t tokens_scheduled_ = 0;
  int64_t steps_ = 0;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_SCHEDULER_H_
