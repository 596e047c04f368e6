// The scheduler: admits requests against the state-row and KV-page budgets, batches them
// continuously (every running decode gets its token first, prefill chunks fill the rest),
// splits long prompts at SSD-chunk multiples, preempts the newest request when pages run
// out, and applies the finishing rules to sampled tokens. With the prefix cache on it also
// keeps snapshots of prompts' states in rows no request holds (and shares a hybrid's pages
// of those prefixes), resumes a new prompt from the longest one it starts with, and evicts
// them, least recently used first, whenever a row or page is wanted. Pure, deterministic
// and single-threaded: no gRPC, MPI or kernel headers. Invariant: every row is held by at
// most one live request or snapshot; a page is held by at most one live request unless it
// is a whole page of a snapshot's prefix, which nobody writes; when no request is left,
// every row and page is free or a snapshot's.
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
#include "scheduler/prefix_cache.h"
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
  // With the prefix cache on: also keep the state after this many prompt tokens (rounded
  // down to a chunk multiple), e.g. the end of a system prompt. 0: only the default, the
  // end of the prompt's last whole chunk.
  int32_t cache_prefix_tokens = 0;
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
  int32_t num_cached_tokens = 0;  // prompt tokens resumed from the prefix cache, not computed
};

enum class RequestPhase { kWaiting, kRunning };

// Figures for metrics, read between steps.
struct SchedulerCounters {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t rows_free = 0;
  int32_t rows_used = 0;  // held by requests
  int32_t pages_free = 0;
  int32_t pages_used = 0;
  int64_t preemptions = 0;  // since start
  int32_t tokens_scheduled_last_step = 0;
  int64_t tokens_scheduled = 0;  // since start
  int64_t steps = 0;             // plans with at least one sequence
  // The prefix cache. Rows it holds (snapshots, and those a plan in flight is taking)
  // are neither free nor used: rows_free + rows_used + prefix_cache_rows = state_rows.
  int32_t prefix_cache_rows = 0;
  // KV pages snapshots hold (counted in pages_used; some may be held by requests too).
  int32_t prefix_cache_pages = 0;
  int64_t prefix_cache_hits = 0;        // admissions that resumed from a snapshot
  int64_t prefix_cache_hit_tokens = 0;  // prompt tokens those skipped
  int64_t prefix_cache_misses = 0;      // admissions that found none
  int64_t prefix_cache_evictions = 0;   // snapshots dropped for their row
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
  // max_tokens needing more KV pages than the whole pool, cache_prefix_tokens outside
  // [0, prompt length]), with RESOURCE_EXHAUSTED when max_queue requests already wait,
  // and with ALREADY_EXISTS a live request id.
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
  // (EOS unless ignored, stop token ids, max_tokens, max_model_len), and files the plan's
  // snapshots in the prefix cache (even those of requests ended meanwhile: the workers
  // took them). A failed step (or a result that does not match the plan) fails the plan's
  // requests with INTERNAL and drops its snapshots. FAILED_PRECONDITION when `plan` is
  // not the plan awaiting its result.
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
    bool admitted_before = false;  // admitted at least once (a preempted one is recomputed)
    uint64_t scheduled_step = 0;  // the last plan that included it
    StateRow row;
    KvBlocks blocks;
    int32_t num_cached_tokens = 0;  // prompt tokens resumed from a snapshot at first admission
    // Where the prefix cache wants this prompt's state: chunk multiples, ascending.
    std::vector<int32_t> snapshot_at;

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
  // chunk multiple or at its last token, and not past the next snapshot boundary the
  // cache still lacks (a snapshot is taken where a run ends); 0 when none fits.
  int32_t ChunkLength(const Request& request, int32_t budget) const;
  // The first of the request's snapshot boundaries after its computed tokens that the
  // cache lacks; 0 when none.
  int32_t NextSnapshotBoundary(const Request& request) const;
  // A row for a request or a snapshot: a free one, else the least recently used
  // snapshot's. Nothing when every row is held by a request (or a snapshot being taken).
  std::optional<StateRow> TakeRow();
  // Evicts the least recently used snapshot but `keep` (0: any) and hands back its row,
  // its pages let go; nothing when there is none.
  std::optional<StateRow> EvictOne(uint64_t keep);
  // Evicts snapshots (least recently used first, never `keep`) until `needed` pages are
  // free. False, evicting nothing, when the pages only snapshots hold would not be enough
  // (pending snapshots and `keep` may make it fall short after all: false then too).
  bool EvictForPages(int32_t needed, uint64_t keep);
  // Keeps count of the pages snapshots hold (delta +1 as one takes them, -1 as it lets go).
  void CountCachePages(const KvBlocks& pages, int32_t delta);
  // Lets go of a snapshot's pages.
  void DropSnapshotPages(Snapshot* snapshot);
  // After `sequence` (the request's run, just planned): when it ends at one of the
  // request's snapshot boundaries the cache lacks, takes a row and adds the copy to
  // `snapshots`; within prefix_cache_max_rows by evicting first.
  void MaybeSnapshot(const Request& request, const ScheduledSequence& sequence,
                     std::vector<StateCopy>* snapshots);
  // Ends the plan in flight's snapshots: filed in the cache (`file`), or their rows freed
  // (a failed step). A snapshot whose prefix the cache has already gives its row back.
  void SettleSnapshots(bool file);
  // Rows held by the prefix cache: snapshots and those being taken.
  int32_t CacheRows() const {
    return prefix_cache_.num_snapshots() + static_cast<int32_t>(pending_snapshots_.size());
  }
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

  // A snapshot the plan in flight takes: filed in the cache when its result comes back.
  struct PendingSnapshot {
    std::vector<int32_t> tokens;  // the prefix
    Snapshot snapshot;
  };

  SchedulerConfig config_;
  StateRowPool rows_;
  KvPagePool pages_;
  PrefixCache prefix_cache_;
  std::vector<PendingSnapshot> pending_snapshots_;
  std::vector<int32_t> cache_page_holds_;  // per page: how many snapshots hold it
  int32_t cache_pages_ = 0;                // pages with a nonzero count
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<Request*> running_;  // in admission order: the newest is at the back
  uint64_t last_step_id_ = 0;
  uint64_t awaiting_update_step_ = 0;  // 0: no plan awaits its result
  int64_t preemptions_ = 0;
  int32_t tokens_scheduled_last_step_ = 0;
  int64_t tokens_scheduled_ = 0;
  int64_t steps_ = 0;
  int64_t prefix_cache_hits_ = 0;
  int64_t prefix_cache_hit_tokens_ = 0;
  int64_t prefix_cache_misses_ = 0;
  int64_t prefix_cache_evictions_ = 0;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_SCHEDULER_H_
