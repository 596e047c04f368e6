#include "scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil {

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config) {
  COIL_RETURN_IF_ERROR_CONTEXT(config.Validate(), "scheduler config");
  return std::make_unique<Scheduler>(ValidatedTag(), config);
}

Scheduler::Scheduler(ValidatedTag, const SchedulerConfig& config)
    : config_(config),
      rows_(config.state_rows),
      pages_(config.uses_kv_pages() ? config.kv_pages : 0, config.block_size),
      prefix_cache_(config.ssd_chunk_size),
      cache_page_holds_(config.uses_kv_pages() ? config.kv_pages : 0, 0) {}

absl::Status Scheduler::AddRequest(NewRequest new_request) {
  const int64_t prompt_len = static_cast<int64_t>(new_request.prompt_token_ids.size());
  if (prompt_len == 0) {
    return absl::InvalidArgumentError("the prompt is empty; send at least one token");
  }
  if (prompt_len >= config_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt has ", prompt_len, " tokens; the limit is ", config_.max_model_len - 1,
        " (max_model_len ", config_.max_model_len, " minus one output token); shorten it"));
  }
  if (new_request.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens is ", new_request.max_tokens,
                                                   "; it must be at least 0 (0: up to the "
                                                   "context limit)"));
  }
  const int64_t room = config_.max_model_len - prompt_len;
  const int32_t max_output = static_cast<int32_t>(
      new_request.max_tokens == 0 ? room : std::min<int64_t>(new_request.max_tokens, room));
  if (config_.uses_kv_pages()) {
    // Counted on prompt + max output tokens (one more position than ever holds K/V: the
    // last sampled token is never fed back), so a refusal errs on the safe side.
    const int32_t pages = pages_.PagesFor(prompt_len + max_output);
    if (pages > pages_.num_total()) {
      const int64_t fits = static_cast<int64_t>(pages_.num_total()) * config_.block_size;
      return absl::InvalidArgumentError(
          absl::StrCat("prompt (", prompt_len, " tokens) plus max_tokens (", max_output, ") needs ",
                       pages, " kv pages; the pool has ", pages_.num_total(), " (", fits,
                       " tokens); lower max_tokens to at most ",
                       std::max<int64_t>(fits - prompt_len, 0), " or shorten the prompt"));
    }
  }
  if (new_request.cache_prefix_tokens < 0 || new_request.cache_prefix_tokens > prompt_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_prefix_tokens is ", new_request.cache_prefix_tokens, "; the prompt has ", prompt_len,
        " tokens: give a prefix length in [0, ", prompt_len, "]"));
  }
  if (static_cast<int64_t>(waiting_.size()) >= config_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat("the queue is full (", waiting_.size(),
                                                     " waiting requests; the limit is ",
                                                     config_.max_queue, "); retry later"));
  }
  if (requests_.contains(new_request.request_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request id ", new_request.request_id, " is already live; use a new id"));
  }
  auto request = std::make_unique<Request>();
  request->id = new_request.request_id;
  request->tokens = std::move(new_request.prompt_token_ids);
  request->num_prompt_tokens = static_cast<int32_t>(prompt_len);
  request->max_output_tokens = max_output;
  request->sampling = new_request.sampling;
  request->stop_token_ids = std::move(new_request.stop_token_ids);
  request->ignore_eos = new_request.ignore_eos;
  if (config_.prefix_cache) {
    // The end of the prompt's last whole chunk, and the cut the request asked for, each
    // rounded down to a chunk multiple.
    const int32_t chunk = config_.ssd_chunk_size;
    for (const int32_t at : {new_request.cache_prefix_tokens / chunk * chunk,
                             request->num_prompt_tokens / chunk * chunk}) {
      if (at > 0 && (request->snapshot_at.empty() || request->snapshot_at.back() != at)) {
        request->snapshot_at.push_back(at);
      }
    }
  }
  waiting_.push_back(request.get());
  requests_.emplace(request->id, std::move(request));
  return absl::OkStatus();
}

absl::StatusOr<RequestUpdate> Scheduler::Finish(uint64_t request_id, FinishReason reason) {
  if (reason == FinishReason::kNone) {
    return absl::InvalidArgumentError("finishing a request needs a reason other than kNone");
  }
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return absl::NotFoundError(
        absl::StrCat("request id ", request_id, " is not live (finished or never added)"));
  }
  RequestUpdate update = FinalUpdate(*it->second, reason);
  Release(it->second.get());
  return update;
}

std::optional<RequestPhase> Scheduler::Phase(uint64_t request_id) const {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return std::nullopt;
  return it->second->running ? RequestPhase::kRunning : RequestPhase::kWaiting;
}

SchedulerCounters Scheduler::counters() const {
  SchedulerCounters counters;
  counters.waiting = static_cast<int32_t>(waiting_.size());
  counters.running = static_cast<int32_t>(running_.size());
  counters.rows_free = rows_.num_free();
  counters.rows_used = rows_.num_used() - CacheRows();
  counters.pages_free = pages_.num_free();
  counters.pages_used = pages_.num_used();
  counters.preemptions = preemptions_;
  counters.tokens_scheduled_last_step = tokens_scheduled_last_step_;
  counters.tokens_scheduled = tokens_scheduled_;
  counters.steps = steps_;
  counters.prefix_cache_rows = CacheRows();
  counters.prefix_cache_pages = cache_pages_;
  counters.prefix_cache_hits = prefix_cache_hits_;
  counters.prefix_cache_hit_tokens = prefix_cache_hit_tokens_;
  counters.prefix_cache_misses = prefix_cache_misses_;
  counters.prefix_cache_evictions = prefix_cache_evictions_;
  return counters;
}

bool Scheduler::IsDecode(const Request& request) {
  return request.num_computed_tokens > 0 && request.num_tokens() - request.num_computed_tokens == 1;
}

int32_t Scheduler::ChunkLength(const Request& request, int32_t budget) const {
  const int32_t start = request.num_computed_tokens;
  const int32_t boundary = NextSnapshotBoundary(request);
  const int32_t pending = (boundary > 0 ? boundary : request.num_tokens()) - start;
  if (pending <= budget) return std::max(pending, 0);
  // Split at an absolute multiple of the chunk size, so the prompt's arithmetic does not
  // depend on how it was split (docs/ARCHITECTURE.md §4).
  const int32_t end = (start + budget) / config_.ssd_chunk_size * config_.ssd_chunk_size;
  return std::max(end - start, 0);
}

int32_t Scheduler::NextSnapshotBoundary(const Request& request) const {
  for (const int32_t at : request.snapshot_at) {
    if (at > request.num_computed_tokens && !prefix_cache_.Contains(request.tokens, at)) return at;
  }
  return 0;
}

void Scheduler::CountCachePages(const KvBlocks& pages, int32_t delta) {
  for (const int32_t page : pages.page_ids()) {
    int32_t& holds = cache_page_holds_[page];
    cache_pages_ -= holds > 0 ? 1 : 0;
    holds += delta;
    cache_pages_ += holds > 0 ? 1 : 0;
  }
}

void Scheduler::DropSnapshotPages(Snapshot* snapshot) {
  CountCachePages(snapshot->pages, -1);
  pages_.Free(&snapshot->pages);
}

std::optional<StateRow> Scheduler::EvictOne(uint64_t keep) {
  std::optional<Snapshot> evicted = prefix_cache_.EvictLeastRecent(keep);
  if (!evicted.has_value()) return std::nullopt;
  ++prefix_cache_evictions_;
  DropSnapshotPages(&*evicted);
  return evicted->row;
}

std::optional<StateRow> Scheduler::TakeRow() {
  std::optional<StateRow> row = rows_.Allocate();
  if (row.has_value()) return row;
  return EvictOne(/*keep=*/0);
}

bool Scheduler::EvictForPages(int32_t needed, uint64_t keep) {
  if (pages_.num_free() >= needed) return true;
  // Only pages no request holds come free with their snapshots: when even all of them
  // would not do, the snapshots stay (a preempted request may resume from them).
  int32_t freeable = 0;
  for (int32_t page = 0; page < pages_.num_total(); ++page) {
    const int32_t holds = cache_page_holds_[page];
    freeable += holds > 0 && holds == pages_.holders(page) ? 1 : 0;
  }
  if (pages_.num_free() + freeable < needed) return false;
  while (pages_.num_free() < needed) {
    std::optional<StateRow> row = EvictOne(keep);
    if (!row.has_value()) return false;
    rows_.Free(&*row);
  }
  return true;
}

void Scheduler::MaybeSnapshot(const Request& request, const ScheduledSequence& sequence,
                              std::vector<StateCopy>* snapshots) {
  const int32_t end = sequence.start_position + static_cast<int32_t>(sequence.token_ids.size());
  if (!std::binary_search(request.snapshot_at.begin(), request.snapshot_at.end(), end) ||
      prefix_cache_.Contains(request.tokens, end)) {
    return;
  }
  const auto prefix = absl::MakeConstSpan(request.tokens).first(static_cast<size_t>(end));
  for (const PendingSnapshot& pending : pending_snapshots_) {
    if (absl::MakeConstSpan(pending.tokens) == prefix) return;  // taken by another request
  }
  // At the cap the least recently used snapshot makes room (none when every row the cap
  // allows is being taken by this plan).
  std::optional<StateRow> row =
      config_.prefix_cache_max_rows > 0 && CacheRows() >= config_.prefix_cache_max_rows
          ? EvictOne(/*keep=*/0)
          : TakeRow();
  if (!row.has_value()) return;
  // Written after the forward pass: a row evicted here may still be a restore's source in
  // this plan, which reads it before.
  snapshots->push_back({request.row.slot(), row->slot()});
  PendingSnapshot pending{std::vector<int32_t>(prefix.begin(), prefix.end()), {*row, {}}};
  if (config_.uses_kv_pages()) {
    // The prefix's whole pages (end is a multiple of the page size: Validate), which the
    // request has written and never writes again.
    pages_.Share(request.blocks, end / config_.block_size, &pending.snapshot.pages);
    CountCachePages(pending.snapshot.pages, +1);
  }
  pending_snapshots_.push_back(std::move(pending));
}

void Scheduler::SettleSnapshots(bool file) {
  for (PendingSnapshot& pending : pending_snapshots_) {
    std::optional<Snapshot> unused = std::move(pending.snapshot);
    if (file) {
      unused = prefix_cache_.Insert(pending.tokens, static_cast<int32_t>(pending.tokens.size()),
                                    std::move(*unused));
    }
    if (unused.has_value()) {
      rows_.Free(&unused->row);
      DropSnapshotPages(&*unused);
    }
  }
  pending_snapshots_.clear();
}

bool Scheduler::GrowPages(Request* request, int32_t num_tokens) {
  return !config_.uses_kv_pages() || pages_.Grow(&request->blocks, num_tokens);
}

Scheduler::Request* Scheduler::PreemptNewest() {
  Request* victim = running_.back();
  running_.pop_back();
  rows_.Free(&victim->row);
  pages_.Free(&victim->blocks);
  // Recompute the prompt and every output so far; the outputs stay, so nothing streamed
  // is lost or sent again.
  victim->num_computed_tokens = 0;
  victim->running = false;
  waiting_.push_front(victim);
  ++preemptions_;
  return victim;
}

void Scheduler::Release(Request* request) {
  if (request->running) {
    running_.erase(std::find(running_.begin(), running_.end(), request));
    rows_.Free(&request->row);
    pages_.Free(&request->blocks);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
  }
  requests_.erase(request->id);  // destroys *request
}

StepPlan Scheduler::Schedule() {
  COIL_CHECK(awaiting_update_step_ == 0)
      << "Schedule called while plan " << awaiting_update_step_ << " awaits its Update";
  StepPlan plan;
  plan.step_id = ++last_step_id_;

  int32_t token_budget = config_.max_batched_tokens;
  std::vector<Scheduled> decodes;
  std::vector<Scheduled> prefills;
  // Decodes come first: their tokens are reserved before any prefill chunk is sized.
  // max_batched_tokens >= max_num_seqs (Validate), so every decode fits.
  int32_t pending_decodes = 0;
  for (const Request* request : running_) pending_decodes += IsDecode(*request) ? 1 : 0;

  // Running requests, oldest first. A request that needs pages the pool lacks preempts
  // the newest running one, which has not been visited yet (or is itself).
  bool preempted = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    Request* request = running_[i];
    const bool decode = IsDecode(*request);
    int32_t num_tokens = 1;
    if (decode) {
      --pending_decodes;
    } else {
      num_tokens = ChunkLength(*request, token_budget - pending_decodes);
      if (num_tokens == 0) continue;
    }
    bool self_preempted = false;
    while (!GrowPages(request, request->num_computed_tokens + num_tokens)) {
      // Snapshots give their pages back before anybody is preempted.
      if (EvictForPages(
              pages_.PagesToGrow(request->blocks, request->num_computed_tokens + num_tokens),
              /*keep=*/0)) {
        continue;
      }
      // Its reserved decode token goes back to the budget (checked before preempting,
      // which resets its computed tokens).
      if (running_.back() != request && IsDecode(*running_.back())) --pending_decodes;
      preempted = true;
      if (PreemptNewest() == request) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the newest: nobody is left after it
    token_budget -= num_tokens;
    (decode ? decodes : prefills).push_back({request, num_tokens});
  }

  // Admission, first come first served; nobody in a step that preempted (the pages just
  // freed belong to the preempted requests' recompute). A snapshot's row counts as free:
  // it is taken back (least recently used first) before a request would wait for one.
  std::vector<StateCopy> restores;
  while (!preempted && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs &&
         rows_.num_free() + prefix_cache_.num_snapshots() > 0) {
    Request* request = waiting_.front();
    // Resume from the longest snapshot of its tokens, leaving at least the last one to
    // compute (its logits are sampled).
    PrefixCache::Match hit;
    if (config_.prefix_cache) hit = prefix_cache_.Find(request->tokens, request->num_tokens() - 1);
    request->num_computed_tokens = hit.length;
    const int32_t num_tokens = ChunkLength(*request, token_budget);
    if (num_tokens == 0) {
      request->num_computed_tokens = 0;
      break;
    }
    // The hit becomes the most recently used, so that taking a row evicts it last (if it is
    // the very row taken, the request's row holds its state already), and its pages are the
    // request's first ones before anything is evicted.
    if (hit.length > 0) {
      prefix_cache_.Touch(hit);
      if (config_.uses_kv_pages()) {
        pages_.Share(*hit.pages, hit.pages->num_pages(), &request->blocks);
      }
    }
    // Admit only when pages for all its pending tokens fit now, snapshots giving theirs
    // back (the hit's last); the first chunk's pages are taken at once, the rest as its
    // later chunks run.
    if (config_.uses_kv_pages() &&
        !EvictForPages(pages_.PagesToGrow(request->blocks, request->num_tokens()), hit.key)) {
      pages_.Free(&request->blocks);
      request->num_computed_tokens = 0;
      break;
    }
    COIL_CHECK(GrowPages(request, request->num_computed_tokens + num_tokens));
    std::optional<StateRow> row = TakeRow();
    COIL_CHECK(row.has_value()) << "no row although one was free or cached";
    request->row = *row;
    if (hit.length > 0 && hit.slot != request->row.slot()) {
      restores.push_back({hit.slot, request->row.slot()});
    }
    if (config_.prefix_cache) {
      ++(hit.length > 0 ? prefix_cache_hits_ : prefix_cache_misses_);
      prefix_cache_hit_tokens_ += hit.length;
    }
    if (!request->admitted_before) request->num_cached_tokens = hit.length;
    request->admitted_before = true;
    request->running = true;
    waiting_.pop_front();
    running_.push_back(request);
    token_budget -= num_tokens;
    // A resumed request with one token left is a decode like any other.
    (IsDecode(*request) ? decodes : prefills).push_back({request, num_tokens});
  }

  plan.num_decodes = static_cast<int32_t>(decodes.size());
  plan.sequences.reserve(decodes.size() + prefills.size());
  for (const std::vector<Scheduled>* part : {&decodes, &prefills}) {
    for (const Scheduled& scheduled : *part) {
      plan.sequences.push_back(MakeSequence(scheduled, plan.step_id));
      if (config_.prefix_cache) {
        MaybeSnapshot(*scheduled.request, plan.sequences.back(), &plan.snapshots);
      }
    }
  }
  plan.restores = std::move(restores);
  tokens_scheduled_last_step_ = config_.max_batched_tokens - token_budget;
  tokens_scheduled_ += tokens_scheduled_last_step_;
  if (!plan.sequences.empty()) {
    ++steps_;
    awaiting_update_step_ = plan.step_id;
  }
  return plan;
}

ScheduledSequence Scheduler::MakeSequence(const Scheduled& scheduled, uint64_t step_id) {
  Request& request = *scheduled.request;
  ScheduledSequence sequence;
  sequence.request_id = request.id;
  sequence.state_slot = request.row.slot();
  sequence.start_position = request.num_computed_tokens;
  sequence.fresh = request.num_computed_tokens == 0;
  const auto begin = request.tokens.begin() + request.num_computed_tokens;
  sequence.token_ids.assign(begin, begin + scheduled.num_tokens);
  if (config_.uses_kv_pages()) sequence.kv_block_table = request.blocks.page_ids();
  request.num_computed_tokens += scheduled.num_tokens;
  request.scheduled_step = step_id;
  sequence.sample = request.num_computed_tokens == request.num_tokens();
  if (sequence.sample) {
    sequence.sampling = request.sampling;
    sequence.rng_step = request.num_output_tokens();
    if (request.sampling.HasPenalties()) {
      sequence.history = request.tokens;
      sequence.num_prompt_tokens = request.num_prompt_tokens;
    }
  }
  return sequence;
}

RequestUpdate Scheduler::FinalUpdate(const Request& request, FinishReason reason) {
  RequestUpdate update;
  update.request_id = request.id;
  update.finish_reason = reason;
  update.num_prompt_tokens = request.num_prompt_tokens;
  update.num_output_tokens = request.num_output_tokens();
  update.num_cached_tokens = request.num_cached_tokens;
  return update;
}

FinishReason Scheduler::CheckFinished(const Request& request, int32_t token,
                                      int32_t* matched) const {
  // A stop or EOS token says why the text ended, so it wins over a length limit reached
  // by the same token.
  if (!request.ignore_eos && config_.eos_token_id >= 0 && token == config_.eos_token_id) {
    return FinishReason::kEos;
  }
  for (int32_t stop : request.stop_token_ids) {
    if (token == stop) {
      *matched = stop;
      return FinishReason::kStop;
    }
  }
  if (request.num_output_tokens() >= request.max_output_tokens ||
      request.num_tokens() >= config_.max_model_len) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

std::vector<RequestUpdate> Scheduler::FailStep(const StepPlan& plan, const absl::Status& error) {
  SettleSnapshots(/*file=*/false);  // the rows hold nothing known
  std::vector<RequestUpdate> updates;
  for (const ScheduledSequence& sequence : plan.sequences) {
    auto it = requests_.find(sequence.request_id);
    if (it == requests_.end() || it->second->scheduled_step != plan.step_id) continue;
    RequestUpdate update = FinalUpdate(*it->second, FinishReason::kError);
    update.error = error;
    Release(it->second.get());
    updates.push_back(std::move(update));
  }
  return updates;
}

absl::StatusOr<std::vector<RequestUpdate>> Scheduler::Update(const StepPlan& plan,
                                                             const StepResult& result) {
  if (plan.sequences.empty()) return std::vector<RequestUpdate>();
  if (awaiting_update_step_ == 0 || plan.step_id != awaiting_update_step_ ||
      result.step_id != plan.step_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("update for plan ", plan.step_id, " with result ", result.step_id,
                     ", but the plan awaiting its result is ", awaiting_update_step_,
                     " (0: none); pass the last plan Schedule returned"));
  }
  awaiting_update_step_ = 0;
  if (!result.ok) {
    return FailStep(plan,
                    absl::InternalError(absl::StrCat("step ", plan.step_id, " failed on rank ",
                                                     result.failed_rank, ": ", result.error)));
  }
  // One token per sampled sequence, in plan order; anything else is a broken worker.
  size_t next = 0;
  for (const ScheduledSequence& sequence : plan.sequences) {
    if (!sequence.sample) continue;
    if (next >= result.tokens.size() || result.tokens[next].request_id != sequence.request_id) {
      return FailStep(plan, absl::InternalError(absl::StrCat(
                                "step ", plan.step_id, " result does not match its plan: ",
                                "token ", next, " is not for request ", sequence.request_id)));
    }
    ++next;
  }
  if (next != result.tokens.size()) {
    return FailStep(plan, absl::InternalError(absl::StrCat("step ", plan.step_id, " result has ",
                                                           result.tokens.size(), " tokens for ",
                                                           next, " sampled sequences")));
  }

  SettleSnapshots(/*file=*/true);
  std::vector<RequestUpdate> updates;
  updates.reserve(result.tokens.size());
  for (const SampledToken& sampled : result.tokens) {
    auto it = requests_.find(sampled.request_id);
    // Finished or cancelled while the step ran (or a new request reusing the id).
    if (it == requests_.end() || it->second->scheduled_step != plan.step_id) continue;
    Request* request = it->second.get();
    request->tokens.push_back(sampled.token_id);
    RequestUpdate update;
    update.request_id = request->id;
    update.token = sampled;
    update.finish_reason = CheckFinished(*request, sampled.token_id, &update.matched_stop_token_id);
    update.num_prompt_tokens = request->num_prompt_tokens;
    update.num_output_tokens = request->num_output_tokens();
    update.num_cached_tokens = request->num_cached_tokens;
    if (update.finish_reason != FinishReason::kNone) Release(request);
    updates.push_back(std::move(update));
  }
  return updates;
}

StepPlan Scheduler::ShutdownPlan() {
  StepPlan plan;
  plan.step_id = ++last_step_id_;
  plan.shutdown = true;
  return plan;
}

}  // namespace coil
