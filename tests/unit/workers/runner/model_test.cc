// The whole Mamba2 model on the CPU backend, one rank. Values are checked against the
// float64 reference in reference_model.h (written from the equations, no shared code) and
// against invariants: a prompt split over steps equals the prompt in one step, bit for bit;
// a sequence's logits do not depend on what shares its step (both with an f32 and with a
// bf16 SSM state); the four layout/format combinations of the same weights give the same
// logits; a bf16 state pool holds half the SSM state's bytes.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/workers/runner/reference_model.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "tests/unit/workers/runner/test_models.h"
#include "workers/comm/single_rank_communicator.h"
#include "workers/model/model_files.h"
#include "workers/model/model.h"
#include "workers/model/model_config.h"
#include "workers/model/model_writer.h"
#include "workers/model_runner.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using model::ConfigFormat;
using checkpoint::DType;

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       absl::StrCat("coil_model_test_", ::getpid(), "_", name);
  fs::create_directories(dir);
  return dir.string();
}

// Writes the tiny shape (8 heads, 2 groups, chunk 8) with `sets` applied.
std::string WriteTiny(const std::string& name, DType matrix_dtype,
                      const std::vector<std::pair<std::string, std::string>>& sets = {},
                      checkpoint::KeyLayout layout = checkpoint::KeyLayout::kMambaSsm,
                      checkpoint::FileFormat format = checkpoint::FileFormat::kSafetensors) {
  auto config = model::NamedModelShape("tiny");
  EXPECT_TRUE(config.ok());
  for (const auto& [key, value] : sets) EXPECT_TRUE(model::SetModelConfigField(*config, key, value).ok());
  const std::string dir = TempDir(name);
  model::WriteOptions options;
  options.layout = layout;
  options.format = format;
  std::vector<model::TensorData> tensors =
      model::RandomModelTensors(*config, matrix_dtype, DType::kF32, 7);
  testing_reference::Amplify(tensors);
  EXPECT_TRUE(model::WriteModelDirectory(*config, tensors, options, dir).ok());
  return dir;
}

using Loaded = testing_reference::LoadedModel;

std::unique_ptr<Loaded> Load(const std::string& dir, bool reference, int64_t state_rows = 4,
                             model::WeightType weights = model::WeightType::kAuto,
                             ::coil::DType state_dtype = ::coil::DType::kF32) {
  auto loaded = std::make_unique<Loaded>();
  auto files = model::OpenModelFiles(dir);
  EXPECT_TRUE(files.ok()) << files.status();
  loaded->files = std::move(files).value();
  BackendOptions options;
  options.threads = 2;
  options.use_reference = reference;
  loaded->backend = std::move(CreateBackend(BackendKind::kCpu, options)).value();
  model::LoadOptions load;
  load.weight_type = weights;
  auto m = model::Model::Load(loaded->files, *loaded->backend, loaded->comm, load);
  EXPECT_TRUE(m.ok()) << m.status();
  loaded->model = std::move(m).value();
  RunnerOptions run;
  run.state_dtype = state_dtype;
  loaded->runner = std::move(ModelRunner::Create(*loaded->model, *loaded->backend, loaded->comm,
                                                 state_rows, run))
                       .value();
  return loaded;
}

ScheduledSequence Seq(uint64_t id, int32_t slot, const std::vector<int32_t>& tokens, int32_t begin,
                      int32_t count) {
  ScheduledSequence s;
  s.request_id = id;
  s.state_slot = slot;
  s.fresh = begin == 0;
  s.token_ids.assign(tokens.begin() + begin, tokens.begin() + begin + count);
  s.start_position = begin;
  s.sample = true;
  return s;
}

StepPlan Plan(std::vector<ScheduledSequence> seqs) {
  static uint64_t step = 0;
  StepPlan plan;
  plan.step_id = ++step;
  for (const auto& s : seqs) {
    if (!s.fresh && s.token_ids.size() == 1) ++plan.num_decodes;
  }
  // decodes first
  std::stable_partition(seqs.begin(), seqs.end(),
                        [](const ScheduledSequence& s) { return !s.fresh && s.token_ids.size() == 1; });
  plan.sequences = std::move(seqs);
  return plan;
}

std::vector<int32_t> RandomTokens(int n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return tokens;
}

// max |a - b| / max |b| over a row.
double RowRelativeError(const float* a, const std::vector<double>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

void ExpectMatchesReference(const std::string& dir, bool reference_mode, double tolerance,
                            int prompt_length) {
  auto loaded = Load(dir, reference_mode);
  const auto& config = loaded->model->config();
  const std::vector<int32_t> tokens = RandomTokens(prompt_length, static_cast<int32_t>(config.vocab_size), 11);
  auto logits = loaded->runner->ExecuteAllLogits(Plan({Seq(1, 0, tokens, 0, prompt_length)}));
  ASSERT_TRUE(logits.ok()) << logits.status();
  testing_reference::ReferenceModel reference(loaded->files);
  const int64_t vocab = config.padded_vocab_size();
  double worst = 0.0;
  for (int t = 0; t < prompt_length; ++t) {
    const std::vector<double> expected = reference.Step(tokens[t]);
    worst = std::max(worst, RowRelativeError(&(*logits)[t * vocab], expected));
  }
  EXPECT_LT(worst, tolerance) << "worst row relative error " << worst;
}

TEST(Mamba2ModelTest, F32LogitsMatchFloat64ReferenceInBothScanModes) {
  const std::string dir = WriteTiny("f32", DType::kF32);
  ExpectMatchesReference(dir, /*reference_mode=*/true, 1e-5, 21);   // 21: not a chunk multiple
  ExpectMatchesReference(dir, /*reference_mode=*/false, 1e-5, 21);
}

TEST(Mamba2ModelTest, OneGroupUntiedAndTimeStepLimit) {
  const std::string dir = WriteTiny("g1", DType::kF32, {{"ngroups", "1"}, {"tie_embeddings", "false"}});
  ExpectMatchesReference(dir, false, 1e-5, 19);
}

TEST(Mamba2ModelTest, Bf16LogitsWithinBf16Tolerance) {
  // The reference reads the stored bf16 values as f32; coil may also round activations
  // entering a bf16 matmul to bf16, hence the looser bound.
  const std::string dir = WriteTiny("bf16", DType::kBF16);
  ExpectMatchesReference(dir, false, 2e-2, 16);
}

// Logits rows [begin, begin + count) of a prompt fed in pieces, compared bit for bit with
// the prompt in one step.
void ExpectSplitEqualsWhole(bool reference_mode, const std::vector<int32_t>& pieces,
                            ::coil::DType state_dtype = ::coil::DType::kF32) {
  const std::string dir = WriteTiny(reference_mode ? "split_ref" : "split_chunk", DType::kF32);
  auto loaded = Load(dir, reference_mode, 4, model::WeightType::kAuto, state_dtype);
  const int64_t vocab = loaded->model->config().padded_vocab_size();
  int32_t total = 0;
  for (int32_t p : pieces) total += p;
  const std::vector<int32_t> tokens = RandomTokens(total, 250, 5);
  auto whole = loaded->runner->ExecuteAllLogits(Plan({Seq(1, 0, tokens, 0, total)}));
  ASSERT_TRUE(whole.ok());
  int32_t begin = 0;
  for (int32_t count : pieces) {
    // Slot 1 for the split run; slot 0 still holds the whole run's state (never read).
    auto part = loaded->runner->ExecuteAllLogits(Plan({Seq(2, 1, tokens, begin, count)}));
    ASSERT_TRUE(part.ok()) << part.status();
    for (int64_t i = 0; i < count * vocab; ++i) {
      ASSERT_EQ((*part)[i], (*whole)[begin * vocab + i]) << "piece at " << begin << ", element " << i;
    }
    begin += count;
  }
}

TEST(Mamba2ModelTest, SplitEqualsWholeBitForBitInReferenceMode) {
  ExpectSplitEqualsWhole(true, {1, 5, 31});  // a step shorter than the conv history included
}

TEST(Mamba2ModelTest, SplitAtChunkMultiplesEqualsWholeInChunkedMode) {
  ExpectSplitEqualsWhole(false, {8, 8, 21});
}

TEST(Mamba2ModelTest, SplitAtChunkMultiplesEqualsWholeWithABf16State) {
  ExpectSplitEqualsWhole(false, {8, 8, 21}, ::coil::DType::kBF16);
  ExpectSplitEqualsWhole(true, {8, 16, 13}, ::coil::DType::kBF16);
}

TEST(Mamba2ModelTest, ABf16StatePoolHoldsHalfTheSsmStateBytes) {
  // Per sequence: every layer's conv state (3 x 192 f32) and SSM state (8 heads x 16 x 16,
  // f32 or bf16), worked out from the tiny shape.
  const std::string dir = WriteTiny("pool", DType::kF32);
  auto f32 = Load(dir, false, 4);
  auto bf16 = Load(dir, false, 4, model::WeightType::kAuto, ::coil::DType::kBF16);
  const int64_t conv = 2 * 3 * 192 * 4, ssm = 2 * 8 * 16 * 16;
  EXPECT_EQ(f32->runner->state_pool().shape().bytes_per_sequence(), conv + 4 * ssm);
  EXPECT_EQ(bf16->runner->state_pool().shape().bytes_per_sequence(), conv + 2 * ssm);
  EXPECT_EQ(bf16->runner->state_pool().SsmState(1).dtype(), ::coil::DType::kBF16);
  EXPECT_EQ(bf16->runner->state_pool().bytes(), 5 * (conv + 2 * ssm));
}

// A sequence's logits alone and inside batches of 2, 7 and 32 others, decodes and
// prefills mixed, are bit-identical, with an f32 and with a bf16 SSM state.
class StateDtypeTest : public ::testing::TestWithParam<::coil::DType> {};
INSTANTIATE_TEST_SUITE_P(States, StateDtypeTest,
                         ::testing::Values(::coil::DType::kF32, ::coil::DType::kBF16),
                         [](const ::testing::TestParamInfo<::coil::DType>& info) {
                           return info.param == ::coil::DType::kBF16 ? "bf16" : "f32";
                         });

TEST_P(StateDtypeTest, LogitsDoNotDependOnTheBatch) {
  const std::string dir = WriteTiny("batch", DType::kBF16);
  std::vector<float> alone_first, alone_second;
  for (int others : {0, 2, 7, 32}) {
    auto loaded = Load(dir, false, /*state_rows=*/40, model::WeightType::kAuto, GetParam());
    const std::vector<int32_t> target = RandomTokens(14, 250, 99);
    // Step 1: the others prefill (half of them) next to the target's first 13 tokens.
    std::vector<ScheduledSequence> step1 = {Seq(1000, 39, target, 0, 13)};
    std::vector<std::vector<int32_t>> prompts;
    for (int o = 0; o < others; ++o) {
      prompts.push_back(RandomTokens(3 + o % 11, 250, 1000 + o));
      if (o % 2 == 0) step1.push_back(Seq(o, o, prompts.back(), 0, static_cast<int32_t>(prompts.back().size()) - 1));
    }
    auto first = loaded->runner->ExecuteAllLogits(Plan(step1));
    ASSERT_TRUE(first.ok()) << first.status();
    // Step 2: the target decodes; even others decode, odd others prefill whole.
    std::vector<ScheduledSequence> step2 = {Seq(1000, 39, target, 13, 1)};
    for (int o = 0; o < others; ++o) {
      const int32_t n = static_cast<int32_t>(prompts[o].size());
      step2.push_back(o % 2 == 0 ? Seq(o, o, prompts[o], n - 1, 1) : Seq(o, o, prompts[o], 0, n));
    }
    auto second = loaded->runner->ExecuteAllLogits(Plan(step2));
    ASSERT_TRUE(second.ok()) << second.status();
    const size_t vocab = static_cast<size_t>(loaded->model->config().padded_vocab_size());
    // The target is the first row block of step 1 and (as a decode) row 0 of step 2.
    std::vector<float> target_first(first->begin(), first->begin() + 13 * vocab);
    std::vector<float> target_second(second->begin(), second->begin() + vocab);
    if (others == 0) {
      alone_first = target_first;
      alone_second = target_second;
      continue;
    }
    EXPECT_EQ(target_first, alone_first) << others << " others, prefill";
    EXPECT_EQ(target_second, alone_second) << others << " others, decode";
  }
}

TEST(Mamba2ModelTest, FourLayoutsAndFormatsGiveIdenticalLogits) {
  std::vector<float> first;
  int index = 0;
  for (auto layout : {checkpoint::KeyLayout::kMambaSsm, checkpoint::KeyLayout::kHuggingFace}) {
    for (auto format : {checkpoint::FileFormat::kSafetensors, checkpoint::FileFormat::kPytorch}) {
      const std::string dir = WriteTiny("layout" + std::to_string(index++), DType::kF16, {}, layout, format);
      auto loaded = Load(dir, false);
      auto logits = loaded->runner->ExecuteAllLogits(Plan({Seq(1, 0, RandomTokens(10, 250, 3), 0, 10)}));
      ASSERT_TRUE(logits.ok()) << logits.status();
      if (first.empty()) {
        first = *logits;
      } else {
        EXPECT_EQ(*logits, first) << checkpoint::KeyLayoutName(layout) << " " << checkpoint::FileFormatName(format);
      }
    }
  }
}

TEST(Mamba2ModelTest, GreedyTokenIsTheArgmaxOfTheLastRow) {
  const std::string dir = WriteTiny("greedy", DType::kF32);
  auto loaded = Load(dir, false);
  const std::vector<int32_t> tokens = RandomTokens(9, 250, 8);
  auto logits = loaded->runner->ExecuteAllLogits(Plan({Seq(1, 0, tokens, 0, 9)}));
  ASSERT_TRUE(logits.ok());
  const int64_t vocab = loaded->model->config().padded_vocab_size();
  const float* last = &(*logits)[8 * vocab];
  int32_t best = 0;
  for (int32_t i = 1; i < 250; ++i) {  // the real vocabulary only
    if (last[i] > last[best]) best = i;
  }
  const StepResult result = loaded->runner->Execute(Plan({Seq(2, 1, tokens, 0, 9)}));
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.tokens.size(), 1u);
  EXPECT_EQ(result.tokens[0].token_id, best);
}

TEST(Mamba2ModelTest, BadPlansFailTheStepWithoutTouchingOthers) {
  const std::string dir = WriteTiny("bad", DType::kF32);
  auto loaded = Load(dir, false, /*state_rows=*/2);
  const std::vector<int32_t> tokens = RandomTokens(5, 250, 1);
  StepResult result = loaded->runner->Execute(Plan({Seq(1, 7, tokens, 0, 5)}));  // slot 7 of 2
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("slot"), std::string::npos) << result.error;
  std::vector<int32_t> bad_token = {1, 2, 99999};
  result = loaded->runner->Execute(Plan({Seq(1, 0, bad_token, 0, 3)}));
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("99999"), std::string::npos) << result.error;
  result = loaded->runner->Execute(Plan({Seq(1, 0, tokens, 0, 5)}));
  EXPECT_TRUE(result.ok) << result.error;
}

}  // namespace
}  // namespace coil
