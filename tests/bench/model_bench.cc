// The whole model's step time: decode at batch 1, 8 and 32 and prefill of one 512-token
// prompt (by default), on the CPU at TP1 or, under `mpirun -np N` in MPI builds, at TP N
// (every rank runs the same plans; rank 0 prints), or on one GPU (--device cuda). Reports
// tokens/s, the share of each step spent in collectives and, given the machine's memory
// bandwidth and peak matmul rate (defaults for an H200 with --device cuda), the bound
// beside each figure: decode reads the weights and every sequence's state once and writes
// the state once, and reads the K and V of every position of its context (models with
// attention layers); prefill does 2 flops per matrix weight and token, plus attention's
// 4 * head_dim flops per query head and pair of positions. It prints figures and asserts
// nothing.
//
// Decode runs after an 8-token prefill of each sequence, or, with --contexts, at each of
// the contexts given: every sequence then starts at that position on state rows and KV
// pages nobody wrote (a step's cost does not depend on their values), so that a 4096-token
// context needs no 4096-token prefill per sequence.
//
//   model_bench --model DIR [--device cpu|cuda] [--threads T] [--batches 1,8,32]
//               [--contexts 512,4096] [--decode-steps 32] [--prefill 512,4096]
//               [--prefill-seqs 1] [--block-size 16] [--weights auto|f32|bf16]
//               [--bandwidth-gbs G] [--peak-tflops T]
// Without --model it writes --shape (default 130m; nemotron-130m for the hybrid), bf16
// random weights, to a temporary directory.
// Builds without MPI; on the GPU machine: model_bench --device cuda --batches 1,8,64,256
// --prefill 2048 --prefill-seqs 8.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/cpus.h"
#include "workers/backend_flags.h"
#include "workers/model/model.h"
#include "workers/model/model_config.h"
#include "workers/model/model_writer.h"
#include "workers/model_flags.h"
#include "workers/model_runner.h"
#include "workers/rank_runtime.h"

// --device, --threads, --cuda-pdl, --cuda-matmul-rows, --weights, --cuda-graphs and
// --fused-mixer are shared with the other programs that run the model
// (workers/backend_flags.h, workers/model_flags.h).
ABSL_FLAG(std::string, model, "", "model directory (default: a random model of --shape)");
ABSL_FLAG(std::string, shape, "130m",
          "the shape written when no --model is given: 130m, nemotron-130m, tiny or "
          "nemotron-tiny");
ABSL_FLAG(std::string, batches, "1,8,32", "decode batch sizes");
ABSL_FLAG(std::string, contexts, "",
          "decode at each of these context lengths (e.g. 512,4096), every sequence starting "
          "there; empty: after an 8-token prefill");
ABSL_FLAG(int32_t, decode_steps, 32, "timed decode steps per batch size (0: no decode)");
ABSL_FLAG(std::string, prefill, "512", "prefill prompt lengths, comma-separated (0: none)");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV-cache page (models with attention layers)");
ABSL_FLAG(int32_t, prefill_seqs, 1, "prompts of --prefill tokens in the prefill step");
ABSL_FLAG(double, bandwidth_gbs, -1,
          "memory bandwidth for the decode bound, GB/s (-1: 4800 with cuda, none on the cpu)");
ABSL_FLAG(double, peak_tflops, -1,
          "peak matmul rate for the prefill bound, TFLOP/s (-1: 989, H200 dense bf16, with "
          "cuda; none on the cpu)");
ABSL_FLAG(std::string, dtype, "bf16", "weights written when no --model is given: f32 or bf16");
ABSL_FLAG(bool, profile_ops, false,
          "after the figures, time every op of the same decode steps (run op by op, no graphs) "
          "and prefill, and print where each step's time goes");

namespace coil {
namespace {

using Clock = std::chrono::steady_clock;

// "-" where no bound was given.
std::string BoundCell(double bound_ms) {
  return bound_ms > 0 ? absl::StrCat(absl::SixDigits(bound_ms)) : "-";
}
// How close a measured time comes to its bound (100% = at the bound).
std::string ShareCell(double bound, double measured) {
  if (bound <= 0 || measured <= 0) return "-";
  return absl::StrCat(static_cast<int>(bound / measured * 100 + 0.5), "%");
}

ScheduledSequence Seq(uint64_t id, int32_t slot, std::vector<int32_t> tokens, int32_t start) {
  ScheduledSequence s;
  s.request_id = id;
  s.state_slot = slot;
  s.fresh = start == 0;
  s.start_position = start;
  s.token_ids = std::move(tokens);
  s.sample = true;
  return s;
}

// The bound for a figure, or the default for the device when the flag is -1.
double BoundFlag(double flag, BackendKind device, double cuda_default) {
  if (flag >= 0) return flag;
  return device == BackendKind::kCuda ? cuda_default : 0.0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "model_bench [--model DIR] [--device cpu|cuda] [--threads T] [--batches 1,8,32] "
      "[--decode-steps 32] [--prefill 512] [--prefill-seqs 1] [--profile-ops]");
  ParseDashedCommandLine(argc, argv);
  const auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "model_bench: %s\n", status.ToString().c_str());
    return 1;
  };
  absl::StatusOr<BackendFlags> device = BackendFlagsFromCommandLine();
  if (!device.ok()) return fail(device.status());
  absl::StatusOr<model::LoadOptions> load = LoadOptionsFromCommandLine();
  if (!load.ok()) return fail(load.status());
  absl::StatusOr<std::unique_ptr<RankRuntime>> connected = RankRuntime::Connect(&argc, &argv);
  if (!connected.ok()) return fail(connected.status());
  RankRuntime& runtime = **connected;
  const int rank = runtime.rank();

  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    char path[256] = {};
    absl::Status written = absl::OkStatus();
    if (rank == 0) {
      const std::string shape = absl::GetFlag(FLAGS_shape);
      dir = (std::filesystem::temp_directory_path() /
             absl::StrCat("coil_bench_", shape, "_", ::getpid()))
                .string();
      absl::StatusOr<model::ModelConfig> config = model::NamedModelShape(shape);
      const checkpoint::DType dtype =
          absl::GetFlag(FLAGS_dtype) == "f32" ? checkpoint::DType::kF32 : checkpoint::DType::kBF16;
      model::WriteOptions options;
      if (config.ok() && config->format == model::ConfigFormat::kNemotronH) {
        options.layout = checkpoint::KeyLayout::kHuggingFace;
      }
      written =
          config.ok()
              ? model::WriteModelDirectory(
                    *config, model::RandomModelTensors(*config, dtype, checkpoint::DType::kF32, 1),
                    options, dir)
              : config.status();
      std::snprintf(path, sizeof(path), "%s", dir.c_str());
    }
    const absl::Status agreed = runtime.Agree(written);
    if (!agreed.ok()) return fail(agreed);
    (void)runtime.comm().Broadcast(path, sizeof(path), 0);
    dir = path;
  }
  std::vector<int32_t> batches;
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int32_t value = 0;
    if (absl::SimpleAtoi(b, &value) && value > 0) batches.push_back(value);
  }
  if (batches.empty()) return fail(absl::InvalidArgumentError("--batches lists no positive batch size"));
  const int32_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int32_t prefill_seqs = std::max(1, absl::GetFlag(FLAGS_prefill_seqs));
  // The decode contexts (kAfterPrefill: the 8-token prefill) and the prefill lengths.
  constexpr int32_t kAfterPrefill = -1;
  std::vector<int32_t> contexts, prompts_lengths;
  for (absl::string_view c :
       absl::StrSplit(absl::GetFlag(FLAGS_contexts), ',', absl::SkipEmpty())) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(c, &value) || value < 1) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("--contexts: '", c, "' is not a length")));
    }
    contexts.push_back(value);
  }
  if (contexts.empty()) contexts.push_back(kAfterPrefill);
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_prefill), ',', absl::SkipEmpty())) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(c, &value) || value < 0) {
      return fail(absl::InvalidArgumentError(absl::StrCat("--prefill: '", c, "' is not a length")));
    }
    if (value > 0) prompts_lengths.push_back(value);
  }
  // KV pages for the longest sequence the runs reach, on every state row (models with
  // attention layers; a Mamba2 model takes none).
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  const int32_t decode_steps = absl::GetFlag(FLAGS_decode_steps);
  if (decode_steps < 0) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--decode_steps: ", decode_steps, " is negative (0 runs no decode)")));
  }
  int32_t longest = 8 + decode_steps + 3;  // the prefill, warm-up, timed and profiled steps
  for (int32_t context : contexts) longest = std::max(longest, context + 2 * decode_steps + 3);
  for (int32_t length : prompts_lengths) longest = std::max(longest, length);
  const int32_t pages_per_row = block_size > 0 ? (longest + block_size - 1) / block_size : 0;
  const int32_t rows = std::max(max_batch, prefill_seqs);
  RunnerOptions run_options = RunnerOptionsFromCommandLine();
  run_options.block_size = block_size;
  run_options.kv_pages = int64_t{pages_per_row} * rows;
  run_options.max_context = longest;  // the decode graphs' capacity: every context timed

  absl::StatusOr<int64_t> max_host_memory = MaxHostMemoryFromCommandLine();
  absl::Status started = max_host_memory.status();
  if (started.ok()) started = runtime.OpenDevice(device->device, device->options);
  MemoryLimits limits;
  limits.max_host_bytes = max_host_memory.value_or(0);
  limits.pool_flags = "--batches";
  if (started.ok()) started = runtime.LoadModel(dir, *load, rows, run_options, limits);
  if (!started.ok()) {
    if (rank == 0) fail(started);
    return 1;
  }
  Backend* backend = &runtime.backend();
  model::Model* m = &runtime.model();
  ModelRunner* runner = &runtime.runner();
  const double bandwidth = BoundFlag(absl::GetFlag(FLAGS_bandwidth_gbs), device->device, 4800.0) * 1e9;
  const double peak = BoundFlag(absl::GetFlag(FLAGS_peak_tflops), device->device, 989.0) * 1e12;
  const double weight_bytes = static_cast<double>(m->weight_bytes());
  const double state_bytes =
      static_cast<double>(runner->state_pool().shape().bytes_per_sequence());
  const KvCache* kv_cache = runner->kv_cache();
  const double kv_bytes_per_token =
      kv_cache != nullptr ? static_cast<double>(kv_cache->shape().bytes_per_token()) : 0.0;
  // Matrix weights dominate the parameters: 2 flops per weight and token; attention adds
  // q.k and p.v, 2 * 2 * head_dim flops per query head and pair of positions (causal: a
  // prompt of L tokens has L (L + 1) / 2 pairs).
  const double flops_per_token = 2.0 * weight_bytes / DTypeSize(m->weight_dtype());
  const auto& config = m->config();
  const double attention_flops_per_pair =
      4.0 * static_cast<double>(config.num_layers(model::LayerKind::kAttention) *
                                m->layout().q_heads() * m->layout().attention_head_dim);
  // Sequence s owns pages [s * pages_per_row, ...) (the scheduler's job in a server).
  const auto paged = [&](std::vector<ScheduledSequence> seqs) {
    if (kv_cache == nullptr) return seqs;
    for (ScheduledSequence& seq : seqs) {
      const int32_t positions = seq.start_position + static_cast<int32_t>(seq.token_ids.size());
      seq.kv_block_table.clear();
      for (int32_t i = 0; i < (positions + block_size - 1) / block_size; ++i) {
        seq.kv_block_table.push_back(seq.state_slot * pages_per_row + i);
      }
    }
    return seqs;
  };
  const int threads = device->device == BackendKind::kCpu
                          ? ChooseThreads(device->options.threads, runtime.size())
                          : 0;
  const bool profile = absl::GetFlag(FLAGS_profile_ops);
  std::string profiles;  // printed after the figures
  // Runs work() `steps` times with every op timed and appends the table under `title`.
  const auto profiled = [&](const std::string& title, int steps, const auto& work) {
    backend->SetOpTiming(true);
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) work();
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    auto times = backend->TakeOpTimes();
    backend->SetOpTiming(false);
    if (!times.ok()) {
      std::fprintf(stderr, "op timing: %s\n", times.status().ToString().c_str());
      std::exit(1);
    }
    if (rank == 0) absl::StrAppend(&profiles, FormatOpTimes(title, *times, steps, wall));
  };
  uint64_t step = 0;
  auto run = [&](std::vector<ScheduledSequence> seqs, int32_t decodes) {
    StepPlan plan;
    plan.step_id = ++step;
    plan.num_decodes = decodes;
    plan.sequences = paged(std::move(seqs));
    StepResult result = runner->Execute(plan);
    if (!result.ok) {
      std::fprintf(stderr, "step failed: %s\n", result.error.c_str());
      std::exit(1);
    }
    return result;
  };
  if (rank == 0) {
    std::printf("model %s: %lld layers, d_model %lld, %s weights, TP %d, %s, %d thread(s) per rank, %zu MiB weights on rank 0\n",
                dir.c_str(), static_cast<long long>(config.n_layer), static_cast<long long>(config.d_model),
                DTypeName(m->weight_dtype()), runtime.size(), backend->Name().c_str(),
                threads, m->weight_bytes() >> 20);
    if (kv_cache != nullptr) {
      std::printf("KV cache: %lld pages of %d tokens, %.0f bytes per token of context\n",
                  static_cast<long long>(kv_cache->pages()), block_size, kv_bytes_per_token);
    }
    if (bandwidth > 0 || peak > 0) {
      std::printf(
          "bounds: %.0f GB/s (decode: weights + state read and written once per sequence, "
          "+ K/V of the context), %g TFLOP/s (prefill: 2 flops per weight and token, + "
          "attention's)\n",
          bandwidth / 1e9, peak / 1e12);
    }
    std::printf(
        "| phase | batch | context | tokens/s | ms/step | comm share | bound ms/step | of bound | "
        "graph nodes |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int32_t context : contexts) {
    if (decode_steps == 0) break;
    for (int32_t batch : batches) {
      // Prompts differ in their first token, kept inside the vocabulary of any model shape.
      const int32_t distinct = static_cast<int32_t>(std::max<int64_t>(1, config.vocab_size - 1));
      int32_t position = context;
      if (context == kAfterPrefill) {
        std::vector<ScheduledSequence> prefill;
        for (int32_t s = 0; s < batch; ++s) {
          prefill.push_back(Seq(s, s, {1 + s % distinct, 2, 3, 4, 5, 6, 7, 8}, 0));
        }
        run(prefill, 0);
        position = 8;
      }
      std::vector<int32_t> last(static_cast<size_t>(batch), 9);
      const int32_t context_shown = position;
      auto decode_step = [&]() {
        std::vector<ScheduledSequence> seqs;
        for (int32_t s = 0; s < batch; ++s) seqs.push_back(Seq(s, s, {last[s]}, position));
        StepResult r = run(seqs, batch);
        for (int32_t s = 0; s < batch; ++s) last[s] = r.tokens[s].token_id;
        ++position;
      };
      for (int w = 0; w < 2; ++w) decode_step();
      const int steps = decode_steps;
      const double comm_before = m->comm_seconds();
      const auto start = Clock::now();
      for (int i = 0; i < steps; ++i) decode_step();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double comm_share = (m->comm_seconds() - comm_before) / seconds;
      if (rank == 0) {
        const double per_step = seconds / steps;
        // The timed steps' mean context: they run from context_shown + 2 on.
        const double mean_context = context_shown + 2 + (steps - 1) / 2.0;
        const double bound =
            bandwidth > 0
                ? (weight_bytes + batch * (2.0 * state_bytes + mean_context * kv_bytes_per_token)) /
                      bandwidth
                : 0;
        // A decode step's launches, when it replays a graph (CUDA): what its overhead scales with.
        const int64_t nodes = runner->decode_graphs().nodes(batch);
        std::printf("| decode | %d | %d | %.1f | %.4f | %.1f%% | %s | %s | %s |\n", batch,
                    context_shown, batch * steps / seconds, per_step * 1e3, comm_share * 100,
                    BoundCell(bound * 1e3).c_str(), ShareCell(bound, per_step).c_str(),
                    nodes > 0 ? absl::StrCat(nodes).c_str() : "-");
      }
      if (profile) {
        // The same steps op by op: a graph replay would hide its ops.
        runner->decode_graphs().set_enabled(false);
        decode_step();  // warm the eager path
        profiled(absl::StrCat("decode, batch ", batch, ", context ", context_shown, ", op by op"),
                 steps, decode_step);
        runner->decode_graphs().set_enabled(RunnerOptionsFromCommandLine().cuda_graphs);
      }
    }
  }
  for (const int32_t prompt : prompts_lengths) {
    std::vector<ScheduledSequence> prompts;
    for (int32_t s = 0; s < prefill_seqs; ++s) {
      std::vector<int32_t> tokens(static_cast<size_t>(prompt));
      for (int32_t i = 0; i < prompt; ++i) {
        tokens[i] = (i * 7919 + s * 104729) % static_cast<int32_t>(config.vocab_size);
      }
      prompts.push_back(Seq(s, s, std::move(tokens), 0));
    }
    run(prompts, 0);  // warm-up
    double best = 1e30, comm_at_best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const double comm_before = m->comm_seconds();
      const auto start = Clock::now();
      run(prompts, 0);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (seconds < best) best = seconds, comm_at_best = m->comm_seconds() - comm_before;
    }
    if (rank == 0) {
      const double tokens = static_cast<double>(prompt) * prefill_seqs;
      const double pairs = static_cast<double>(prompt) * (prompt + 1) / 2.0 * prefill_seqs;
      const double bound =
          peak > 0 ? (tokens * flops_per_token + pairs * attention_flops_per_pair) / peak : 0;
      std::printf("| prefill | %d x %d | 0 | %.1f | %.4f | %.1f%% | %s | %s | - |\n", prefill_seqs,
                  prompt, tokens / best, best * 1e3, comm_at_best / best * 100,
                  BoundCell(bound * 1e3).c_str(), ShareCell(bound, best).c_str());
    }
    if (profile) {
      profiled(absl::StrCat("prefill, ", prefill_seqs, " x ", prompt, " tokens"), 1,
               [&] { run(prompts, 0); });
    }
  }
  if (rank == 0 && !profiles.empty()) std::printf("%s", profiles.c_str());
  if (rank == 0) {
    // What the backend chose for these runs (on CUDA, each matmul shape's pinned algorithm).
    const std::vector<std::string> notes = backend->Diagnostics();
    if (!notes.empty()) std::printf("\n");
    for (const std::string& note : notes) std::printf("%s\n", note.c_str());
  }
  if (rank == 0 && absl::GetFlag(FLAGS_model).empty()) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) { return coil::Main(argc, argv); }
