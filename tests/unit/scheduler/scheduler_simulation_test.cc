// A randomized simulation of the scheduler against a fake executor, 10,000 steps per shape.
// The fake executor plays the workers: it keeps, per state slot, the tokens the state held
// there has consumed (carried along by the plan's restores and snapshots, in the order the
// workers run them), and per KV page which (request, position) each entry holds; it
// rejects any plan that resumes a state from a slot holding a different number of tokens
// or reads K/V it did not write for that request, and after each step the test checks
// that every slot a sequence ran on holds exactly that request's tokens: a request that
// resumed from an evicted or overwritten snapshot would hold others. The test keeps its
// own model of every request (the tokens streamed, which row and pages it holds) and
// checks the invariants after every step:
//   - no row or page held by two live requests, nor a snapshot taken into a row a
//     request holds; budgets and the token budget respected; rows held by requests, free
//     and held by the prefix cache add up to the state rows (none leaks);
//   - every admissible request is admitted: on a model without pages, a request waits
//     only when the sequences or the rows are all taken by requests, or less than an SSD
//     chunk of the token budget is left (a snapshot's row counts as free);
//   - decodes first, never starved: a request that was decoding is in the plan or was
//     preempted; a step that preempted admits nobody;
//   - a run's tokens are exactly the request's prompt plus streamed outputs at its
//     positions (so a preempted request resumes with exactly the tokens it had), split
//     only at SSD-chunk multiples except the last piece;
//   - each streamed token is the fake model's token for (request, output index), so every
//     token is delivered exactly once and in order; finish reasons follow the rules,
//     recomputed here independently.
//   - with the prefix cache, each request resumes at a chunk multiple, reports it as its
//     cached tokens, and the hit counters add up to the admissions seen.
// At the end every request finished or was cancelled and both pools are full again (the
// state rows counting the prefix cache's).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"

namespace coil {
namespace {

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 0;

// The fake model's token for output `rng_step` of `request_id`: a fixed hash, so a
// recompute after preemption draws the same token (as the counter-based RNG does).
int32_t ModelToken(uint64_t request_id, int32_t rng_step) {
  uint64_t x = request_id * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rng_step) + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int32_t>(x % kVocab);
}

// The workers' view: what each slot and page holds. Check failures are collected as text.
class FakeExecutor {
 public:
  FakeExecutor(const SchedulerConfig& config)
      : config_(config),
        slots_(config.state_rows),
        pages_(config.uses_kv_pages() ? config.kv_pages : 0,
               std::vector<Entry>(config.block_size)) {}

  // After a failed step: what the plan wrote holds nothing anybody may resume from.
  void Spoil(const StepPlan& plan) {
    for (const ScheduledSequence& sequence : plan.sequences) {
      slots_[sequence.state_slot].tokens.assign(1, -1);
      const int32_t end = sequence.start_position + static_cast<int32_t>(sequence.token_ids.size());
      for (int32_t p = sequence.start_position; p < end && config_.uses_kv_pages(); ++p) {
        pages_[sequence.kv_block_table[p / config_.block_size]][p % config_.block_size] = Entry();
      }
    }
    for (const StateCopy& copy : plan.snapshots) slots_[copy.to_slot].tokens.assign(1, -1);
  }

  // The tokens the state in `slot` has consumed.
  const std::vector<int32_t>& Contents(int32_t slot) const { return slots_[slot].tokens; }

  // Runs the plan: restores, then the sequences, then snapshots, as the workers do;
  // checks every read against what was written, then writes. `tokens_of(id)` is request
  // id's prompt and outputs so far: a K/V entry holds a hash of the tokens up to its
  // position, as a real one depends on all of them, so a page shared by requests with the
  // same prefix reads right, and any other reads wrong.
  StepResult Execute(const StepPlan& plan,
                     const std::function<std::vector<int32_t>(uint64_t)>& tokens_of,
                     std::string* errors) {
    if (config_.uses_kv_pages()) CheckPageWrites(plan, errors);
    StepResult result;
    result.step_id = plan.step_id;
    std::set<int32_t> slots_seen;
    for (const ScheduledSequence& sequence : plan.sequences) slots_seen.insert(sequence.state_slot);
    for (const StateCopy& copy : plan.restores) {
      Copy(copy, "restore", plan.step_id, errors);
      if (!slots_seen.contains(copy.to_slot)) {
        absl::StrAppend(errors, "step ", plan.step_id, ": restore into slot ", copy.to_slot,
                        " that no sequence runs on\n");
      }
    }
    slots_seen.clear();
    for (const ScheduledSequence& sequence : plan.sequences) {
      const std::string where =
          absl::StrCat("step ", plan.step_id, " request ", sequence.request_id, ": ");
      const int32_t slot = sequence.state_slot;
      if (slot < 0 || slot >= config_.state_rows || !slots_seen.insert(slot).second) {
        absl::StrAppend(errors, where, "slot ", slot, " out of range or used twice\n");
        continue;
      }
      const int32_t end = sequence.start_position + static_cast<int32_t>(sequence.token_ids.size());
      Slot& state = slots_[slot];
      if (sequence.fresh) {
        state.tokens.clear();
        state.written = true;
      } else if (!state.written ||
                 static_cast<int32_t>(state.tokens.size()) != sequence.start_position) {
        absl::StrAppend(errors, where, "slot ", slot, " holds ", state.tokens.size(),
                        " tokens, not ", sequence.start_position, "\n");
      }
      state.tokens.insert(state.tokens.end(), sequence.token_ids.begin(), sequence.token_ids.end());
      if (config_.uses_kv_pages()) {
        const int32_t pages_needed = (end + config_.block_size - 1) / config_.block_size;
        if (static_cast<int32_t>(sequence.kv_block_table.size()) < pages_needed) {
          absl::StrAppend(errors, where, "block table has ", sequence.kv_block_table.size(),
                          " pages for ", end, " tokens\n");
          continue;
        }
        if (!errors->empty()) continue;
        // Attention reads every earlier position: each must hold the K/V of this request's
        // tokens up to there.
        const std::vector<int32_t> all = tokens_of(sequence.request_id);
        uint64_t prefix = 0;
        for (int32_t p = 0; p < end; ++p) {
          prefix = Mix(prefix, all[p]);
          Entry& entry =
              pages_[sequence.kv_block_table[p / config_.block_size]][p % config_.block_size];
          if (p >= sequence.start_position) {
            entry = {prefix, p};
          } else if (entry.prefix != prefix || entry.position != p) {
            absl::StrAppend(errors, where, "position ", p, " of page ",
                            sequence.kv_block_table[p / config_.block_size],
                            " reads K/V of another prefix (written at position ", entry.position,
                            ")\n");
            break;
          }
        }
      } else if (!sequence.kv_block_table.empty()) {
        absl::StrAppend(errors, where, "block table without attention layers\n");
      }
      if (sequence.sample) {
        SampledToken token;
        token.request_id = sequence.request_id;
        token.token_id = ModelToken(sequence.request_id, sequence.rng_step);
        result.tokens.push_back(token);
      }
    }
    for (const StateCopy& copy : plan.snapshots) {
      if (slots_seen.contains(copy.to_slot) || !slots_seen.contains(copy.from_slot)) {
        absl::StrAppend(errors, "step ", plan.step_id, ": snapshot from slot ", copy.from_slot,
                        " into slot ", copy.to_slot, ", which a sequence of the plan runs on\n");
      }
      Copy(copy, "snapshot", plan.step_id, errors);
    }
    return result;
  }

 private:
  struct Entry {
    uint64_t prefix = 0;  // hash of the tokens up to and with `position`
    int32_t position = -1;
  };
  struct Slot {
    bool written = false;
    std::vector<int32_t> tokens;
  };

  static uint64_t Mix(uint64_t hash, int32_t token) {
    uint64_t x = (hash ^ static_cast<uint32_t>(token)) * 0x9E3779B97F4A7C15ull + 1;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 31);
  }

  // Pages in range, none twice in one table, and a page a sequence writes (one holding a
  // position of its run) in no other table of the plan: pages are shared only read-only.
  void CheckPageWrites(const StepPlan& plan, std::string* errors) {
    std::map<int32_t, int32_t> tables;    // page -> tables of the plan holding it
    std::map<int32_t, uint64_t> writers;  // page -> the request writing it
    for (const ScheduledSequence& sequence : plan.sequences) {
      const std::vector<int32_t>& table = sequence.kv_block_table;
      if (std::set<int32_t>(table.begin(), table.end()).size() != table.size()) {
        absl::StrAppend(errors, "step ", plan.step_id, " request ", sequence.request_id,
                        ": a page twice in its block table\n");
      }
      for (int32_t page : table) {
        if (page < 0 || page >= config_.kv_pages) {
          absl::StrAppend(errors, "step ", plan.step_id, ": page ", page, " out of range\n");
          return;
        }
        ++tables[page];
      }
      const int32_t end = sequence.start_position + static_cast<int32_t>(sequence.token_ids.size());
      for (int32_t k = sequence.start_position / config_.block_size;
           k * config_.block_size < end && k < static_cast<int32_t>(table.size()); ++k) {
        if (!writers.emplace(table[k], sequence.request_id).second) {
          absl::StrAppend(errors, "step ", plan.step_id, ": page ", table[k],
                          " written by two requests\n");
        }
      }
    }
    for (const auto& [page, writer] : writers) {
      if (tables[page] > 1) {
        absl::StrAppend(errors, "step ", plan.step_id, ": request ", writer, " writes page ", page,
                        ", which another block table of the plan holds\n");
      }
    }
  }

  void Copy(const StateCopy& copy, const char* what, uint64_t step, std::string* errors) {
    const auto valid = [&](int32_t slot) { return slot >= 0 && slot < config_.state_rows; };
    if (!valid(copy.from_slot) || !valid(copy.to_slot) || copy.from_slot == copy.to_slot ||
        !slots_[copy.from_slot].written) {
      absl::StrAppend(errors, "step ", step, ": ", what, " from slot ", copy.from_slot, " to slot ",
                      copy.to_slot, "\n");
      return;
    }
    slots_[copy.to_slot] = slots_[copy.from_slot];
  }

  SchedulerConfig config_;
  std::vector<Slot> slots_;
  std::vector<std::vector<Entry>> pages_;  // [page][offset in page]
};

// The test's own record of a request.
struct Tracked {
  NewRequest spec;
  int32_t max_output = 0;         // max_tokens resolved against max_model_len
  std::vector<int32_t> streamed;  // outputs delivered so far
  bool decoding = false;          // sampled last step and still live: must decode now
  int32_t slot = -1;              // held row as seen in plans, -1 when none
  int32_t cached = 0;             // where its first run started (prompt tokens from the cache)
  bool admitted = false;
  std::set<int32_t> pages;        // held pages as seen in plans
  bool done = false;
  FinishReason reason = FinishReason::kNone;
};

struct Shape {
  const char* name;
  SchedulerConfig config;
  uint64_t seed;
  // Prompts drawn as one of a few shared "system prompts" (whole, or cut near a chunk
  // multiple) followed by a short question, as chat traffic is.
  bool shared_prefixes = false;
};

class Simulation {
 public:
  explicit Simulation(const Shape& shape)
      : config_(shape.config),
        shared_prefixes_(shape.shared_prefixes),
        executor_(shape.config),
        rng_(shape.seed) {
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(config_);
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(scheduler).value();
    for (int32_t i = 0; i < 5; ++i) {
      std::vector<int32_t> system(static_cast<size_t>(Uniform(4, 70)));
      for (int32_t& token : system) token = Uniform(1, kVocab - 1);
      systems_.push_back(std::move(system));
    }
  }

  // Steps with arrivals, then without until the scheduler is empty.
  void Run(int32_t steps) {
    for (int32_t step = 0; step < steps && !::testing::Test::HasFailure(); ++step) {
      Arrivals();
      CancelSome();
      Step();
    }
    for (int32_t step = 0;
         step < 100000 && scheduler_->HasUnfinishedRequests() && !::testing::Test::HasFailure();
         ++step) {
      Step();
    }
  }

  void CheckEnd() {
    EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
    for (const auto& [id, request] : requests_) {
      EXPECT_TRUE(request.done) << "request " << id << " never finished";
    }
    const SchedulerCounters counters = scheduler_->counters();
    EXPECT_EQ(counters.rows_free + counters.prefix_cache_rows, config_.state_rows);
    EXPECT_EQ(counters.rows_used, 0);
    EXPECT_EQ(counters.pages_free + counters.prefix_cache_pages,
              config_.uses_kv_pages() ? config_.kv_pages : 0);
    EXPECT_EQ(counters.pages_used, counters.prefix_cache_pages);
    EXPECT_EQ(counters.running + counters.waiting, 0);
    EXPECT_EQ(counters.prefix_cache_hits + counters.prefix_cache_misses,
              config_.prefix_cache ? admissions_ : 0);
    EXPECT_EQ(counters.prefix_cache_hit_tokens, hit_tokens_);
  }

  int64_t preemptions() const { return scheduler_->counters().preemptions; }
  int64_t finished(FinishReason reason) const {
    int64_t n = 0;
    for (const auto& [id, request] : requests_) n += request.reason == reason ? 1 : 0;
    return n;
  }
  int64_t refused() const { return refused_; }
  int64_t sampled() const { return sampled_; }
  SchedulerCounters counters() const { return scheduler_->counters(); }

 private:
  int32_t Uniform(int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  // Random arrivals; each refusal must be the one the rules give, worked out here.
  void Arrivals() {
    const int32_t arrivals = Chance(0.3) ? Uniform(1, 2) : 0;
    for (int32_t i = 0; i < arrivals; ++i) {
      NewRequest spec;
      spec.request_id = next_id_++;
      if (shared_prefixes_ && Chance(0.9)) {
        // A system prompt, whole or cut within a token of a chunk multiple, then a
        // question; sometimes with its end asked for as a cut.
        const std::vector<int32_t>& system = systems_[Uniform(0, 4)];
        int32_t keep = static_cast<int32_t>(system.size());
        if (Chance(0.3)) {
          const int32_t chunk = config_.ssd_chunk_size;
          keep = std::clamp(Uniform(1, keep / chunk + 1) * chunk + Uniform(-1, 1), 1, keep);
        }
        spec.prompt_token_ids.assign(system.begin(), system.begin() + keep);
        if (Chance(0.3)) spec.cache_prefix_tokens = keep;
        const int32_t question = Chance(0.2) ? 0 : Uniform(1, 20);
        for (int32_t t = 0; t < question; ++t)
          spec.prompt_token_ids.push_back(Uniform(1, kVocab - 1));
        if (Chance(0.02)) spec.prompt_token_ids.resize(config_.max_model_len, 1);
      } else {
        const int32_t prompt_len = Chance(0.05) ? config_.max_model_len : Uniform(1, 60);
        for (int32_t t = 0; t < prompt_len; ++t)
          spec.prompt_token_ids.push_back(Uniform(1, kVocab - 1));
      }
      const int32_t prompt_len = static_cast<int32_t>(spec.prompt_token_ids.size());
      spec.max_tokens = Chance(0.1) ? 0 : Uniform(1, 50);
      spec.ignore_eos = Chance(0.3);
      if (Chance(0.3)) spec.stop_token_ids = {Uniform(1, kVocab - 1)};
      if (Chance(0.2)) spec.sampling.presence_penalty = 0.5f;
      spec.sampling.seed = spec.request_id;

      const int32_t room = config_.max_model_len - prompt_len;
      const int32_t max_output = spec.max_tokens == 0 ? room : std::min(spec.max_tokens, room);
      absl::StatusCode expected = absl::StatusCode::kOk;
      if (room <= 0) {
        expected = absl::StatusCode::kInvalidArgument;
      } else if (config_.uses_kv_pages() &&
                 (prompt_len + max_output + config_.block_size - 1) / config_.block_size >
                     config_.kv_pages) {
        expected = absl::StatusCode::kInvalidArgument;
      } else if (scheduler_->counters().waiting >= config_.max_queue) {
        expected = absl::StatusCode::kResourceExhausted;
      }
      const uint64_t id = spec.request_id;
      absl::Status status = scheduler_->AddRequest(spec);
      ASSERT_EQ(status.code(), expected) << "request " << id << ": " << status;
      if (!status.ok()) {
        ++refused_;
        continue;
      }
      Tracked& tracked = requests_[id];
      tracked.spec = std::move(spec);
      tracked.max_output = max_output;
      live_.insert(id);
    }
  }

  void Release(uint64_t id, FinishReason reason) {
    Tracked& request = requests_[id];
    request.done = true;
    request.reason = reason;
    request.decoding = false;
    DropResources(request);
    live_.erase(id);
  }

  void DropResources(Tracked& request) {
    if (request.slot >= 0) slot_owner_.erase(request.slot);
    for (int32_t page : request.pages) {
      page_holders_[page].erase(request.spec.request_id);
      if (page_holders_[page].empty()) page_holders_.erase(page);
    }
    request.slot = -1;
    request.pages.clear();
  }

  uint64_t RandomLive() {
    auto it = live_.begin();
    std::advance(it, Uniform(0, static_cast<int32_t>(live_.size()) - 1));
    return *it;
  }

  // Between steps: a client goes away, or the engine matches a stop string.
  void CancelSome() {
    if (live_.empty() || !Chance(0.03)) return;
    const uint64_t id = RandomLive();
    const FinishReason reason = Chance(0.5) ? FinishReason::kCancelled : FinishReason::kStop;
    absl::StatusOr<RequestUpdate> update = scheduler_->Finish(id, reason);
    ASSERT_TRUE(update.ok()) << update.status();
    ASSERT_EQ(update->finish_reason, reason);
    ASSERT_EQ(update->num_output_tokens, static_cast<int32_t>(requests_[id].streamed.size()));
    ASSERT_EQ(update->num_cached_tokens, requests_[id].cached);
    Release(id, reason);
  }

  void Step() {
    const SchedulerCounters before = scheduler_->counters();
    StepPlan plan = scheduler_->Schedule();
    const SchedulerCounters after = scheduler_->counters();
    const bool preempted = after.preemptions > before.preemptions;
    CheckPlan(plan, preempted);
    if (::testing::Test::HasFailure() || plan.sequences.empty()) return;

    std::string errors;
    StepResult result = executor_.Execute(
        plan,
        [&](uint64_t id) {
          const Tracked& request = requests_.at(id);
          std::vector<int32_t> all = request.spec.prompt_token_ids;
          all.insert(all.end(), request.streamed.begin(), request.streamed.end());
          return all;
        },
        &errors);
    ASSERT_TRUE(errors.empty()) << errors;
    // Each slot a sequence ran on holds its request's tokens up to the run's end: the
    // state it resumed (restored or carried) was that request's own prefix.
    for (const ScheduledSequence& sequence : plan.sequences) {
      const Tracked& request = requests_[sequence.request_id];
      std::vector<int32_t> all = request.spec.prompt_token_ids;
      all.insert(all.end(), request.streamed.begin(), request.streamed.end());
      all.resize(sequence.start_position + sequence.token_ids.size());
      ASSERT_EQ(executor_.Contents(sequence.state_slot), all)
          << "step " << plan.step_id << " request " << sequence.request_id;
    }

    // Mid-step cancellation: the update must skip it.
    std::set<uint64_t> cancelled_mid_step;
    if (Chance(0.02)) {
      const uint64_t id =
          plan.sequences[Uniform(0, static_cast<int32_t>(plan.sequences.size()) - 1)].request_id;
      ASSERT_TRUE(scheduler_->Cancel(id).ok());
      Release(id, FinishReason::kCancelled);
      cancelled_mid_step.insert(id);
    }
    // A failed step leaves unknown state in every row it wrote, snapshots included.
    const bool fail = Chance(shared_prefixes_ ? 0.005 : 0.001);
    if (fail) {
      executor_.Spoil(plan);
      result.ok = false;
      result.failed_rank = 1;
      result.error = "simulated kernel error";
      result.tokens.clear();
    }
    absl::StatusOr<std::vector<RequestUpdate>> updates = scheduler_->Update(plan, result);
    ASSERT_TRUE(updates.ok()) << updates.status();
    CheckUpdates(plan, *updates, cancelled_mid_step, fail);
  }

  void CheckPlan(const StepPlan& plan, bool preempted) {
    const SchedulerCounters counters = scheduler_->counters();
    ASSERT_LE(plan.NumTokens(), config_.max_batched_tokens);
    ASSERT_LE(counters.running, std::min(config_.max_num_seqs, config_.state_rows));
    ASSERT_EQ(counters.rows_used + counters.rows_free + counters.prefix_cache_rows,
              config_.state_rows);
    ASSERT_EQ(counters.rows_used, counters.running);
    if (!config_.prefix_cache) {
      ASSERT_EQ(counters.prefix_cache_rows, 0);
    }
    if (config_.prefix_cache_max_rows > 0) {
      ASSERT_LE(counters.prefix_cache_rows, config_.prefix_cache_max_rows);
    }
    // Every admissible request admitted (without pages, rows and tokens are all that bind).
    if (!config_.uses_kv_pages() && counters.waiting > 0) {
      ASSERT_TRUE(counters.running == config_.max_num_seqs ||
                  counters.running == config_.state_rows ||
                  config_.max_batched_tokens - plan.NumTokens() < config_.ssd_chunk_size)
          << "step " << plan.step_id << ": " << counters.waiting << " waiting, " << counters.running
          << " running, " << plan.NumTokens() << " tokens planned";
    }
    ASSERT_LE(counters.pages_used, config_.uses_kv_pages() ? config_.kv_pages : 0);
    ASSERT_EQ(counters.waiting + counters.running, static_cast<int32_t>(live_.size()));
    ASSERT_EQ(counters.tokens_scheduled_last_step, plan.NumTokens());

    // Requests the scheduler no longer runs were preempted: their row and pages are free.
    for (uint64_t id : live_) {
      Tracked& request = requests_[id];
      if (request.slot >= 0 && scheduler_->Phase(id) == RequestPhase::kWaiting) {
        ASSERT_TRUE(preempted) << "request " << id << " stopped running without preemption";
        DropResources(request);
        request.decoding = false;
      }
    }
    std::set<uint64_t> in_plan;
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const ScheduledSequence& sequence = plan.sequences[i];
      const uint64_t id = sequence.request_id;
      ASSERT_TRUE(live_.contains(id)) << "request " << id << " is not live";
      ASSERT_TRUE(in_plan.insert(id).second) << "request " << id << " twice in a plan";
      Tracked& request = requests_[id];
      const int32_t length = static_cast<int32_t>(sequence.token_ids.size());
      const int32_t end = sequence.start_position + length;
      ASSERT_GE(length, 1);
      // Decodes first: one token from carried state.
      if (static_cast<int32_t>(i) < plan.num_decodes) {
        ASSERT_EQ(length, 1);
        ASSERT_FALSE(sequence.fresh);
      }
      ASSERT_EQ(sequence.fresh, sequence.start_position == 0);
      ASSERT_FALSE(preempted && sequence.fresh) << "a step that preempted admitted " << id;

      // The run is the request's own tokens at those positions.
      std::vector<int32_t> all = request.spec.prompt_token_ids;
      all.insert(all.end(), request.streamed.begin(), request.streamed.end());
      ASSERT_LE(end, static_cast<int32_t>(all.size()));
      for (int32_t j = 0; j < length; ++j) {
        ASSERT_EQ(sequence.token_ids[j], all[sequence.start_position + j])
            << "request " << id << " position " << sequence.start_position + j;
      }
      ASSERT_EQ(sequence.sample, end == static_cast<int32_t>(all.size()));
      ASSERT_TRUE(sequence.sample || end % config_.ssd_chunk_size == 0)
          << "request " << id << " split at " << end;
      if (sequence.sample) {
        ASSERT_EQ(sequence.rng_step, static_cast<int32_t>(request.streamed.size()));
        if (request.spec.sampling.HasPenalties()) {
          ASSERT_EQ(sequence.history, all);
        }
      }

      // Ownership: an admitted sequence (fresh, or resumed from a snapshot at a chunk
      // multiple) takes a row nobody holds; others keep theirs.
      if (sequence.fresh) {
        ASSERT_EQ(request.slot, -1) << "request " << id << " admitted twice";
      }
      if (request.slot == -1) {
        ASSERT_FALSE(slot_owner_.contains(sequence.state_slot))
            << "slot " << sequence.state_slot << " held by " << slot_owner_[sequence.state_slot];
        ASSERT_TRUE(sequence.fresh ||
                    (config_.prefix_cache && sequence.start_position % config_.ssd_chunk_size == 0))
            << "request " << id << " admitted at " << sequence.start_position;
        request.slot = sequence.state_slot;
        slot_owner_[sequence.state_slot] = id;
        ++admissions_;
        hit_tokens_ += sequence.start_position;
        if (!request.admitted) request.cached = sequence.start_position;
        request.admitted = true;
      } else {
        ASSERT_EQ(request.slot, sequence.state_slot) << "request " << id << " changed rows";
      }
      // A page is shared only by requests that read it: the one a run writes into (it
      // holds a position of the run) has no other live holder.
      for (size_t k = 0; k < sequence.kv_block_table.size(); ++k) {
        const int32_t page = sequence.kv_block_table[k];
        std::set<uint64_t>& holders = page_holders_[page];
        const bool written =
            static_cast<int32_t>(k + 1) * config_.block_size > sequence.start_position &&
            static_cast<int32_t>(k) * config_.block_size < end;
        ASSERT_TRUE(!written || holders.empty() || (holders.size() == 1 && holders.contains(id)))
            << "request " << id << " writes page " << page << ", which " << holders.size()
            << " requests hold";
        holders.insert(id);
        request.pages.insert(page);
      }
      for (int32_t page : request.pages) {
        ASSERT_TRUE(
            std::count(sequence.kv_block_table.begin(), sequence.kv_block_table.end(), page))
            << "request " << id << " lost page " << page;
      }
    }
    // A snapshot goes into a row no request holds.
    for (const StateCopy& copy : plan.snapshots) {
      ASSERT_FALSE(slot_owner_.contains(copy.to_slot))
          << "snapshot into slot " << copy.to_slot << " held by " << slot_owner_[copy.to_slot];
    }
    // Never starved: every request that was decoding runs, unless it was preempted.
    for (uint64_t id : live_) {
      const Tracked& request = requests_.at(id);
      if (request.decoding) {
        ASSERT_TRUE(in_plan.contains(id)) << "decode of request " << id << " starved";
      }
    }
  }

  // What the rules say about a request that just received `token`, worked out here.
  static FinishReason ExpectedFinish(const Tracked& request, int32_t token,
                                     const SchedulerConfig& config) {
    if (!request.spec.ignore_eos && token == kEos) return FinishReason::kEos;
    for (int32_t stop : request.spec.stop_token_ids) {
      if (stop == token) return FinishReason::kStop;
    }
    const int32_t outputs = static_cast<int32_t>(request.streamed.size());
    if (outputs >= request.max_output ||
        static_cast<int32_t>(request.spec.prompt_token_ids.size()) + outputs >=
            config.max_model_len) {
      return FinishReason::kLength;
    }
    return FinishReason::kNone;
  }

  void CheckUpdates(const StepPlan& plan, const std::vector<RequestUpdate>& updates,
                    const std::set<uint64_t>& cancelled_mid_step, bool failed) {
    for (const ScheduledSequence& sequence : plan.sequences) {
      requests_[sequence.request_id].decoding = false;
    }
    std::map<uint64_t, const RequestUpdate*> by_id;
    for (const RequestUpdate& update : updates) {
      ASSERT_TRUE(by_id.emplace(update.request_id, &update).second);
      ASSERT_FALSE(cancelled_mid_step.contains(update.request_id));
    }
    for (const ScheduledSequence& sequence : plan.sequences) {
      const uint64_t id = sequence.request_id;
      if (cancelled_mid_step.contains(id)) continue;
      auto it = by_id.find(id);
      if (failed) {
        ASSERT_NE(it, by_id.end()) << "failed step left request " << id << " without news";
        ASSERT_EQ(it->second->finish_reason, FinishReason::kError);
        ASSERT_EQ(it->second->error.code(), absl::StatusCode::kInternal);
        Release(id, FinishReason::kError);
        continue;
      }
      if (!sequence.sample) {
        ASSERT_EQ(it, by_id.end()) << "update for unsampled request " << id;
        continue;
      }
      ASSERT_NE(it, by_id.end()) << "sampled request " << id << " got no update";
      const RequestUpdate& update = *it->second;
      Tracked& request = requests_[id];
      ASSERT_TRUE(update.token.has_value());
      // Exactly once, in order: the token for the next output index.
      ASSERT_EQ(update.token->token_id,
                ModelToken(id, static_cast<int32_t>(request.streamed.size())));
      request.streamed.push_back(update.token->token_id);
      ++sampled_;
      ASSERT_EQ(update.finish_reason, ExpectedFinish(request, update.token->token_id, config_))
          << "request " << id << " after " << request.streamed.size() << " outputs";
      ASSERT_EQ(update.num_output_tokens, static_cast<int32_t>(request.streamed.size()));
      ASSERT_EQ(update.num_cached_tokens, request.cached);
      if (update.finish_reason != FinishReason::kNone) {
        Release(id, update.finish_reason);
      } else {
        request.decoding = true;
      }
    }
  }

  SchedulerConfig config_;
  bool shared_prefixes_;
  std::vector<std::vector<int32_t>> systems_;
  FakeExecutor executor_;
  std::mt19937_64 rng_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<uint64_t, Tracked> requests_;
  std::set<uint64_t> live_;
  std::map<int32_t, uint64_t> slot_owner_;
  std::map<int32_t, std::set<uint64_t>> page_holders_;
  uint64_t next_id_ = 1;
  int64_t refused_ = 0;
  int64_t sampled_ = 0;
  int64_t admissions_ = 0;
  int64_t hit_tokens_ = 0;
};

SchedulerConfig BaseConfig() {
  SchedulerConfig config;
  config.max_num_seqs = 8;
  config.state_rows = 6;  // fewer rows than sequences: rows bind
  config.max_batched_tokens = 32;
  config.ssd_chunk_size = 8;
  config.max_model_len = 128;
  config.max_queue = 12;
  config.eos_token_id = kEos;
  return config;
}

class SchedulerSimulationTest : public ::testing::TestWithParam<Shape> {};

TEST_P(SchedulerSimulationTest, TenThousandRandomStepsKeepEveryInvariant) {
  const Shape& shape = GetParam();
  SCOPED_TRACE(absl::StrCat(shape.name, " seed ", shape.seed));
  Simulation simulation(shape);
  simulation.Run(10000);
  simulation.CheckEnd();
  // The run exercised what it is meant to: finishes of every kind, refusals, and (with
  // pages) preemption.
  EXPECT_GT(simulation.sampled(), 10000);
  EXPECT_GT(simulation.refused(), 0);
  for (FinishReason reason :
       {FinishReason::kLength, FinishReason::kStop, FinishReason::kEos, FinishReason::kCancelled}) {
    EXPECT_GT(simulation.finished(reason), 0) << static_cast<int>(reason);
  }
  if (shape.config.uses_kv_pages()) {
    EXPECT_GT(simulation.preemptions(), 100);
  }
  const SchedulerCounters counters = simulation.counters();
  if (shape.config.prefix_cache) {
    // Hits, and evictions under pressure, happened often enough to matter.
    EXPECT_GT(counters.prefix_cache_hits, 200);
    EXPECT_GT(counters.prefix_cache_evictions, 100);
  }
  std::printf(
      "%s: %lld tokens sampled, %lld preemptions, %lld refused, prefix cache %lld hits "
      "(%lld tokens), %lld misses, %lld evictions\n",
      shape.name, static_cast<long long>(simulation.sampled()),
      static_cast<long long>(simulation.preemptions()),
      static_cast<long long>(simulation.refused()),
      static_cast<long long>(counters.prefix_cache_hits),
      static_cast<long long>(counters.prefix_cache_hit_tokens),
      static_cast<long long>(counters.prefix_cache_misses),
      static_cast<long long>(counters.prefix_cache_evictions));
}

Shape HybridShape(uint64_t seed) {
  SchedulerConfig config = BaseConfig();
  config.num_attention_layers = 4;
  config.block_size = 4;
  config.kv_pages = 40;  // 160 tokens for 6 rows of up to 128: preemption is frequent
  return {"hybrid", config, seed};
}

// The prefix cache on a pure Mamba2 model: three rows more than sequences, so that
// snapshots survive a while but are evicted whenever the requests need the rows, with or
// without a cap of its own.
Shape PrefixShape(const char* name, int32_t max_rows, uint64_t seed) {
  SchedulerConfig config = BaseConfig();
  config.max_num_seqs = 6;
  config.state_rows = 9;
  config.prefix_cache = true;
  config.prefix_cache_max_rows = max_rows;
  return {name, config, seed, /*shared_prefixes=*/true};
}

// The prefix cache on a hybrid model: snapshots hold rows and pages, shared with the
// requests resumed from them, and give both back before anybody waits or is preempted.
Shape HybridPrefixShape(uint64_t seed) {
  Shape shape = PrefixShape("hybrid_prefix_cache", 0, seed);
  shape.config.num_attention_layers = 4;
  shape.config.block_size = 4;  // divides the chunk size, 8
  shape.config.kv_pages = 60;
  return shape;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SchedulerSimulationTest,
                         ::testing::Values(HybridShape(1), HybridShape(2),
                                           Shape{"pure_mamba2", BaseConfig(), 3},
                                           PrefixShape("prefix_cache", 0, 4),
                                           PrefixShape("prefix_cache_capped", 2, 5),
                                           HybridPrefixShape(6), HybridPrefixShape(7)),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return absl::StrCat(info.param.name, "_seed", info.param.seed);
                         });

}  // namespace
}  // namespace coil
