// coil-make-model, run as a program. An f32 model must read back exactly (bit for bit the
// values RandomModelTensors draws), the output must be deterministic, and the values must
// have the scales the generator promises (checked as invariants: D = 1, norms = 1,
// A_log in [0, log 16], softplus(dt_bias) in [1e-3, 1e-1], matrices with std near 0.02).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workers/checkpoint/test_util.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/model/model_files.h"
#include "workers/model/model_writer.h"

namespace coil::model {
namespace {

using checkpoint::Checkpoint;
using checkpoint::DType;
using checkpoint::FileFormat;
using checkpoint::KeyLayout;
using checkpoint::StoredTensor;
using checkpoint::TensorInfo;
namespace testing = checkpoint::testing;

// A model directory's tensors, opened and checked against its config (OpenModelFiles).
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& dir) {
  absl::StatusOr<ModelFiles> files = OpenModelFiles(dir);
  if (!files.ok()) return files.status();
  return std::move(files->checkpoint);
}

using testing::ScratchDir;

int MakeModel(const std::string& args) {
  std::string command = std::string(COIL_MAKE_MODEL) + " " + args + " 2>/dev/null";
  return std::system(command.c_str());
}

// By value: a range-for over `*checkpoint.ReadF32(...)` would outlive the StatusOr.
std::vector<float> F32(const Checkpoint& checkpoint, const std::string& name) {
  absl::StatusOr<std::vector<float>> values = checkpoint.ReadF32(name);
  EXPECT_TRUE(values.ok()) << values.status();
  return values.ok() ? *values : std::vector<float>();
}

TEST(MakeModelTest, F32ModelReadsBackExactly) {
  ScratchDir scratch;
  for (const char* layout : {"mamba_ssm", "hf"}) {
    std::string dir = scratch.Sub(layout);
    ASSERT_EQ(MakeModel(absl::StrCat("--shape tiny --dtype f32 --seed 11 --layout ", layout,
                                     " --out ", dir)),
              0);
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    ModelConfig config = *NamedModelShape("tiny");
    for (const TensorData& tensor : RandomModelTensors(config, DType::kF32, DType::kF32, 11)) {
      std::vector<float> values = F32(**checkpoint, tensor.name);
      ASSERT_EQ(values.size() * 4, tensor.bytes.size());
      EXPECT_EQ(std::memcmp(values.data(), tensor.bytes.data(), tensor.bytes.size()), 0)
          << tensor.name;
    }
  }
}

TEST(MakeModelTest, ValuesHaveRealisticScales) {
  ScratchDir scratch;
  ASSERT_EQ(MakeModel("--shape tiny --out " + scratch.Sub("m")), 0);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(scratch.Sub("m"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& c = **checkpoint;
  for (float d : F32(c, "layers.0.mixer.D")) EXPECT_EQ(d, 1.0f);
  for (float w : F32(c, "layers.1.mixer.norm.weight")) EXPECT_EQ(w, 1.0f);
  for (float w : F32(c, "norm_f.weight")) EXPECT_EQ(w, 1.0f);
  for (float a : F32(c, "layers.0.mixer.A_log")) {
    EXPECT_GE(a, 0.0f);
    EXPECT_LE(a, std::log(16.0f));
  }
  for (float b : F32(c, "layers.1.mixer.dt_bias")) {
    double dt = std::log1p(std::exp(static_cast<double>(b)));  // softplus
    EXPECT_GE(dt, 1e-3 * 0.999);
    EXPECT_LE(dt, 1e-1 * 1.001);
  }
  std::vector<float> w = F32(c, "layers.0.mixer.in_proj.weight");
  double sum = 0, squares = 0;
  for (float v : w) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  double mean = sum / w.size();
  double std = std::sqrt(squares / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);  // 74752 samples: the mean's std is 7e-5
  EXPECT_NEAR(std, 0.02, 0.001);
}

TEST(MakeModelTest, DeterministicAndSeeded) {
  ScratchDir scratch;
  ASSERT_EQ(MakeModel("--shape tiny --dtype bf16 --seed 3 --out " + scratch.Sub("a")), 0);
  ASSERT_EQ(MakeModel("--shape tiny --dtype bf16 --seed 3 --out " + scratch.Sub("b")), 0);
  ASSERT_EQ(MakeModel("--shape tiny --dtype bf16 --seed 4 --out " + scratch.Sub("c")), 0);
  std::string a = testing::ReadFileBytes(scratch.Sub("a/pytorch_model.bin"));
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, testing::ReadFileBytes(scratch.Sub("b/pytorch_model.bin")));
  EXPECT_NE(a, testing::ReadFileBytes(scratch.Sub("c/pytorch_model.bin")));
}

TEST(MakeModelTest, SetOverridesConfigFields) {
  ScratchDir scratch;
  std::string dir = scratch.Sub("m");
  ASSERT_EQ(MakeModel("--shape tiny --layout hf --dtype f16 --vector_dtype f32 --shards 2 "
                      "--set ngroups=4 --set tie_embeddings=false,d_state=32 --out " +
                      dir),
            0);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const ModelConfig config = OpenModelFiles(dir)->config;
  EXPECT_EQ(config.ngroups, 4);
  EXPECT_EQ(config.d_state, 32);
  EXPECT_FALSE(config.tie_embeddings);
  EXPECT_TRUE((*checkpoint)->Has("lm_head.weight"));
  EXPECT_EQ((*checkpoint)->Info("layers.0.mixer.D")->dtype, DType::kF32);
  EXPECT_EQ((*checkpoint)->Info("layers.0.mixer.in_proj.weight")->dtype, DType::kF16);
  // in_proj rows: 2 * 128 + 2 * 4 * 32 + 8 = 520.
  EXPECT_EQ((*checkpoint)->Info("layers.0.mixer.in_proj.weight")->shape,
            std::vector<int64_t>({520, 64}));
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
}

TEST(MakeModelTest, BadFlagsFail) {
  ScratchDir scratch;
  EXPECT_NE(MakeModel("--shape huge --out " + scratch.Sub("x")), 0);
  EXPECT_NE(MakeModel("--shape tiny --set nonsense=1 --out " + scratch.Sub("x")), 0);
  EXPECT_NE(MakeModel("--shape tiny --set ngroups=3 --out " + scratch.Sub("x")), 0);  // 8 heads
  EXPECT_NE(MakeModel("--shape tiny --dtype f64 --out " + scratch.Sub("x")), 0);
  EXPECT_NE(MakeModel("--shape tiny"), 0);  // no --out
}

TEST(MakeModelTest, CopiesTheShippedTokenizer) {
  ScratchDir scratch;
  // A vocabulary as large as the tokenizer's (50,277 ids, added tokens included).
  ASSERT_EQ(MakeModel("--shape tiny --set vocab_size=50277 --out " + scratch.Sub("m")), 0);
  // The build tree's share/coil/ holds a copy of the source tree's file; the model gets it.
  const std::string source = std::string(COIL_CHECKPOINT_TESTDATA) +
                             "/../../../../../engine/tokenizer/gpt-neox-20b/tokenizer.json";
  ASSERT_TRUE(std::filesystem::exists(source)) << source;
  EXPECT_EQ(testing::ReadFileBytes(scratch.Sub("m/tokenizer.json")), testing::ReadFileBytes(source));
}

// The tiny shape's 250 ids get the tokenizer cut to them: GPT-NeoX's ids 0..249 are its two
// special tokens, the 243 byte tokens that UTF-8 text can hold and the first five merges
// (counted from the shipped file by hand), and nothing at or above 250 is left.
TEST(MakeModelTest, CutsTheTokenizerToASmallerVocabulary) {
  ScratchDir scratch;
  ASSERT_EQ(MakeModel("--shape tiny --out " + scratch.Sub("m")), 0);
  const std::string text = testing::ReadFileBytes(scratch.Sub("m/tokenizer.json"));
  const nlohmann::json tokenizer = nlohmann::json::parse(text);
  const nlohmann::json& vocab = tokenizer["model"]["vocab"];
  EXPECT_EQ(vocab.size(), 250u);
  for (const auto& [piece, id] : vocab.items()) EXPECT_LT(id.get<int>(), 250) << piece;
  EXPECT_EQ(tokenizer["model"]["merges"].size(), 5u);
  ASSERT_EQ(tokenizer["added_tokens"].size(), 2u);
  EXPECT_EQ(tokenizer["added_tokens"][0]["content"], "<|endoftext|>");
}

}  // namespace
}  // namespace coil::model
