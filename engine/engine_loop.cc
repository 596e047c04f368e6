#include "engine/engine_loop.h"

#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace coil {
namespace {

double SecondsBetween(EngineLoop::Clock::time_point from, EngineLoop::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

StreamFinish ToStreamFinish(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return StreamFinish::kLength;
    case FinishReason::kStop: return StreamFinish::kStop;
    case FinishReason::kEos: return StreamFinish::kEos;
    default: return StreamFinish::kNone;
  }
}

// The request counters, by how a request ended.
void Count(metrics::CoilMetrics* metrics, const StreamOutcome& outcome) {
  if (metrics == nullptr) return;
  if (outcome.code != absl::StatusCode::kOk) {
    metrics->RequestsFailed(outcome.code).Increment();
    return;
  }
  switch (outcome.reason) {
    case StreamFinish::kStop: metrics->RequestsFinished(metrics::FinishReason::kStop).Increment(); break;
    case StreamFinish::kEos: metrics->RequestsFinished(metrics::FinishReason::kEos).Increment(); break;
    default: metrics->RequestsFinished(metrics::FinishReason::kLength).Increment(); break;
  }
}

absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "the server is shutting down and takes no new requests; retry on another replica");
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Scheduler> scheduler, const tokenizer::Tokenizer& tokenizer,
                       StepExecutor& executor, metrics::CoilMetrics* metrics)
    : scheduler_(std::move(scheduler)), tokenizer_(tokenizer), executor_(executor), metrics_(metrics) {
  PublishSnapshot();
}

EngineLoop::~EngineLoop() {
  if (thread_.joinable()) {
    BeginDrain(std::chrono::milliseconds(0));
    Join().IgnoreError();
  }
}

void EngineLoop::Start() { thread_ = std::thread([this] { Loop(); }); }

absl::Status EngineLoop::Submit(std::shared_ptr<RequestStream> stream, GenerationInput input) {
  absl::Status refusal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refusal = CheckAcceptingLocked();
    if (refusal.ok()) {
      live_[stream->request_id()] = stream;
      inbox_.push_back(Submission{stream, std::move(input), Clock::now()});
    }
  }
  if (!refusal.ok()) {
    StreamBatch batch;
    batch.error = refusal;
    stream->Push(std::move(batch));
    return refusal;
  }
  wake_.notify_one();
  return absl::OkStatus();
}

absl::Status EngineLoop::CheckAccepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckAcceptingLocked();
}

absl::Status EngineLoop::CheckAcceptingLocked() const {
  if (!failure_.ok()) return failure_;
  if (draining_) return ShuttingDown();
  return absl::OkStatus();
}

void EngineLoop::Cancel(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(request_id);
  }
  wake_.notify_one();
}

void EngineLoop::CountOutcome(const StreamOutcome& outcome) { Count(metrics_, outcome); }

RequestStream::EndObserver EngineLoop::OutcomeCounter() {
  metrics::CoilMetrics* metrics = metrics_;  // outlives every stream's end
  return [metrics](const StreamOutcome& outcome) { Count(metrics, outcome); };
}

void EngineLoop::BeginDrain(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!draining_) {
      draining_ = true;
      drain_grace_ = grace;
      drain_deadline_ = Clock::now() + grace;
    }
  }
  wake_.notify_one();
}

void EngineLoop::Fail(const absl::Status& status) {
  const absl::Status failure = status.ok() ? absl::InternalError("the engine failed") : status;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::function<void(const absl::Status&)> callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = failure;
    for (auto& [id, stream] : live_) streams.push_back(std::move(stream));
    live_.clear();
    inbox_.clear();  // their streams are in `streams`
    callback = std::move(on_failure_);
  }
  wake_.notify_one();
  COIL_LOG(ERROR) << "engine failed: " << failure.message() << "; ending " << streams.size()
                  << " requests";
  // First the callback (health NOT_SERVING), so that a client whose stream has ended finds
  // the server no longer serving.
  if (callback) callback(failure);
  for (const std::shared_ptr<RequestStream>& stream : streams) {
    StreamBatch batch;
    batch.error = failure;
    stream->Push(std::move(batch));
  }
}

absl::Status EngineLoop::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void EngineLoop::OnFailure(std::function<void(const absl::Status&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_failure_ = std::move(callback);
}

bool EngineLoop::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

absl::Status EngineLoop::Join() {
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_status_;
}

EngineSnapshot EngineLoop::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

void EngineLoop::PublishSnapshot() {
  const SchedulerCounters counters = scheduler_->counters();
  EngineSnapshot snapshot;
  snapshot.waiting = counters.waiting;
  snapshot.running = counters.running;
  snapshot.rows_free = counters.rows_free;
  snapshot.rows_total = counters.rows_free + counters.rows_used + counters.prefix_cache_rows;
  snapshot.prefix_cache_rows = counters.prefix_cache_rows;
  snapshot.prefix_cache_pages = counters.prefix_cache_pages;
  snapshot.pages_free = counters.pages_free;
  snapshot.pages_total = counters.pages_free + counters.pages_used;
  snapshot.steps = counters.steps;
  if (metrics_ != nullptr) {
    metrics_->requests_waiting().Set(counters.waiting);
    metrics_->requests_running().Set(counters.running);
    metrics_->state_rows_free().Set(counters.rows_free);
    metrics_->state_rows_used().Set(counters.rows_used);
    metrics_->kv_pages_free().Set(counters.pages_free);
    metrics_->kv_pages_used().Set(counters.pages_used);
    metrics_->prefix_cache_rows().Set(counters.prefix_cache_rows);
    metrics_->prefix_cache_pages().Set(counters.prefix_cache_pages);
    // The scheduler counts since start; the metrics get what is new since the last look.
    for (auto [now, seen, counter] :
         {std::tuple{counters.preemptions, &counted_.preemptions, &metrics_->preemptions()},
          std::tuple{counters.prefix_cache_hits, &counted_.prefix_cache_hits,
                     &metrics_->prefix_cache_hits()},
          std::tuple{counters.prefix_cache_misses, &counted_.prefix_cache_misses,
                     &metrics_->prefix_cache_misses()},
          std::tuple{counters.prefix_cache_hit_tokens, &counted_.prefix_cache_hit_tokens,
                     &metrics_->prefix_cache_hit_tokens()},
          std::tuple{counters.prefix_cache_evictions, &counted_.prefix_cache_evictions,
                     &metrics_->prefix_cache_evictions()}}) {
      if (now > *seen) counter->Increment(static_cast<double>(now - *seen));
      *seen = now;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = snapshot;
}

void EngineLoop::Loop() {
  for (;;) {
    std::vector<Submission> submissions;
    std::vector<uint64_t> cancels;
    bool drain_expired = false;
    bool draining = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool busy = scheduler_->HasUnfinishedRequests();
      // Idle: sleep until a request, a cancel, the drain or a failure arrives. No busy loop.
      wake_.wait(lock, [&] {
        return busy || draining_ || !failure_.ok() || !inbox_.empty() || !cancels_.empty();
      });
      // After a failure the ranks cannot run steps together: Fail ended every stream, and
      // the workers are ended by whoever detected it.
      if (!failure_.ok()) break;
      submissions.swap(inbox_);
      cancels.swap(cancels_);
      draining = draining_;
      drain_expired = draining_ && Clock::now() >= drain_deadline_;
    }
    for (Submission& submission : submissions) Admit(std::move(submission));
    for (uint64_t id : cancels) {
      EndWithError(id, absl::CancelledError("the request was cancelled by the client"));
    }
    if (drain_expired && !active_.empty()) {
      COIL_LOG(WARNING) << "drain timeout: ending " << active_.size() << " requests";
      std::vector<uint64_t> ids;
      for (const auto& [id, active] : active_) ids.push_back(id);
      for (uint64_t id : ids) {
        const int32_t tokens = active_.at(id).completion_tokens;
        EndWithError(id, absl::UnavailableError(absl::StrCat(
                             "the server is shutting down and ended this request at its drain "
                             "timeout (", drain_grace_.count() / 1000.0, " s) after ", tokens,
                             " generated tokens; retry on another replica")));
      }
    }
    if (!scheduler_->HasUnfinishedRequests()) {
      PublishSnapshot();
      if (draining) break;
      continue;
    }
    RunOneStep();
    PublishSnapshot();
  }
  absl::Status shutdown = failure();
  if (shutdown.ok()) {
    shutdown = executor_.Shutdown();
    if (!shutdown.ok()) COIL_LOG(ERROR) << "shutting down the workers: " << shutdown;
  }
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_status_ = shutdown;
  finished_ = true;
}

void EngineLoop::Admit(Submission submission) {
  const uint64_t id = submission.stream->request_id();
  GenerationInput& input = submission.input;
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = input.prompt;
  request.sampling = input.sampling;
  request.max_tokens = input.max_tokens.value_or(0);
  request.stop_token_ids = input.stop_token_ids;
  request.ignore_eos = input.ignore_eos;
  request.cache_prefix_tokens = input.cache_prefix_tokens;
  const absl::Status added = scheduler_->AddRequest(std::move(request));
  if (!added.ok()) {
    StreamBatch refusal;
    refusal.error = added;
    submission.stream->Push(std::move(refusal));
    Forget(id);
    return;
  }
  submission.stream->MarkAdmitted();
  Active active;
  active.stream = std::move(submission.stream);
  active.detokenizer =
      std::make_unique<tokenizer::IncrementalDetokenizer>(tokenizer_, /*skip_special_tokens=*/true);
  active.stop_matcher = std::make_unique<StopMatcher>(std::move(input.stop));
  active.wants_logprobs = input.sampling.logprobs || input.sampling.top_logprobs > 0;
  active.prompt_tokens = static_cast<int32_t>(input.prompt.size());
  active.arrival = submission.arrival;
  if (metrics_ != nullptr) metrics_->prompt_tokens().Increment(active.prompt_tokens);
  active_.emplace(id, std::move(active));
}

void EngineLoop::EndWithError(uint64_t request_id, const absl::Status& error) {
  auto it = active_.find(request_id);
  if (it == active_.end()) return;  // already finished, or refused
  // NOT_FOUND would mean the scheduler already let it go; the stream still gets its end.
  scheduler_->Cancel(request_id).IgnoreError();
  StreamBatch batch;
  batch.error = error;
  it->second.stream->Push(std::move(batch));
  active_.erase(it);
  Forget(request_id);
}

void EngineLoop::Forget(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(request_id);
}

void EngineLoop::RunOneStep() {
  const StepPlan plan = scheduler_->Schedule();
  if (plan.sequences.empty()) {
    // Nothing can run now (all rows taken by requests that are not schedulable this
    // step); wait briefly instead of spinning.
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(1));
    return;
  }
  const Clock::time_point now = Clock::now();
  for (const ScheduledSequence& sequence : plan.sequences) {
    auto it = active_.find(sequence.request_id);
    if (it != active_.end() && !it->second.admitted.has_value()) it->second.admitted = now;
  }
  const StepResult result = executor_.Run(plan);
  if (result.fatal) {
    // A collective failed: no later step can run on these ranks.
    Fail(absl::UnavailableError(absl::StrCat(
        "the server lost its worker ranks and must restart (step ", plan.step_id,
        ": ", result.error, "); retry on another replica")));
    return;
  }
  auto updates = scheduler_->Update(plan, result);
  if (metrics_ != nullptr) metrics_->step_duration().Observe(SecondsBetween(now, Clock::now()));
  if (!updates.ok()) {
    COIL_LOG(ERROR) << "applying step " << plan.step_id << ": " << updates.status();
    return;
  }
  for (const RequestUpdate& update : *updates) Apply(update);
}

void EngineLoop::Apply(const RequestUpdate& update) {
  auto it = active_.find(update.request_id);
  if (it == active_.end()) return;
  Active& active = it->second;
  active.cached_prompt_tokens = update.num_cached_tokens;
  if (update.finish_reason == FinishReason::kError) {
    StreamBatch failure;
    failure.error = update.error.ok() ? absl::InternalError("the step failed on a worker rank")
                                      : update.error;
    active.stream->Push(std::move(failure));
    active_.erase(it);
    Forget(update.request_id);
    return;
  }
  StreamBatch batch;
  if (update.token.has_value()) {
    const SampledToken& token = *update.token;
    const Clock::time_point now = Clock::now();
    if (metrics_ != nullptr) {
      metrics_->generated_tokens().Increment();
      if (active.first_token.has_value()) {
        metrics_->inter_token_latency().Observe(SecondsBetween(active.last_token, now));
      } else {
        metrics_->time_to_first_token().Observe(SecondsBetween(active.arrival, now));
      }
    }
    if (!active.first_token.has_value()) active.first_token = now;
    active.last_token = now;
    ++active.completion_tokens;
    batch.token_ids.push_back(token.token_id);
    if (active.wants_logprobs) {
      batch.logprobs.push_back(StreamLogprob{token.token_id, token.logprob, token.top_logprobs});
    }
    absl::StatusOr<std::string> text = active.detokenizer->Push(token.token_id);
    StopMatcher::Result matched = active.stop_matcher->Push(text.ok() ? *text : std::string());
    batch.text = std::move(matched.emit);
    if (matched.stopped) {
      // The scheduler may have ended it in the same step (e.g. max_tokens); either way the
      // stop string decides the reason the client sees.
      if (update.finish_reason == FinishReason::kNone) {
        scheduler_->Finish(update.request_id, FinishReason::kStop).IgnoreError();
      }
      End(update.request_id, active, std::move(batch), StreamFinish::kStop, matched.matched);
      return;
    }
  }
  if (update.finish_reason == FinishReason::kNone) {
    if (!batch.token_ids.empty()) active.stream->Push(std::move(batch));
    return;
  }
  // Finished by the scheduler's rules: what the detokenizer and the matcher held back is
  // final now, unless it completes a stop string.
  StopMatcher::Result tail = active.stop_matcher->Push(active.detokenizer->Finish());
  batch.text += tail.emit;
  if (tail.stopped) {
    End(update.request_id, active, std::move(batch), StreamFinish::kStop, tail.matched);
    return;
  }
  batch.text += active.stop_matcher->Flush();
  std::string matched_stop;
  if (update.finish_reason == FinishReason::kStop && update.matched_stop_token_id >= 0) {
    auto text = tokenizer_.Decode({update.matched_stop_token_id});
    if (text.ok()) matched_stop = *text;
  }
  End(update.request_id, active, std::move(batch), ToStreamFinish(update.finish_reason),
      std::move(matched_stop));
}

void EngineLoop::End(uint64_t request_id, Active& active, StreamBatch batch, StreamFinish reason,
                     std::string matched_stop) {
  const Clock::time_point now = Clock::now();
  StreamFinal final;
  final.reason = reason;
  final.matched_stop = std::move(matched_stop);
  final.prompt_tokens = active.prompt_tokens;
  final.completion_tokens = active.completion_tokens;
  final.cached_prompt_tokens = active.cached_prompt_tokens;
  final.queue_seconds = SecondsBetween(active.arrival, active.admitted.value_or(now));
  final.time_to_first_token_seconds =
      active.first_token.has_value() ? SecondsBetween(active.arrival, *active.first_token) : 0.0;
  final.total_seconds = SecondsBetween(active.arrival, now);
  // The request counters move where the front end ends the request (CountOutcome), once.
  if (metrics_ != nullptr) metrics_->request_latency().Observe(final.total_seconds);
  batch.final = std::move(final);
  active.stream->Push(std::move(batch));
  active_.erase(request_id);
  Forget(request_id);
}

}  // namespace coil
