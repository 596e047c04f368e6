// Time of one Scheduler::Schedule() call with N requests running in steady decode
// (N = 16, 256, 1024), for a pure Mamba2 model (no KV pages) and a hybrid one (block
// tables of 33-220 pages copied into the plan). Only Schedule() is timed (manual time);
// the Update that must follow each plan runs outside the timed region and is timed apart
// in BM_ScheduleAndUpdate. Every run does a fixed 3000 steps, so no request finishes and
// N stays constant.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "scheduler/scheduler.h"

namespace coil {
namespace {

constexpr int32_t kPromptTokens = 512;
constexpr int32_t kMaxTokens = 4096;  // more than the steps run: nobody finishes
constexpr int32_t kSteps = 3000;

std::unique_ptr<Scheduler> MakeRunning(int32_t running, bool hybrid) {
  SchedulerConfig config;
  config.max_num_seqs = running;
  config.state_rows = running;
  config.ssd_chunk_size = 256;
  config.max_batched_tokens = running + 4096;
  config.max_model_len = kPromptTokens + kMaxTokens;
  config.max_queue = running;
  config.eos_token_id = -1;
  if (hybrid) {
    config.num_attention_layers = 4;
    config.block_size = 16;
    config.kv_pages = running * ((kPromptTokens + kMaxTokens) / config.block_size);
  }
  auto scheduler = Scheduler::Create(config);
  if (!scheduler.ok()) return nullptr;
  for (int32_t i = 0; i < running; ++i) {
    NewRequest request;
    request.request_id = static_cast<uint64_t>(i) + 1;
    request.prompt_token_ids.assign(kPromptTokens, 7);
    request.max_tokens = kMaxTokens;
    request.sampling.temperature = 0.8f;
    request.sampling.seed = request.request_id;
    if (!(*scheduler)->AddRequest(std::move(request)).ok()) return nullptr;
  }
  return std::move(scheduler).value();
}

StepResult Answer(const StepPlan& plan) {
  StepResult result;
  result.step_id = plan.step_id;
  for (const ScheduledSequence& sequence : plan.sequences) {
    if (sequence.sample) result.tokens.push_back({sequence.request_id, 11, -0.5f, {}});
  }
  return result;
}

// Prefills every prompt, so that the measured steps are all decodes.
bool WarmUp(Scheduler& scheduler, int32_t running) {
  for (int step = 0; step < 1000; ++step) {
    StepPlan plan = scheduler.Schedule();
    if (plan.num_decodes == running) {
      return scheduler.Update(plan, Answer(plan)).ok();
    }
    if (!scheduler.Update(plan, Answer(plan)).ok()) return false;
  }
  return false;
}

// The scheduler for this run's arguments (running, hybrid), all in decode; nullptr after
// marking the run failed.
std::unique_ptr<Scheduler> SetUp(benchmark::State& state) {
  const int32_t running = static_cast<int32_t>(state.range(0));
  std::unique_ptr<Scheduler> scheduler = MakeRunning(running, state.range(1) != 0);
  if (!scheduler || !WarmUp(*scheduler, running)) {
    state.SkipWithError("setup failed");
    return nullptr;
  }
  return scheduler;
}

void BM_Schedule(benchmark::State& state) {
  std::unique_ptr<Scheduler> scheduler = SetUp(state);
  if (!scheduler) return;
  int64_t sequences = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    StepPlan plan = scheduler->Schedule();
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
    sequences += static_cast<int64_t>(plan.sequences.size());
    if (!scheduler->Update(plan, Answer(plan)).ok()) {
      state.SkipWithError("update failed");
      return;
    }
  }
  state.counters["seqs_per_plan"] =
      static_cast<double>(sequences) / static_cast<double>(state.iterations());
}

void BM_ScheduleAndUpdate(benchmark::State& state) {
  std::unique_ptr<Scheduler> scheduler = SetUp(state);
  if (!scheduler) return;
  for (auto _ : state) {
    StepPlan plan = scheduler->Schedule();
    StepResult result = Answer(plan);
    auto updates = scheduler->Update(plan, result);
    benchmark::DoNotOptimize(updates);
  }
}

void Sizes(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"running", "hybrid"});
  for (int64_t hybrid : {0, 1}) {
    for (int64_t running : {16, 256, 1024}) benchmark->Args({running, hybrid});
  }
  benchmark->Iterations(kSteps)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Schedule)->Apply(Sizes)->UseManualTime();
BENCHMARK(BM_ScheduleAndUpdate)->Apply(Sizes);

}  // namespace
}  // namespace coil

BENCHMARK_MAIN();
