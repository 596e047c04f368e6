// What a bf16 SSM state (--state-dtype bf16) does to a model's output: the same model is
// loaded twice on the CPU, once with each state type, and both are fed the same tokens: a
// prompt in one prefill step, then one decode step per token (the state rounded to bf16
// after every step in the second). Each step's logits are compared with the f32-state run's:
// the largest difference relative to the largest logit, the KL divergence of the
// distributions, whether the most likely token agrees, and the mean negative log-likelihood
// of the tokens fed next (the decode-step perplexity). It prints figures and asserts nothing.
//
// The tokens are those of --ids-file (comma-separated ids, as `coil-run --score` reads; a
// tokenized text), or else the f32 run's own greedy choices.
//
//   state_dtype_bench [--model DIR] [--shape 130m] [--threads 2] [--prompt 64]
//                     [--decode-steps 1000] [--ids-file FILE]
// Without --model it writes --shape with random bf16 matrices to a temporary directory.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/command_line.h"
#include "common/status_macros.h"
#include "kernels/backend_factory.h"
#include "scheduler/plan.h"
#include "workers/comm/single_rank_communicator.h"
#include "workers/model/model.h"
#include "workers/model/model_config.h"
#include "workers/model/model_files.h"
#include "workers/model/model_writer.h"
#include "workers/model_runner.h"

ABSL_FLAG(std::string, model, "", "model directory (default: a random model of --shape)");
ABSL_FLAG(std::string, shape, "130m", "the shape written when no --model is given");
ABSL_FLAG(int32_t, threads, 2, "CPU threads of each backend");
ABSL_FLAG(int32_t, prompt, 64, "tokens prefilled in one step before the decode steps");
ABSL_FLAG(int32_t, decode_steps, 1000, "decode steps compared");
ABSL_FLAG(std::string, ids_file, "",
          "comma-separated token ids to feed (at least --prompt + --decode-steps + 1); "
          "default: the f32 run's greedy tokens after a random prompt");

namespace coil {
namespace {

struct Instance {
  model::ModelFiles files;
  std::unique_ptr<Backend> backend;
  comm::SingleRankCommunicator comm;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ModelRunner> runner;
};

absl::StatusOr<std::unique_ptr<Instance>> Load(const std::string& dir, DType state_dtype) {
  auto instance = std::make_unique<Instance>();
  COIL_ASSIGN_OR_RETURN(instance->files, model::OpenModelFiles(dir));
  BackendOptions options;
  options.threads = absl::GetFlag(FLAGS_threads);
  COIL_ASSIGN_OR_RETURN(instance->backend, CreateBackend(BackendKind::kCpu, options));
  COIL_ASSIGN_OR_RETURN(instance->model,
                        model::Model::Load(instance->files, *instance->backend, instance->comm, {}));
  RunnerOptions run;
  run.state_dtype = state_dtype;
  COIL_ASSIGN_OR_RETURN(instance->runner, ModelRunner::Create(*instance->model, *instance->backend,
                                                              instance->comm, 1, run));
  return instance;
}

absl::StatusOr<std::vector<int32_t>> ReadIds(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --ids-file ", path));
  std::stringstream text;
  text << in.rdbuf();
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text.str(), absl::ByAnyChar(", \n\t[]"),
                                                absl::SkipWhitespace())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ids-file: '", piece, "' is not a token id (write ids as 1,2,3)"));
    }
    ids.push_back(id);
  }
  return ids;
}

// log(sum(exp(row))) over the real vocabulary, in double.
double LogSumExp(const float* row, int64_t vocab) {
  double top = row[0];
  for (int64_t i = 1; i < vocab; ++i) top = std::max(top, double{row[i]});
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - top);
  return top + std::log(sum);
}

int64_t ArgMax(const float* row, int64_t vocab) {
  return std::max_element(row, row + vocab) - row;
}

// One window of steps [first, last] (1-based decode steps; 0 is the prompt's last row).
struct Window {
  int32_t first, last;
  double max_relative = 0, sum_kl = 0, max_kl = 0, nll_f32 = 0, nll_bf16 = 0;
  int32_t steps = 0, agree = 0;
};

absl::Status Run() {
  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() /
           absl::StrCat("coil_state_dtype_bench_", ::getpid()))
              .string();
    COIL_ASSIGN_OR_RETURN(model::ModelConfig config,
                          model::NamedModelShape(absl::GetFlag(FLAGS_shape)));
    COIL_RETURN_IF_ERROR(model::WriteModelDirectory(
        config,
        model::RandomModelTensors(config, checkpoint::DType::kBF16, checkpoint::DType::kF32, 1),
        {}, dir));
  }
  COIL_ASSIGN_OR_RETURN(std::unique_ptr<Instance> f32, Load(dir, DType::kF32));
  COIL_ASSIGN_OR_RETURN(std::unique_ptr<Instance> bf16, Load(dir, DType::kBF16));
  const model::ModelConfig& config = f32->model->config();
  const int64_t vocab = config.vocab_size, padded = config.padded_vocab_size();
  const int32_t prompt = absl::GetFlag(FLAGS_prompt), steps = absl::GetFlag(FLAGS_decode_steps);
  if (prompt < 1 || prompt > config.chunk_size || steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompt must be in [1, ", config.chunk_size, "] (one prefill piece) and --decode-steps "
        "at least 1"));
  }

  std::vector<int32_t> tokens;
  const bool greedy = absl::GetFlag(FLAGS_ids_file).empty();
  if (greedy) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab) - 1);
    for (int32_t i = 0; i < prompt; ++i) tokens.push_back(pick(rng));
  } else {
    COIL_ASSIGN_OR_RETURN(tokens, ReadIds(absl::GetFlag(FLAGS_ids_file)));
    if (static_cast<int64_t>(tokens.size()) < prompt + steps + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ids-file holds ", tokens.size(), " ids; --prompt + --decode-steps + 1 = ",
          prompt + steps + 1, " are needed"));
    }
    for (int32_t id : tokens) {
      if (id >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("--ids-file: id ", id, " is outside the vocabulary of ", vocab));
      }
    }
  }

  std::vector<Window> windows = {{0, 0}, {1, 10}, {11, 100}, {101, 1000}, {1001, 10000},
                                 {10001, 100000}};
  windows.erase(std::remove_if(windows.begin(), windows.end(),
                               [&](const Window& w) { return w.first > steps; }),
                windows.end());
  windows.back().last = steps;
  windows.push_back({1, steps});  // all decode steps

  uint64_t step_id = 0;
  for (int32_t step = 0; step <= steps; ++step) {
    // Step 0 prefills the prompt; step s > 0 decodes the token at position prompt + s - 1.
    const int32_t begin = step == 0 ? 0 : prompt + step - 1;
    const int32_t count = step == 0 ? prompt : 1;
    const StepPlan plan = OneSequencePlan(++step_id, tokens, begin, count, false, {}, 0);
    COIL_ASSIGN_OR_RETURN(std::vector<float> a, f32->runner->ExecuteAllLogits(plan));
    COIL_ASSIGN_OR_RETURN(std::vector<float> b, bf16->runner->ExecuteAllLogits(plan));
    const float* ra = &a[static_cast<size_t>(count - 1) * padded];
    const float* rb = &b[static_cast<size_t>(count - 1) * padded];
    const int32_t position = begin + count - 1;
    if (greedy && position + 1 >= static_cast<int32_t>(tokens.size())) {
      tokens.push_back(static_cast<int32_t>(ArgMax(ra, vocab)));
    }
    const int32_t next = tokens[position + 1];
    const double lse_a = LogSumExp(ra, vocab), lse_b = LogSumExp(rb, vocab);
    double top = 0, diff = 0, kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      top = std::max(top, std::abs(double{ra[i]}));
      diff = std::max(diff, std::abs(double{ra[i]} - rb[i]));
      const double la = ra[i] - lse_a, lb = rb[i] - lse_b;
      kl += std::exp(la) * (la - lb);
    }
    for (Window& w : windows) {
      if (step < w.first || step > w.last) continue;
      ++w.steps;
      w.max_relative = std::max(w.max_relative, diff / top);
      w.sum_kl += kl;
      w.max_kl = std::max(w.max_kl, kl);
      w.agree += ArgMax(ra, vocab) == ArgMax(rb, vocab) ? 1 : 0;
      w.nll_f32 += lse_a - ra[next];
      w.nll_bf16 += lse_b - rb[next];
    }
  }

  std::printf("model %s, %d-token prompt, %d decode steps, tokens: %s\n", dir.c_str(), prompt,
              steps, greedy ? "the f32 run's greedy choices" : "--ids-file");
  std::printf("%-14s %6s %14s %11s %11s %8s %11s %11s\n", "steps", "n", "max |dlogit|",
              "mean KL", "max KL", "top-1", "ppl f32", "ppl bf16");
  std::printf("%-14s %6s %14s %11s %11s %8s %11s %11s\n", "", "", "/ max |logit|", "(nats)",
              "(nats)", "agrees", "state", "state");
  for (const Window& w : windows) {
    const std::string label =
        w.first == 0 ? "prompt's last" : absl::StrCat(w.first, "-", w.last);
    std::printf("%-14s %6d %14.3e %11.3e %11.3e %7.1f%% %11.4f %11.4f\n", label.c_str(), w.steps,
                w.max_relative, w.sum_kl / w.steps, w.max_kl, 100.0 * w.agree / w.steps,
                std::exp(w.nll_f32 / w.steps), std::exp(w.nll_bf16 / w.steps));
  }
  if (absl::GetFlag(FLAGS_model).empty()) std::filesystem::remove_all(dir);
  return absl::OkStatus();
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "state_dtype_bench [--model DIR] [--shape 130m] [--threads 2] [--prompt 64] "
      "[--decode-steps 1000] [--ids-file FILE]");
  coil::ParseDashedCommandLine(argc, argv);
  const absl::Status status = coil::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "state_dtype_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
