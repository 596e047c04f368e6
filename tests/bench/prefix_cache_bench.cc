// Time to first token with the prefix cache, through the scheduler and the runner as
// coil-serve runs them (without gRPC): a request of a --system-tokens system prompt and a
// --question-tokens question, cold (nothing of it cached) and warm (the system prompt
// cached by an earlier request, which marked its end with cache_prefix_tokens), beside the
// question alone. Each repeat draws a new system prompt, so every cold run is cold. Prints
// the median of each over --repeats, warm / question-alone (the target is at most 1.5: a
// hit costs one state-row copy), and the copy's own time beside its bound (the row read and
// written once at --bandwidth-gbs). TP1, or TP N under mpirun (rank 0 plans and prints). It
// asserts nothing.
//
//   prefix_cache_bench [--model DIR] [--device cpu|cuda] [--threads T] [--system-tokens 2048]
//                      [--question-tokens 32] [--repeats 5] [--bandwidth-gbs G]
// Without --model it writes the 130m shape (bf16, random) to a temporary directory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/cpus.h"
#include "scheduler/scheduler.h"
#include "workers/backend_flags.h"
#include "workers/model/model_config.h"
#include "workers/model/model_writer.h"
#include "workers/model_flags.h"
#include "workers/rank_runtime.h"

ABSL_FLAG(std::string, model, "", "model directory (default: a random 130m-shape model)");
ABSL_FLAG(std::string, dtype, "bf16", "weights written when no --model is given: f32 or bf16");
ABSL_FLAG(int32_t, system_tokens, 2048, "tokens of the shared system prompt");
ABSL_FLAG(int32_t, question_tokens, 32, "tokens of each question");
ABSL_FLAG(int32_t, repeats, 5, "timed repeats of each request kind (the median is printed)");
ABSL_FLAG(int32_t, max_batched_tokens, 2048, "the scheduler's tokens per step");
ABSL_FLAG(double, bandwidth_gbs, -1, "memory bandwidth for the copy's bound, GB/s (-1: none)");

namespace coil {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<int32_t> RandomTokens(int32_t count, int32_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(1, vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (int32_t& token : tokens) token = id(rng);
  return tokens;
}

// Rank 0: adds one request and steps until its first token; seconds from AddRequest to then,
// and the prompt tokens it resumed from the cache.
struct Timed {
  double seconds = 0;
  int32_t cached = 0;
};
absl::StatusOr<Timed> FirstToken(Scheduler& scheduler, RankRuntime& runtime, uint64_t id,
                                 std::vector<int32_t> prompt, int32_t cache_prefix_tokens) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = std::move(prompt);
  request.max_tokens = 1;
  request.cache_prefix_tokens = cache_prefix_tokens;
  const Clock::time_point start = Clock::now();
  if (absl::Status added = scheduler.AddRequest(std::move(request)); !added.ok()) return added;
  while (scheduler.HasUnfinishedRequests()) {
    const StepPlan plan = scheduler.Schedule();
    const StepResult result = runtime.Run(plan);
    if (!result.ok) return absl::InternalError(result.error);
    absl::StatusOr<std::vector<RequestUpdate>> updates = scheduler.Update(plan, result);
    if (!updates.ok()) return updates.status();
    for (const RequestUpdate& update : *updates) {
      if (update.token.has_value()) {
        return Timed{std::chrono::duration<double>(Clock::now() - start).count(),
                     update.num_cached_tokens};
      }
    }
  }
  return absl::InternalError("the request ended without a token");
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "prefix_cache_bench [--model DIR] [--device cpu|cuda] [--threads T] [--system-tokens 2048] "
      "[--question-tokens 32] [--repeats 5] [--bandwidth-gbs G]");
  ParseDashedCommandLine(argc, argv);
  const auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", status.ToString().c_str());
    return 1;
  };
  absl::StatusOr<BackendFlags> device = BackendFlagsFromCommandLine();
  if (!device.ok()) return fail(device.status());
  absl::StatusOr<model::LoadOptions> load = LoadOptionsFromCommandLine();
  if (!load.ok()) return fail(load.status());
  const int32_t system_tokens = absl::GetFlag(FLAGS_system_tokens);
  const int32_t question_tokens = absl::GetFlag(FLAGS_question_tokens);
  const int32_t repeats = absl::GetFlag(FLAGS_repeats);
  if (system_tokens < 1 || question_tokens < 1 || repeats < 1) {
    return fail(absl::InvalidArgumentError(
        "--system-tokens, --question-tokens and --repeats must be at least 1"));
  }
  absl::StatusOr<std::unique_ptr<RankRuntime>> connected = RankRuntime::Connect(&argc, &argv);
  if (!connected.ok()) return fail(connected.status());
  RankRuntime& runtime = **connected;
  const int rank = runtime.rank();

  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    char path[256] = {};
    absl::Status written = absl::OkStatus();
    if (rank == 0) {
      dir = (std::filesystem::temp_directory_path() /
             absl::StrCat("coil_prefix_bench_130m_", ::getpid()))
                .string();
      auto config = *model::NamedModelShape("130m");
      const checkpoint::DType dtype =
          absl::GetFlag(FLAGS_dtype) == "f32" ? checkpoint::DType::kF32 : checkpoint::DType::kBF16;
      written = model::WriteModelDirectory(
          config, model::RandomModelTensors(config, dtype, checkpoint::DType::kF32, 1),
          model::WriteOptions{}, dir);
      std::snprintf(path, sizeof(path), "%s", dir.c_str());
    }
    const absl::Status agreed = runtime.Agree(written);
    if (!agreed.ok()) return fail(agreed);
    (void)runtime.comm().Broadcast(path, sizeof(path), 0);
    dir = path;
  }

  constexpr int32_t kStateRows = 8;
  absl::Status started = runtime.OpenDevice(device->device, device->options);
  if (started.ok()) started = runtime.LoadModel(dir, *load, kStateRows);
  if (!started.ok()) {
    if (rank == 0) fail(started);
    return 1;
  }
  if (rank != 0) {
    const absl::Status served = runtime.ServePlans();
    return served.ok() ? 0 : fail(served);
  }

  const model::ModelConfig& config = runtime.model().config();
  SchedulerConfig scheduler_config;
  scheduler_config.max_num_seqs = kStateRows;
  scheduler_config.state_rows = kStateRows;
  scheduler_config.max_batched_tokens = absl::GetFlag(FLAGS_max_batched_tokens);
  scheduler_config.max_model_len = system_tokens + 2 * question_tokens + 2;
  scheduler_config.ssd_chunk_size = static_cast<int32_t>(config.chunk_size);
  scheduler_config.prefix_cache = true;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(scheduler_config);
  if (!scheduler.ok()) return fail(scheduler.status());

  const int32_t vocab = static_cast<int32_t>(config.vocab_size);
  std::mt19937_64 rng(2024);
  std::vector<double> alone, cold, warm;
  int32_t cached = 0;
  uint64_t id = 0;
  // One untimed round first: the first steps of a process allocate the step scratch.
  for (int32_t round = -1; round < repeats; ++round) {
    const std::vector<int32_t> system = RandomTokens(system_tokens, vocab, rng);
    const auto with = [&](const std::vector<int32_t>& question) {
      std::vector<int32_t> prompt = system;
      prompt.insert(prompt.end(), question.begin(), question.end());
      return prompt;
    };
    absl::StatusOr<Timed> a =
        FirstToken(**scheduler, runtime, ++id, RandomTokens(question_tokens, vocab, rng), 0);
    if (!a.ok()) return fail(a.status());
    absl::StatusOr<Timed> c = FirstToken(
        **scheduler, runtime, ++id, with(RandomTokens(question_tokens, vocab, rng)), system_tokens);
    if (!c.ok()) return fail(c.status());
    absl::StatusOr<Timed> w =
        FirstToken(**scheduler, runtime, ++id, with(RandomTokens(question_tokens, vocab, rng)), 0);
    if (!w.ok()) return fail(w.status());
    if (round < 0) continue;
    alone.push_back(a->seconds);
    cold.push_back(c->seconds);
    warm.push_back(w->seconds);
    cached = w->cached;
  }

  // The copy a hit costs, alone: one sequence's state of every layer, row to row.
  Backend& backend = runtime.backend();
  const StatePool& pool = runtime.runner().state_pool();
  constexpr int kCopies = 20;
  const Clock::time_point copy_start = Clock::now();
  for (int i = 0; i < kCopies; ++i) {
    if (absl::Status copied = pool.CopyRow(backend, i % 2, 1 - i % 2); !copied.ok()) {
      return fail(copied);
    }
  }
  if (absl::Status synced = backend.Synchronize(); !synced.ok()) return fail(synced);
  const double copy_s = std::chrono::duration<double>(Clock::now() - copy_start).count() / kCopies;
  const double row_bytes = static_cast<double>(pool.shape().bytes_per_sequence());
  const double bandwidth = absl::GetFlag(FLAGS_bandwidth_gbs) * 1e9;

  const double alone_s = Median(alone), cold_s = Median(cold), warm_s = Median(warm);
  const int threads = device->device == BackendKind::kCpu
                          ? ChooseThreads(device->options.threads, runtime.size())
                          : 0;
  std::printf(
      "prefix cache: %d-token system prompt + %d-token question, %s, TP %d%s, "
      "median of %d\n",
      system_tokens, question_tokens, backend.Name().c_str(), runtime.size(),
      threads > 0 ? absl::StrCat(", ", threads, " threads per rank").c_str() : "", repeats);
  std::printf("| request | TTFT ms | tokens computed |\n|---|---|---|\n");
  std::printf("| question alone | %.1f | %d |\n", alone_s * 1e3, question_tokens);
  std::printf("| cold (system + question) | %.1f | %d |\n", cold_s * 1e3,
              system_tokens + question_tokens);
  std::printf("| warm (system cached) | %.1f | %d |\n", warm_s * 1e3,
              system_tokens + question_tokens - cached);
  std::printf("warm / question alone: %.2fx (target <= 1.5x); cold / warm: %.1fx\n",
              warm_s / alone_s, cold_s / warm_s);
  std::printf("state row copy: %.2f ms for %.1f MiB per rank", copy_s * 1e3, row_bytes / (1 << 20));
  if (bandwidth > 0) {
    const double bound = 2 * row_bytes / bandwidth;
    std::printf(" (bound %.2f ms: read and written once at %.0f GB/s; %.0f%% of it)", bound * 1e3,
                bandwidth / 1e9, bound / copy_s * 100);
  }
  std::printf("\n");
  if (absl::Status shut = runtime.Shutdown(); !shut.ok()) return fail(shut);
  if (absl::GetFlag(FLAGS_model).empty()) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) { return coil::Main(argc, argv); }
