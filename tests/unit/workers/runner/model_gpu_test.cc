// The whole model on a GPU at the 130m widths (4 of its 24 layers, to keep the CPU side
// short): logits against the CPU backend, greedy tokens of a prompt split over three steps
// against the prompt in one step, and decode graphs against eager decodes of the same
// padded batch (exactly) and of the unpadded batch (within bf16 tolerance), with the
// scratch-row padding leaving every other state row alone; and a hybrid's decode graph
// (nemotron-tiny) replayed over growing contexts against op-by-op steps. Skips where no GPU
// is visible.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "tests/unit/workers/runner/thread_ranks.h"
#include "workers/model/step_metadata.h"
#if COIL_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace coil {
namespace {

using testing_reference::LoadedModel;
using testing_reference::PlanOf;
using testing_reference::RunOf;
using testing_reference::TestPages;
using testing_reference::TokensBelow;
using testing_reference::WithPages;
using testing_reference::WorstRowError;

// pdl: programmatic dependent launch for the kernels that take it (sm_90 and newer; an
// older GPU answers UNAVAILABLE, so the test skips).
absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(bool pdl = false) {
#if COIL_WITH_CUDA
  auto backend = cuda::CudaBackend::Create(0);
  if (!backend.ok()) return backend.status();
  if (pdl && !(*backend)->set_pdl(true)) {
    return absl::UnavailableError("programmatic dependent launch needs sm_90 or newer");
  }
  return std::unique_ptr<Backend>(std::move(backend).value());
#else
  return absl::UnavailableError("this build has no CUDA backend (configured without nvcc)");
#endif
}

// Skips the test where no GPU can be used; any other failure to create one fails it.
#define COIL_GPU_OR_SKIP(var)                             \
  auto var = MakeGpuBackend();                            \
  if (!var.ok() && absl::IsUnavailable(var.status())) {   \
    GTEST_SKIP() << "no GPU: " << var.status().message(); \
  }                                                       \
  ASSERT_TRUE(var.ok()) << var.status()

std::string Write130m(const std::string& name, checkpoint::DType dtype) {
  auto dir = testing_reference::WriteShape(name, "130m", dtype, {{"n_layer", "4"}});
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : std::string();
}

std::unique_ptr<LoadedModel> Load(const std::string& dir, std::unique_ptr<Backend> backend,
                                  int64_t state_rows) {
  auto loaded =
      testing_reference::LoadOn(dir, std::move(backend), state_rows, model::WeightType::kAuto);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

std::unique_ptr<LoadedModel> LoadCpu(const std::string& dir, int64_t state_rows) {
  BackendOptions options;
  options.threads = 2;
  return Load(dir, *CreateBackend(BackendKind::kCpu, options), state_rows);
}

// A prefill step mixing a long prompt (chunks of 256 and a partial one), a short one and a
// one-token one, then a step of their decodes: GPU logits against CPU logits.
void ExpectGpuMatchesCpu(checkpoint::DType dtype, double tolerance) {
  COIL_GPU_OR_SKIP(gpu_backend);
  const std::string dir = Write130m(dtype == checkpoint::DType::kF32 ? "gpu_f32" : "gpu_bf16", dtype);
  std::unique_ptr<LoadedModel> gpu = Load(dir, std::move(gpu_backend).value(), 4);
  std::unique_ptr<LoadedModel> cpu = LoadCpu(dir, 4);
  ASSERT_TRUE(gpu && cpu);
  const int32_t vocab = static_cast<int32_t>(cpu->model->config().vocab_size);
  const std::vector<std::vector<int32_t>> prompts = {
      TokensBelow(vocab, 301, 1), TokensBelow(vocab, 7, 2), TokensBelow(vocab, 2, 3)};
  std::vector<ScheduledSequence> prefill;
  for (int i = 0; i < 3; ++i) {
    prefill.push_back(RunOf(i, i + 1, prompts[i], 0, static_cast<int32_t>(prompts[i].size()) - 1));
  }
  const size_t width = static_cast<size_t>(cpu->model->config().padded_vocab_size());
  auto gpu_first = gpu->runner->ExecuteAllLogits(PlanOf(prefill, 1));
  auto cpu_first = cpu->runner->ExecuteAllLogits(PlanOf(prefill, 1));
  ASSERT_TRUE(gpu_first.ok()) << gpu_first.status();
  ASSERT_TRUE(cpu_first.ok()) << cpu_first.status();
  EXPECT_LT(WorstRowError(*gpu_first, *cpu_first, width), tolerance) << "prefill";
  std::vector<ScheduledSequence> decodes;
  for (int i = 0; i < 3; ++i) {
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    decodes.push_back(RunOf(i, i + 1, prompts[i], n - 1, 1));
  }
  auto gpu_second = gpu->runner->ExecuteAllLogits(PlanOf(decodes, 2));
  auto cpu_second = cpu->runner->ExecuteAllLogits(PlanOf(decodes, 2));
  ASSERT_TRUE(gpu_second.ok()) << gpu_second.status();
  ASSERT_TRUE(cpu_second.ok()) << cpu_second.status();
  EXPECT_LT(WorstRowError(*gpu_second, *cpu_second, width), tolerance) << "decode";
}

TEST(Mamba2GpuTest, Bf16LogitsMatchTheCpuWithinBf16Tolerance) {
  ExpectGpuMatchesCpu(checkpoint::DType::kBF16, 2e-2);
}

TEST(Mamba2GpuTest, F32LogitsMatchTheCpuWithinATighterBound) {
  ExpectGpuMatchesCpu(checkpoint::DType::kF32, 1e-3);
}

// Greedy tokens: a 600-token prompt in one step, and in steps of 256, 256 and 88 (chunk
// multiples) on another slot, then 6 greedy decodes each; the tokens must agree.
TEST(Mamba2GpuTest, GreedyTokensOfAPromptSplitOverThreeStepsEqualOneStep) {
  COIL_GPU_OR_SKIP(gpu_backend);
  const std::string dir = Write130m("gpu_split", checkpoint::DType::kBF16);
  std::unique_ptr<LoadedModel> gpu = Load(dir, std::move(gpu_backend).value(), 4);
  ASSERT_TRUE(gpu);
  const std::vector<int32_t> prompt =
      TokensBelow(static_cast<int32_t>(gpu->model->config().vocab_size), 600, 9);
  uint64_t step = 0;
  auto generate = [&](int32_t slot, const std::vector<int32_t>& pieces) {
    std::vector<int32_t> tokens = prompt;
    std::vector<int32_t> out;
    int32_t begin = 0;
    for (int32_t count : pieces) {
      ScheduledSequence run = RunOf(slot, slot, tokens, begin, count);
      run.sample = begin + count == static_cast<int32_t>(tokens.size());
      const StepResult result = gpu->runner->Execute(PlanOf({run}, ++step));
      EXPECT_TRUE(result.ok) << result.error;
      begin += count;
      if (run.sample && result.ok) out.push_back(result.tokens.at(0).token_id);
    }
    for (int i = 0; i < 6 && !out.empty(); ++i) {
      tokens.push_back(out.back());
      const int32_t n = static_cast<int32_t>(tokens.size());
      const StepResult result =
          gpu->runner->Execute(PlanOf({RunOf(slot, slot, tokens, n - 1, 1)}, ++step));
      EXPECT_TRUE(result.ok) << result.error;
      if (!result.ok) break;
      out.push_back(result.tokens.at(0).token_id);
    }
    return out;
  };
  const std::vector<int32_t> whole = generate(0, {600});
  const std::vector<int32_t> split = generate(1, {256, 256, 88});
  EXPECT_EQ(whole.size(), 7u);
  EXPECT_EQ(split, whole);
}

// n sequences decode once through the bucket's graph; the same step op by op on the padded
// batch must give the same logits and states bit for bit, and op by op unpadded the same
// logits within bf16 tolerance. Rows outside the batch (and a prefilled sequence sitting
// the step out) keep their state.
void ExpectGraphDecodeMatchesEager(int n) {
  COIL_GPU_OR_SKIP(gpu_backend);
  constexpr int64_t kRows = 8;
  const std::string dir = Write130m("gpu_graph_" + std::to_string(n), checkpoint::DType::kBF16);
  std::unique_ptr<LoadedModel> gpu = Load(dir, std::move(gpu_backend).value(), kRows);
  ASSERT_TRUE(gpu);
  ASSERT_TRUE(gpu->runner->decode_graphs().enabled());
  const int32_t vocab = static_cast<int32_t>(gpu->model->config().vocab_size);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> prefill, decodes;
  for (int i = 0; i <= n; ++i) {  // sequence n is prefilled but does not decode
    prompts.push_back(TokensBelow(vocab, 20 + 9 * i, 100 + i));
    const int32_t length = static_cast<int32_t>(prompts[i].size());
    prefill.push_back(RunOf(i, i, prompts[i], 0, length - 1));
    if (i < n) decodes.push_back(RunOf(i, i, prompts[i], length - 1, 1));
  }
  const StepResult prefilled = gpu->runner->Execute(PlanOf(prefill, 1));
  ASSERT_TRUE(prefilled.ok) << prefilled.error;
  auto meta =
      BuildStepMetadata(PlanOf(decodes, 2), gpu->model->config().padded_vocab_size(), kRows);
  ASSERT_TRUE(meta.ok());
  auto& pool = const_cast<StatePool&>(gpu->runner->state_pool());
  auto before = testing_reference::SnapshotState(*gpu->backend, pool);
  ASSERT_TRUE(before.ok());

  std::vector<float> graph_logits, again, padded_logits, eager_logits;
  ASSERT_TRUE(gpu->runner->Forward(*meta, false, graph_logits).ok());
  EXPECT_EQ(gpu->runner->decode_graphs().captures(), 1);
  EXPECT_EQ(gpu->runner->decode_graphs().replays(), 1);
  // A decode layer is 4 launches (AddRmsNorm, in_proj, MixerDecode, out_proj); around them
  // the embedding, the final norm (writing lm_head's bf16 rows: no gather, no conversion)
  // and lm_head, and a few more at most.
  const int64_t layers = gpu->model->config().n_layer;
  EXPECT_GT(gpu->runner->decode_graphs().nodes(n), 4 * layers);
  EXPECT_LE(gpu->runner->decode_graphs().nodes(n), 4 * layers + 12);
  auto after_graph = testing_reference::SnapshotState(*gpu->backend, pool);
  ASSERT_TRUE(after_graph.ok());

  ASSERT_TRUE(testing_reference::RestoreState(*gpu->backend, pool, *before).ok());
  ASSERT_TRUE(gpu->runner->Forward(*meta, false, again).ok());
  EXPECT_EQ(gpu->runner->decode_graphs().captures(), 1) << "the second replay must not capture again";
  EXPECT_EQ(again, graph_logits) << "two replays of the same step differ";

  gpu->runner->decode_graphs().set_enabled(false);
  ASSERT_TRUE(testing_reference::RestoreState(*gpu->backend, pool, *before).ok());
  const StepMetadata padded = PadDecodeBatch(*meta, DecodeBucket(n), static_cast<int32_t>(kRows));
  ASSERT_TRUE(gpu->runner->Forward(padded, false, padded_logits).ok());
  auto after_padded = testing_reference::SnapshotState(*gpu->backend, pool);
  ASSERT_TRUE(after_padded.ok());
  ASSERT_GE(padded_logits.size(), graph_logits.size());
  padded_logits.resize(graph_logits.size());  // the real rows come first
  EXPECT_EQ(padded_logits, graph_logits) << "graph and eager decode of the same padded batch";
  // Not the scratch row: several padding entries write it at once, in any order.
  for (int64_t row = 0; row < kRows; ++row) {
    EXPECT_EQ(testing_reference::StateRow(pool, *after_graph, row),
              testing_reference::StateRow(pool, *after_padded, row))
        << "state row " << row;
  }
  for (int64_t row = n; row < kRows; ++row) {
    EXPECT_EQ(testing_reference::StateRow(pool, *after_graph, row),
              testing_reference::StateRow(pool, *before, row))
        << "state row " << row << " is not in the batch and must keep its state";
  }

  ASSERT_TRUE(testing_reference::RestoreState(*gpu->backend, pool, *before).ok());
  ASSERT_TRUE(gpu->runner->Forward(*meta, false, eager_logits).ok());
  ASSERT_EQ(eager_logits.size(), graph_logits.size());
  EXPECT_LT(WorstRowError(graph_logits, eager_logits,
                          static_cast<size_t>(gpu->model->layout().vocab.size())),
            2e-2);
}

// A decode step through the fused MixerDecode and through its three ops: the same logits
// and states, bit for bit, through the whole model (bf16, so the norm writes bf16 rows).
TEST(Mamba2GpuTest, FusedMixerDecodeEqualsItsThreeOps) {
  COIL_GPU_OR_SKIP(gpu_backend);
  constexpr int64_t kRows = 4;
  const std::string dir = Write130m("gpu_fused_mixer", checkpoint::DType::kBF16);
  std::unique_ptr<LoadedModel> gpu = Load(dir, std::move(gpu_backend).value(), kRows);
  ASSERT_TRUE(gpu);
  const int32_t vocab = static_cast<int32_t>(gpu->model->config().vocab_size);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ScheduledSequence> prefill, decodes;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(TokensBelow(vocab, 9 + 40 * i, 50 + i));
    const int32_t length = static_cast<int32_t>(prompts[i].size());
    prefill.push_back(RunOf(i, i, prompts[i], 0, length - 1));
    decodes.push_back(RunOf(i, i, prompts[i], length - 1, 1));
  }
  ASSERT_TRUE(gpu->runner->Execute(PlanOf(prefill, 1)).ok);
  auto& pool = const_cast<StatePool&>(gpu->runner->state_pool());
  auto before = testing_reference::SnapshotState(*gpu->backend, pool);
  ASSERT_TRUE(before.ok());
  std::vector<float> logits[2];
  std::vector<std::vector<float>> states[2];
  for (int fused = 0; fused < 2; ++fused) {
    ASSERT_TRUE(testing_reference::RestoreState(*gpu->backend, pool, *before).ok());
    gpu->model->set_fused_mixer(fused == 1);
    auto out = gpu->runner->ExecuteAllLogits(PlanOf(decodes, 2));
    ASSERT_TRUE(out.ok()) << out.status();
    logits[fused] = *out;
    auto after = testing_reference::SnapshotState(*gpu->backend, pool);
    ASSERT_TRUE(after.ok());
    for (int64_t row = 0; row < kRows; ++row) {
      states[fused].push_back(testing_reference::StateRow(pool, *after, row));
    }
  }
  EXPECT_EQ(logits[1], logits[0]);
  EXPECT_EQ(states[1], states[0]);
}

// Programmatic dependent launch changes when kernels start, never what they compute: three
// greedy decode steps through the graphs give the same logits with it and without.
TEST(Mamba2GpuTest, ProgrammaticDependentLaunchGivesTheSameLogits) {
  COIL_GPU_OR_SKIP(plain_backend);
  auto pdl_backend = MakeGpuBackend(/*pdl=*/true);
  if (absl::IsUnavailable(pdl_backend.status())) GTEST_SKIP() << pdl_backend.status();
  ASSERT_TRUE(pdl_backend.ok()) << pdl_backend.status();
  const std::string dir = Write130m("gpu_pdl", checkpoint::DType::kBF16);
  std::unique_ptr<LoadedModel> models[2] = {Load(dir, std::move(plain_backend).value(), 4),
                                            Load(dir, std::move(pdl_backend).value(), 4)};
  ASSERT_TRUE(models[0] && models[1]);
  const int32_t vocab = static_cast<int32_t>(models[0]->model->config().vocab_size);
  std::vector<float> logits[2];
  for (int m = 0; m < 2; ++m) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<ScheduledSequence> prefill;
    for (int i = 0; i < 3; ++i) {
      prompts.push_back(TokensBelow(vocab, 12 + 30 * i, 60 + i));
      prefill.push_back(RunOf(i, i, prompts[i], 0, static_cast<int32_t>(prompts[i].size()) - 1));
    }
    ASSERT_TRUE(models[m]->runner->Execute(PlanOf(prefill, 1)).ok);
    for (int step = 0; step < 3; ++step) {
      std::vector<ScheduledSequence> decodes;
      for (int i = 0; i < 3; ++i) {
        const int32_t n = static_cast<int32_t>(prompts[i].size());
        decodes.push_back(RunOf(i, i, prompts[i], n - 1, 1));
      }
      auto meta = BuildStepMetadata(PlanOf(decodes, 2 + step),
                                    models[m]->model->config().padded_vocab_size(), 4);
      ASSERT_TRUE(meta.ok());
      std::vector<float> step_logits;
      ASSERT_TRUE(models[m]->runner->Forward(*meta, false, step_logits).ok());
      const size_t width = step_logits.size() / 3;
      for (int i = 0; i < 3; ++i) {  // the greedy token, appended to each prompt
        const auto row = step_logits.begin() + i * width;
        prompts[i].push_back(
            static_cast<int32_t>(std::max_element(row, row + std::min<size_t>(width, vocab)) - row));
      }
      logits[m].insert(logits[m].end(), step_logits.begin(), step_logits.end());
    }
    EXPECT_GT(models[m]->runner->decode_graphs().replays(), 0);
  }
  EXPECT_EQ(logits[1], logits[0]);
}

// TP2 with both shards on one GPU: two thread ranks, each with its own backend on GPU 0,
// their collectives staged through host memory (NCCL refuses two ranks on one GPU). They
// give the TP1 model's tokens of every kind (greedy, plain temperature through the device
// Gumbel-max merged across ranks, top_p through the host sampler) and its logits within
// 1e-5 relative (f32 weights): with the single group split across the ranks (the decode
// mixer up to the sums, MixerDecodeSumSquares, and the cross-rank gated norm) and with a
// group on each (the whole fused MixerDecode on each rank).
TEST(Mamba2GpuTest, TwoShardsOnOneGpuGiveTheTp1TokensAndLogits) {
  {
    COIL_GPU_OR_SKIP(probe);
  }
  for (const int ngroups : {1, 2}) {
    SCOPED_TRACE(absl::StrCat(ngroups, " group(s)"));
    const auto dir = testing_reference::WriteShape(absl::StrCat("gpu_tp2_g", ngroups), "tiny",
                                                   checkpoint::DType::kF32,
                                                   {{"ngroups", absl::StrCat(ngroups)}});
    ASSERT_TRUE(dir.ok()) << dir.status();
    const auto gpu = [](int) { return MakeGpuBackend(); };
    const std::vector<int32_t> prompt = TokensBelow(250, 23, 5);
    const auto tp1 = testing_reference::RunOnThreadRanks(*dir, 1, gpu, prompt, 24);
    const auto tp2 = testing_reference::RunOnThreadRanks(*dir, 2, gpu, prompt, 24);
    testing_reference::ExpectShardsMatchTp1(
        tp1, tp2, tp1[0].prompt_logits.size() / prompt.size(), 1e-5);
  }
}

// At TP2 with the single group split across the ranks, the decode mixer fused
// (MixerDecodeSumSquares, launched with programmatic dependent launch after the zeroing of
// the sums) and unfused (CausalConv1d, SsmScan, GatedSumSquares): the same logits and
// tokens, bit for bit, on both ranks.
TEST(Mamba2GpuTest, TwoShardsOnOneGpuFusedMixerEqualsItsOps) {
  { COIL_GPU_OR_SKIP(probe); }
  const auto dir = testing_reference::WriteShape("gpu_tp2_fused", "tiny", checkpoint::DType::kBF16,
                                                 {{"ngroups", "1"}});
  ASSERT_TRUE(dir.ok()) << dir.status();
  const auto gpu = [](int) {  // with programmatic dependent launch where the GPU has it
    auto backend = MakeGpuBackend(/*pdl=*/true);
    return absl::IsUnavailable(backend.status()) ? MakeGpuBackend() : std::move(backend);
  };
  const std::vector<int32_t> prompt = TokensBelow(250, 19, 8);
  model::LoadOptions unfused;
  unfused.fused_mixer = false;
  const auto fused_run = testing_reference::RunOnThreadRanks(*dir, 2, gpu, prompt, 8);
  const auto ops_run = testing_reference::RunOnThreadRanks(*dir, 2, gpu, prompt, 8, unfused);
  for (size_t rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    ASSERT_FALSE(fused_run[rank].decode_logits.empty());
    EXPECT_EQ(fused_run[rank].decode_logits, ops_run[rank].decode_logits);
    EXPECT_EQ(fused_run[rank].greedy, ops_run[rank].greedy);
    EXPECT_EQ(fused_run[rank].plain, ops_run[rank].plain);
  }
}

TEST(Mamba2GpuTest, GraphDecodeOfOneSequenceEqualsEagerDecode) { ExpectGraphDecodeMatchesEager(1); }
TEST(Mamba2GpuTest, GraphDecodeOfThreeSequencesEqualsEagerDecode) {
  ExpectGraphDecodeMatchesEager(3);
}
TEST(Mamba2GpuTest, GraphDecodeOfFiveSequencesEqualsEagerDecode) {
  ExpectGraphDecodeMatchesEager(5);
}

// The hybrid's decode graph (nemotron-tiny, bf16: every block kind, head_dim 16, GQA 2):
// three sequences decode 80 steps through one bucket's graph, their contexts growing from
// 5, 200 and 250 positions across tile (64), page (16) and split (256) boundaries, with one
// capture; each replay's logits equal bit for bit those of the same padded step run op by
// op at the same capacity on a second model fed the same tokens, and its KV pages too.
TEST(HybridGpuTest, OneDecodeGraphServesGrowingContexts) {
  COIL_GPU_OR_SKIP(graph_backend);
  COIL_GPU_OR_SKIP(eager_backend);
  constexpr int64_t kRows = 4;
  const TestPages pages{16, 24};  // 384 positions per state row
  auto dir = testing_reference::WriteShape("gpu_hybrid_graph", "nemotron-tiny",
                                           checkpoint::DType::kBF16, {});
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::vector<std::unique_ptr<LoadedModel>> models;
  for (auto* backend : {&graph_backend, &eager_backend}) {
    auto loaded = testing_reference::LoadOn(*dir, std::move(*backend).value(), kRows,
                                            model::WeightType::kAuto, pages.Options(kRows));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    models.push_back(std::move(loaded).value());
  }
  LoadedModel& graph = *models[0];
  LoadedModel& eager = *models[1];
  ASSERT_TRUE(graph.runner->decode_graphs().enabled());
  const int32_t capacity = graph.runner->decode_graphs().max_context();
  ASSERT_EQ(capacity, 16 * 24 * kRows);  // the whole cache: no max_context given
  eager.runner->decode_graphs().set_enabled(false);
  const int32_t vocab = static_cast<int32_t>(graph.model->config().vocab_size);
  const int64_t width = graph.model->layout().vocab.size();
  std::vector<std::vector<int32_t>> tokens;
  std::vector<ScheduledSequence> prefill;
  for (int i = 0; i < 3; ++i) {
    tokens.push_back(TokensBelow(vocab, std::vector<int>{6, 201, 251}[i], 300 + i));
    prefill.push_back(RunOf(i, i, tokens[i], 0, static_cast<int32_t>(tokens[i].size()) - 1));
  }
  for (auto& m : models) {
    const StepResult result = m->runner->Execute(WithPages(PlanOf(prefill, 1), pages));
    ASSERT_TRUE(result.ok) << result.error;
  }
  const KvCache& cache = *graph.runner->kv_cache();
  for (int step = 0; step < 80; ++step) {
    SCOPED_TRACE(::testing::Message() << "decode step " << step);
    std::vector<ScheduledSequence> decodes;
    for (int i = 0; i < 3; ++i) {
      const int32_t n = static_cast<int32_t>(tokens[i].size());
      decodes.push_back(RunOf(i, i, tokens[i], n - 1, 1));
    }
    auto meta = BuildStepMetadata(WithPages(PlanOf(decodes, 2 + step), pages),
                                  graph.model->config().padded_vocab_size(), kRows,
                                  KvPages{16, cache.pages()});
    ASSERT_TRUE(meta.ok()) << meta.status();
    ASSERT_TRUE(graph.runner->decode_graphs().Takes(*meta));
    std::vector<float> replayed, op_by_op;
    ASSERT_TRUE(graph.runner->Forward(*meta, false, replayed).ok());
    StepMetadata padded = PadDecodeBatch(*meta, 4, static_cast<int32_t>(kRows),
                                         static_cast<int32_t>(cache.scratch_page()));
    padded.kv.max_context = capacity;
    ASSERT_TRUE(eager.runner->Forward(padded, false, op_by_op).ok());
    op_by_op.resize(replayed.size());  // the real rows come first
    ASSERT_EQ(replayed, op_by_op);
    for (int i = 0; i < 3; ++i) {  // the next tokens: each row's greedy choice
      const float* row = replayed.data() + i * width;
      tokens[i].push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
  }
  EXPECT_EQ(graph.runner->decode_graphs().captures(), 1) << "a longer context must not recapture";
  EXPECT_EQ(graph.runner->decode_graphs().replays(), 80);
  auto graph_pages = testing_reference::SnapshotPages(*graph.backend, cache);
  auto eager_pages = testing_reference::SnapshotPages(*eager.backend, *eager.runner->kv_cache());
  ASSERT_TRUE(graph_pages.ok() && eager_pages.ok());
  EXPECT_TRUE(*graph_pages == *eager_pages) << "the replays' KV writes differ from op by op";
}

}  // namespace
}  // namespace coil
