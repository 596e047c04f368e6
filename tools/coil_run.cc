// coil-run: the offline runner. Loads a model, runs a prompt through it with plans it
// builds itself (prefill in chunks, then one decode step per token), and prints the
// generated ids and text with prefill and decode speeds; a hybrid model (attention layers)
// gets KV pages for --max-model-len positions. Under `mpirun -np N` rank 0
// drives and the other ranks execute the same plans on their shards (MPI builds only; a
// build without MPI runs one process). With --device cuda rank r uses local GPU r and the
// model's collectives go through NCCL; step statuses and sampling stay on the host
// communicator. A build without the tokenizer (no ICU) takes --ids only.
//
//   coil-run --model DIR (--prompt TEXT | --ids 1,2,3) [--max-tokens N] [--threads T]
//            [--device cpu|cuda] [--temperature T --top-k K --top-p P --min-p P --seed S]
//            [--dump-logits FILE.npy] [--score FILE]
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/op_timing.h"
#include "tools/npy.h"
#include "workers/backend_flags.h"
#include "workers/model/model.h"
#include "workers/model_flags.h"
#include "workers/rank_runtime.h"
#if COIL_WITH_TOKENIZER
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_files.h"
#endif

// --device, --threads, --cuda-pdl, --cuda-matmul-rows, --weights, --cuda-graphs and
// --fused-mixer are shared with the other programs that run the model
// (workers/backend_flags.h, workers/model_flags.h).
ABSL_FLAG(std::string, model, "", "model directory (config.json and weights)");
ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(std::string, ids, "", "prompt as comma-separated token ids, instead of --prompt");
ABSL_FLAG(int32_t, max_tokens, 16, "tokens to generate");
ABSL_FLAG(bool, reference, false, "use the CPU reference kernels (token-by-token scan)");
ABSL_FLAG(float, temperature, 0.0f, "sampling temperature (0: greedy)");
ABSL_FLAG(int32_t, top_k, 0, "keep the k most likely tokens (0: all)");
ABSL_FLAG(float, top_p, 1.0f, "nucleus sampling threshold in (0, 1]");
ABSL_FLAG(float, min_p, 0.0f, "drop tokens below min_p times the most likely one");
ABSL_FLAG(uint64_t, seed, 0, "random seed for sampling");
ABSL_FLAG(bool, ignore_eos, false, "keep generating after the end-of-text token");
ABSL_FLAG(int32_t, prefill_chunk, 512,
          "most prompt tokens per step (rounded down to a multiple of the model's chunk size)");
ABSL_FLAG(std::string, dump_logits, "",
          "write the logits of every prompt position to this .npy file [n, padded_vocab] f32");
ABSL_FLAG(std::string, score, "",
          "report the mean negative log-likelihood and perplexity of this text (or token-id) file");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json (default: the model's, else GPT-NeoX-20B)");
ABSL_FLAG(bool, add_special_tokens, true,
          "a text --prompt or --score file gets the special tokens the tokenizer's post-processor "
          "adds (Llama 2's BOS; GPT-NeoX's adds none), as Hugging Face's tokenizers give them "
          "by default");
ABSL_FLAG(int32_t, max_model_len, 4096,
          "most tokens of the sequence, prompt plus output (or of a --score file): a model with "
          "attention layers holds that many positions of KV pages");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV-cache page (models with attention layers)");
ABSL_FLAG(bool, profile_ops, false,
          "time every op of rank 0 (on CUDA by events on its stream) and print where the "
          "prefill's and the decode's time went; with --cuda-graphs the decode shows its graph "
          "replays, with --cuda-graphs=false its ops");

namespace coil {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

absl::StatusOr<std::vector<int32_t>> ParseIds(absl::string_view text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, absl::ByAnyChar(", \n\t"), absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("'", piece, "' is not a token id; give integers like 1,2,3"));
    }
    ids.push_back(id);
  }
  return ids;
}

// The prompt's pieces: chunk-size multiples except the last (docs/ARCHITECTURE.md §4).
std::vector<std::pair<int32_t, int32_t>> PrefillPieces(int32_t length, int32_t chunk_size,
                                                       int32_t max_piece) {
  const int32_t piece = std::max(chunk_size, max_piece / chunk_size * chunk_size);
  std::vector<std::pair<int32_t, int32_t>> pieces;
  for (int32_t begin = 0; begin < length; begin += piece) {
    pieces.push_back({begin, std::min(piece, length - begin)});
  }
  return pieces;
}

// Log-sum-exp over the real vocabulary of one logits row.
double LogSumExp(const float* row, int64_t vocab) {
  double top = row[0];
  for (int64_t i = 1; i < vocab; ++i) top = std::max(top, double{row[i]});
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - top);
  return top + std::log(sum);
}

// Text in and out: the GPT-NeoX tokenizer where the build has it (ICU found), else none,
// and prompts are token ids.
class TextCodec {
 public:
#if COIL_WITH_TOKENIZER
  explicit TextCodec(std::unique_ptr<tokenizer::Tokenizer> tok) : tok_(std::move(tok)) {}
#endif
  static absl::StatusOr<std::unique_ptr<TextCodec>> Load(const std::string& model_dir,
                                                         const std::string& tokenizer_file) {
#if COIL_WITH_TOKENIZER
    COIL_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                          tokenizer::LoadTokenizerForModel(model_dir, tokenizer_file));
    return std::make_unique<TextCodec>(std::move(tok));
#else
    return absl::UnimplementedError(
        "this build has no tokenizer (ICU was not found when it was configured); give the "
        "prompt as --ids 1,2,3 or install libicu-dev and rebuild");
#endif
  }

  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const {
#if COIL_WITH_TOKENIZER
    return tok_->Encode(text, absl::GetFlag(FLAGS_add_special_tokens));
#else
    return absl::UnimplementedError("this build has no tokenizer");
#endif
  }
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const {
#if COIL_WITH_TOKENIZER
    return tok_->Decode(ids);
#else
    return absl::UnimplementedError("this build has no tokenizer");
#endif
  }
  std::optional<int32_t> EndOfText() const {
#if COIL_WITH_TOKENIZER
    return tokenizer::EndOfSequenceId(*tok_);
#else
    return std::nullopt;
#endif
  }

 private:
#if COIL_WITH_TOKENIZER
  std::unique_ptr<tokenizer::Tokenizer> tok_;
#endif
};

// Rank 0's work: generate, dump logits, score.
// With --profile-ops: the op times of the stretch of work just done, as a table on stdout.
absl::Status PrintOpTimes(Backend* profiled, const std::string& title, int steps,
                          double wall_seconds) {
  if (profiled == nullptr || steps <= 0) return absl::OkStatus();
  COIL_ASSIGN_OR_RETURN(std::vector<OpTime> times, profiled->TakeOpTimes());
  std::printf("%s", FormatOpTimes(title, times, steps, wall_seconds).c_str());
  return absl::OkStatus();
}

// `profiled`: rank 0's backend, timing every op, with --profile-ops (null otherwise).
// The plans' KV pages, for a model with attention layers: the one sequence owns pages
// 0, 1, ... of the runner's pool, as many as its positions need (block_size 0: no attention).
StepPlan Paged(StepPlan plan, int32_t block_size) {
  if (block_size <= 0) return plan;
  for (ScheduledSequence& seq : plan.sequences) {
    const int32_t positions = seq.start_position + static_cast<int32_t>(seq.token_ids.size());
    seq.kv_block_table.resize(static_cast<size_t>((positions + block_size - 1) / block_size));
    for (size_t i = 0; i < seq.kv_block_table.size(); ++i) {
      seq.kv_block_table[i] = static_cast<int32_t>(i);
    }
  }
  return plan;
}

// A sequence of `tokens` must fit the KV pages (models with attention layers).
absl::Status CheckLength(size_t tokens, int32_t block_size, const char* what) {
  const int32_t limit = absl::GetFlag(FLAGS_max_model_len);
  if (block_size <= 0 || static_cast<int64_t>(tokens) <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " takes ", tokens,
                                                 " tokens; --max-model-len is ", limit,
                                                 " (the KV pages hold that many): raise it"));
}

// `block_size`: the KV cache's page size, 0 for a model without attention layers.
absl::Status Drive(RankRuntime& driver, const model::ModelConfig& config, const TextCodec* tok,
                   const std::vector<int32_t>& prompt, Backend* profiled, int32_t block_size) {
  const int32_t chunk = static_cast<int32_t>(config.chunk_size);
  const int32_t max_piece = absl::GetFlag(FLAGS_prefill_chunk);
  uint64_t step_id = 0;
  const auto one = [&](const std::vector<int32_t>& tokens, int32_t begin, int32_t count,
                       bool sample, const SamplingParams& sampling, int32_t rng_step) {
    return Paged(OneSequencePlan(++step_id, tokens, begin, count, sample, sampling, rng_step),
                 block_size);
  };

  if (!absl::GetFlag(FLAGS_score).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_score), std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read --score file ", absl::GetFlag(FLAGS_score)));
    std::stringstream text;
    text << in.rdbuf();
    std::vector<int32_t> ids;
    auto as_ids = ParseIds(text.str());
    if (as_ids.ok() && !as_ids->empty()) {
      ids = *as_ids;
    } else {
      if (tok == nullptr) return absl::FailedPreconditionError("scoring text needs a tokenizer");
      COIL_ASSIGN_OR_RETURN(ids, tok->Encode(text.str()));
    }
    if (ids.size() < 2) return absl::InvalidArgumentError("the --score file needs at least 2 tokens");
    COIL_RETURN_IF_ERROR(CheckLength(ids.size(), block_size, "the --score file"));
    const auto start = Clock::now();
    double nll = 0.0;
    const int64_t padded = config.padded_vocab_size();
    for (auto [begin, count] : PrefillPieces(static_cast<int32_t>(ids.size()), chunk, max_piece)) {
      COIL_ASSIGN_OR_RETURN(std::vector<float> logits,
                            driver.RunAllLogits(one(ids, begin, count, false, {}, 0)));
      for (int32_t i = 0; i < count; ++i) {
        const int32_t position = begin + i;
        if (position + 1 >= static_cast<int32_t>(ids.size())) break;
        const float* row = &logits[static_cast<size_t>(i) * padded];
        nll += LogSumExp(row, config.vocab_size) - row[ids[position + 1]];
      }
    }
    const double mean = nll / static_cast<double>(ids.size() - 1);
    std::printf("score: %zu tokens, mean NLL %.4f nats, perplexity %.3f (%.0f tokens/s)\n",
                ids.size(), mean, std::exp(mean), static_cast<double>(ids.size()) / Seconds(start));
    if (prompt.empty()) return absl::OkStatus();
  }

  SamplingParams sampling;
  sampling.temperature = absl::GetFlag(FLAGS_temperature);
  sampling.top_k = absl::GetFlag(FLAGS_top_k);
  sampling.top_p = absl::GetFlag(FLAGS_top_p);
  sampling.min_p = absl::GetFlag(FLAGS_min_p);
  sampling.seed = absl::GetFlag(FLAGS_seed);
  COIL_RETURN_IF_ERROR(ValidateSamplingParams(sampling));
  std::optional<int32_t> eos;
  if (tok != nullptr && !absl::GetFlag(FLAGS_ignore_eos)) eos = tok->EndOfText();

  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> generated;
  const int32_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  if (max_tokens > 0) {
    // The last sampled token is never fed back: prompt + max_tokens - 1 positions.
    COIL_RETURN_IF_ERROR(CheckLength(prompt.size() + static_cast<size_t>(max_tokens) - 1,
                                     block_size, "the prompt plus --max-tokens"));
  }
  if (max_tokens > 0) {
    // The profile covers the generation only (not the scoring above).
    if (profiled != nullptr) COIL_RETURN_IF_ERROR(profiled->TakeOpTimes().status());
    auto start = Clock::now();
    const auto pieces = PrefillPieces(static_cast<int32_t>(prompt.size()), chunk, max_piece);
    for (size_t p = 0; p < pieces.size(); ++p) {
      const bool last = p + 1 == pieces.size();
      const StepResult result =
          driver.Run(one(tokens, pieces[p].first, pieces[p].second, last, sampling, 0));
      if (!result.ok) return absl::InternalError(result.error);
      if (last) generated.push_back(result.tokens.at(0).token_id);
    }
    prefill_seconds = Seconds(start);
    COIL_RETURN_IF_ERROR(PrintOpTimes(profiled, absl::StrCat("prefill, ", prompt.size(), " tokens"),
                                      1, prefill_seconds));
    start = Clock::now();
    while (static_cast<int32_t>(generated.size()) < max_tokens &&
           !(eos.has_value() && generated.back() == *eos)) {
      tokens.push_back(generated.back());
      const StepResult result =
          driver.Run(one(tokens, static_cast<int32_t>(tokens.size()) - 1, 1, true, sampling,
                         static_cast<int32_t>(generated.size())));
      if (!result.ok) return absl::InternalError(result.error);
      generated.push_back(result.tokens.at(0).token_id);
    }
    decode_seconds = Seconds(start);
    const int decode_steps = static_cast<int>(generated.size()) - 1;
    COIL_RETURN_IF_ERROR(PrintOpTimes(profiled, absl::StrCat("decode, ", decode_steps, " steps"),
                                      decode_steps, decode_seconds));
    std::printf("ids: %s\n", absl::StrJoin(generated, ",").c_str());
    if (tok != nullptr) {
      COIL_ASSIGN_OR_RETURN(std::string text, tok->Decode(generated));
      std::printf("text: %s\n", text.c_str());
    }
    std::printf("prefill: %zu tokens in %.1f ms (%.1f tokens/s)\n", prompt.size(),
                prefill_seconds * 1e3, static_cast<double>(prompt.size()) / prefill_seconds);
    if (generated.size() > 1) {
      std::printf("decode: %zu tokens in %.1f ms (%.1f tokens/s)\n", generated.size() - 1,
                  decode_seconds * 1e3, static_cast<double>(generated.size() - 1) / decode_seconds);
    }
  }

  if (!absl::GetFlag(FLAGS_dump_logits).empty()) {
    COIL_RETURN_IF_ERROR(CheckLength(prompt.size(), block_size, "the prompt"));
    const int64_t padded = config.padded_vocab_size();
    std::vector<float> all;
    for (auto [begin, count] : PrefillPieces(static_cast<int32_t>(prompt.size()), chunk, max_piece)) {
      COIL_ASSIGN_OR_RETURN(std::vector<float> logits,
                            driver.RunAllLogits(one(prompt, begin, count, false, {}, 0)));
      all.insert(all.end(), logits.begin(), logits.end());
    }
    COIL_RETURN_IF_ERROR(WriteNpyF32(absl::GetFlag(FLAGS_dump_logits), all,
                                     {static_cast<int64_t>(prompt.size()), padded}));
    std::printf("logits: [%zu, %lld] written to %s\n", prompt.size(),
                static_cast<long long>(padded), absl::GetFlag(FLAGS_dump_logits).c_str());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coil-run --model DIR (--prompt TEXT | --ids 1,2,3) [--max-tokens N] [--threads T] "
      "[--device cpu|cuda] [--dump-logits FILE.npy] [--score FILE]");
  ParseDashedCommandLine(argc, argv);
  absl::StatusOr<std::unique_ptr<RankRuntime>> connected = RankRuntime::Connect(&argc, &argv);
  if (!connected.ok()) {
    std::fprintf(stderr, "coil-run: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  RankRuntime& runtime = **connected;
  const int rank = runtime.rank();
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  const auto failed = [rank](const absl::Status& agreed) {
    if (agreed.ok()) return false;
    if (rank == 0) std::fprintf(stderr, "coil-run: %s\n", agreed.ToString().c_str());
    return true;
  };

  // Everything a rank needs before the first step, phase by phase; any rank's failure is
  // every rank's (RankRuntime agrees on each phase's status).
  absl::StatusOr<BackendFlags> device = BackendFlagsFromCommandLine();
  absl::StatusOr<model::LoadOptions> load = LoadOptionsFromCommandLine();
  absl::StatusOr<int64_t> max_host_memory = MaxHostMemoryFromCommandLine();
  const absl::Status arguments = [&]() -> absl::Status {
    if (model_dir.empty()) return absl::InvalidArgumentError("--model DIR is required");
    if (absl::GetFlag(FLAGS_prompt).empty() == absl::GetFlag(FLAGS_ids).empty() &&
        absl::GetFlag(FLAGS_score).empty()) {
      return absl::InvalidArgumentError("give exactly one of --prompt TEXT and --ids 1,2,3");
    }
    COIL_RETURN_IF_ERROR(device.status());
    COIL_RETURN_IF_ERROR(max_host_memory.status());
    return load.status();
  }();
  if (failed(runtime.Agree(arguments))) return 1;
  device->options.use_reference = absl::GetFlag(FLAGS_reference);
  if (failed(runtime.OpenDevice(device->device, device->options))) return 1;
  // One sequence on state row 0; a model with attention layers gets KV pages for
  // --max-model-len positions (a Mamba2 model none).
  RunnerOptions run = RunnerOptionsFromCommandLine();
  run.block_size = absl::GetFlag(FLAGS_block_size);
  if (run.block_size < 1 || absl::GetFlag(FLAGS_max_model_len) < 1) {
    if (rank == 0) {
      std::fprintf(stderr, "coil-run: --block-size and --max-model-len must be at least 1\n");
    }
    return 1;
  }
  run.kv_pages = (absl::GetFlag(FLAGS_max_model_len) + run.block_size - 1) / run.block_size;
  run.max_context = absl::GetFlag(FLAGS_max_model_len);
  // Refused before any weight is read when the weights do not fit (workers/memory_fit.h).
  MemoryLimits limits;
  limits.max_host_bytes = *max_host_memory;
  // (Its pools are one sequence's: no flag of the pools to advise.)
  if (failed(runtime.LoadModel(model_dir, *load, /*state_rows=*/1, run, limits))) return 1;

  // Rank 0: the tokenizer (text needs it; ids and an ids --score file do not) and the prompt.
  std::unique_ptr<TextCodec> tok;
  std::vector<int32_t> prompt;
  const model::ModelConfig& config = runtime.model().config();
  absl::Status prepared = [&]() -> absl::Status {
    if (rank != 0) return absl::OkStatus();
    auto loaded = TextCodec::Load(model_dir, absl::GetFlag(FLAGS_tokenizer));
    if (loaded.ok()) {
      tok = std::move(loaded).value();
    } else if (!absl::GetFlag(FLAGS_prompt).empty() || !absl::GetFlag(FLAGS_tokenizer).empty()) {
      return loaded.status();
    }
    if (!absl::GetFlag(FLAGS_ids).empty()) {
      COIL_ASSIGN_OR_RETURN(prompt, ParseIds(absl::GetFlag(FLAGS_ids)));
    } else if (!absl::GetFlag(FLAGS_prompt).empty()) {
      COIL_ASSIGN_OR_RETURN(prompt, tok->Encode(absl::GetFlag(FLAGS_prompt)));
    }
    for (int32_t id : prompt) {
      if (id < 0 || id >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary [0, ",
                                                       config.vocab_size, ")"));
      }
    }
    if (prompt.empty() && absl::GetFlag(FLAGS_score).empty()) {
      return absl::InvalidArgumentError("the prompt is empty; give some text or ids");
    }
    return absl::OkStatus();
  }();
  if (failed(runtime.Agree(prepared))) return 1;
  if (rank == 0) {
    COIL_LOG(INFO) << "loaded " << model_dir << ": " << config.n_layer << " layers, d_model "
                   << config.d_model << ", " << DTypeName(runtime.model().weight_dtype())
                   << " weights, " << runtime.model().weight_bytes() / (1 << 20)
                   << " MiB on rank 0, TP " << runtime.size() << ", " << runtime.backend().Name();
  }

  if (rank != 0) {
    const absl::Status done = runtime.ServePlans();
    if (!done.ok()) {
      std::fprintf(stderr, "coil-run rank %d: %s\n", rank, done.ToString().c_str());
      return 1;
    }
    return 0;
  }
  Backend* profiled = absl::GetFlag(FLAGS_profile_ops) ? &runtime.backend() : nullptr;
  if (profiled != nullptr) profiled->SetOpTiming(true);
  const int32_t block_size =
      runtime.runner().kv_cache() != nullptr ? static_cast<int32_t>(run.block_size) : 0;
  const absl::Status driven = Drive(runtime, config, tok.get(), prompt, profiled, block_size);
  const absl::Status shutdown = runtime.Shutdown();
  if (!driven.ok()) {
    std::fprintf(stderr, "coil-run: %s\n", driven.ToString().c_str());
    return 1;
  }
  if (!shutdown.ok()) {
    std::fprintf(stderr, "coil-run: shutting down the workers: %s\n", shutdown.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) { return coil::Main(argc, argv); }
