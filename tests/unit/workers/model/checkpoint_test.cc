// Opening model directories: the four layout/format combinations, sharding, mixed dtypes,
// tied and untied heads, vocab padding and every rejection ValidateCheckpoint makes. The
// expected bytes are the ones handed to the writer, so a reader that changes any bit, or
// maps a key to the wrong canonical name, fails.
#include "workers/model/model_files.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workers/checkpoint/test_util.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/model/model_writer.h"
#include "workers/checkpoint/safetensors.h"

namespace coil::model {
namespace {

using checkpoint::Checkpoint;
using checkpoint::DType;
using checkpoint::F16ToF32;
using checkpoint::F32ToBF16;
using checkpoint::FileFormat;
using checkpoint::KeyLayout;
using checkpoint::ParseSafetensors;
using checkpoint::SerializeSafetensors;
using checkpoint::StoredTensor;
using checkpoint::TensorInfo;
namespace testing = checkpoint::testing;

// A model directory's tensors, opened and checked against its config (OpenModelFiles).
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& dir) {
  absl::StatusOr<ModelFiles> files = OpenModelFiles(dir);
  if (!files.ok()) return files.status();
  return std::move(files->checkpoint);
}

using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::Text;

ModelConfig Tiny() { return *NamedModelShape("tiny"); }

std::string Write(const ScratchDir& scratch, const std::string& name, ModelConfig config,
                  const std::vector<TensorData>& tensors, KeyLayout layout, FileFormat format,
                  int shards = 1) {
  std::string dir = scratch.Sub(name);
  if (layout == KeyLayout::kHuggingFace) {
    config.vocab_size = config.padded_vocab_size();
    config.pad_vocab_size_multiple = 1;
  }
  absl::Status status = WriteModelDirectory(config, tensors, {layout, format, shards}, dir);
  EXPECT_TRUE(status.ok()) << status;
  return dir;
}

std::string OpenError(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  EXPECT_FALSE(checkpoint.ok()) << dir;
  return checkpoint.ok() ? "" : std::string(checkpoint.status().message());
}

TEST(CheckpointTest, FourLayoutFormatCombinationsLoadIdenticalTensors) {
  ScratchDir scratch;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<TensorData> tensors = RandomModelTensors(Tiny(), dtype, dtype, 7);
    int index = 0;
    for (KeyLayout layout : {KeyLayout::kMambaSsm, KeyLayout::kHuggingFace}) {
      for (FileFormat format : {FileFormat::kSafetensors, FileFormat::kPytorch}) {
        std::string dir = Write(scratch, absl::StrCat(checkpoint::DTypeName(dtype), index++), Tiny(), tensors,
                                layout, format);
        absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
        ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
        EXPECT_EQ((*checkpoint)->layout(), layout);
        EXPECT_EQ((*checkpoint)->format(), format);
        EXPECT_EQ(OpenModelFiles(dir)->config.padded_vocab_size(), 256);
        for (const TensorData& tensor : tensors) {
          absl::StatusOr<TensorInfo> info = (*checkpoint)->Info(tensor.name);
          ASSERT_TRUE(info.ok()) << info.status();
          EXPECT_EQ(info->dtype, dtype);
          EXPECT_EQ(info->shape, tensor.shape);
          // Bit for bit what the writer was given, whatever the layout and format.
          EXPECT_EQ(Text(*(*checkpoint)->StoredBytes(tensor.name)), tensor.bytes)
              << tensor.name << " in " << dir;
        }
      }
    }
  }
}

TEST(CheckpointTest, ShardedSafetensorsWithIndex) {
  ScratchDir scratch;
  std::vector<TensorData> tensors = RandomModelTensors(Tiny(), DType::kBF16, DType::kF32, 3);
  std::string dir = Write(scratch, "sharded", Tiny(), tensors, KeyLayout::kHuggingFace,
                          FileFormat::kSafetensors, 3);
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  for (int s = 1; s <= 3; ++s) {
    std::string shard = dir + "/model-0000" + std::to_string(s) + "-of-00003.safetensors";
    ASSERT_TRUE(std::filesystem::exists(shard)) << shard;
    // Each shard holds only part of the model.
    std::string bytes = testing::ReadFileBytes(shard);
    absl::StatusOr<std::vector<StoredTensor>> parsed =
        ParseSafetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, shard);
    ASSERT_TRUE(parsed.ok());
    EXPECT_GT(parsed->size(), 0u);
    EXPECT_LT(parsed->size(), tensors.size());
  }
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  for (const TensorData& tensor : tensors) {
    EXPECT_EQ(Text(*(*checkpoint)->StoredBytes(tensor.name)), tensor.bytes) << tensor.name;
  }

  // An index that puts a tensor in the wrong shard, or names a missing or outside file.
  std::string index = testing::ReadFileBytes(dir + "/model.safetensors.index.json");
  std::string moved = index;
  size_t at = moved.find("\"backbone.norm_f.weight\": \"model-00003-of-00003");
  ASSERT_NE(at, std::string::npos);
  moved.replace(moved.find("00003-of", at), 5, "00001");
  testing::WriteFileBytes(dir + "/model.safetensors.index.json", moved);
  EXPECT_THAT(OpenError(dir), HasSubstr("backbone.norm_f.weight"));
  std::string outside = index;
  outside.replace(outside.find("model-00003-of-00003", at), 20, "../model-00003-of-003");
  testing::WriteFileBytes(dir + "/model.safetensors.index.json", outside);
  EXPECT_THAT(OpenError(dir), HasSubstr("must be a file name"));
  testing::WriteFileBytes(dir + "/model.safetensors.index.json", index);
  std::filesystem::remove(dir + "/model-00002-of-00003.safetensors");
  EXPECT_THAT(OpenError(dir), HasSubstr("model-00002-of-00003.safetensors"));
}

TEST(CheckpointTest, MixedDtypesConvertOnRead) {
  // fp16 matrices with fp32 vectors, as state-spaces/mamba2-130m's pytorch_model.bin.
  ScratchDir scratch;
  std::vector<TensorData> tensors = RandomModelTensors(Tiny(), DType::kF16, DType::kF32, 5);
  std::string dir =
      Write(scratch, "mixed", Tiny(), tensors, KeyLayout::kMambaSsm, FileFormat::kPytorch);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& c = **checkpoint;
  EXPECT_EQ(c.Info("layers.0.mixer.in_proj.weight")->dtype, DType::kF16);
  EXPECT_EQ(c.Info("layers.0.mixer.A_log")->dtype, DType::kF32);
  // f16 read as f32 and as bf16: element by element through the scalar conversions.
  const std::string name = "layers.1.mixer.out_proj.weight";
  absl::Span<const uint8_t> stored = *c.StoredBytes(name);
  int64_t count = c.Info(name)->num_elements();
  std::vector<float> as_f32 = *c.ReadF32(name);
  std::vector<uint16_t> as_bf16(count);
  ASSERT_TRUE(c.ReadTensor(name, DType::kBF16,
                           absl::MakeSpan(reinterpret_cast<uint8_t*>(as_bf16.data()), 2 * count))
                  .ok());
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits = static_cast<uint16_t>(stored[2 * i] | (stored[2 * i + 1] << 8));
    ASSERT_EQ(as_f32[i], F16ToF32(bits)) << i;
    ASSERT_EQ(as_bf16[i], F32ToBF16(F16ToF32(bits))) << i;
  }
}

TEST(CheckpointTest, Bf16IsKeptAsBf16) {
  ScratchDir scratch;
  std::vector<TensorData> tensors = RandomModelTensors(Tiny(), DType::kBF16, DType::kBF16, 2);
  std::string dir =
      Write(scratch, "bf16", Tiny(), tensors, KeyLayout::kHuggingFace, FileFormat::kSafetensors);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const TensorData& embedding = tensors.front();
  std::string out(embedding.bytes.size(), '\0');
  ASSERT_TRUE((*checkpoint)
                  ->ReadTensor("embedding.weight", DType::kBF16,
                               absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()))
                  .ok());
  EXPECT_EQ(out, embedding.bytes);
}

TEST(CheckpointTest, TiedAndUntiedHeads) {
  ScratchDir scratch;
  // Tied, pytorch: lm_head.weight is a second name for the embedding's storage.
  std::vector<TensorData> tied = RandomModelTensors(Tiny(), DType::kF16, DType::kF16, 1);
  std::string dir =
      Write(scratch, "tied", Tiny(), tied, KeyLayout::kMambaSsm, FileFormat::kPytorch);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE((*checkpoint)->Has("lm_head.weight"));
  EXPECT_EQ((*checkpoint)->StoredBytes("lm_head.weight")->data(),
            (*checkpoint)->StoredBytes("embedding.weight")->data());
  // Tied, safetensors: no head at all.
  dir = Write(scratch, "tied_st", Tiny(), tied, KeyLayout::kHuggingFace, FileFormat::kSafetensors);
  checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_FALSE((*checkpoint)->Has("lm_head.weight"));

  // Untied: a head of its own, with its own values.
  ModelConfig untied = Tiny();
  untied.tie_embeddings = false;
  std::vector<TensorData> tensors = RandomModelTensors(untied, DType::kF32, DType::kF32, 1);
  ASSERT_EQ(tensors.back().name, "lm_head.weight");
  dir = Write(scratch, "untied", untied, tensors, KeyLayout::kMambaSsm, FileFormat::kPytorch);
  checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(Text(*(*checkpoint)->StoredBytes("lm_head.weight")), tensors.back().bytes);
  EXPECT_NE(Text(*(*checkpoint)->StoredBytes("lm_head.weight")), tensors.front().bytes);
  // Untied config without a head: missing tensor.
  std::vector<TensorData> headless(tensors.begin(), tensors.end() - 1);
  dir = Write(scratch, "headless", untied, headless, KeyLayout::kHuggingFace,
              FileFormat::kSafetensors);
  EXPECT_THAT(OpenError(dir), HasSubstr("missing tensor lm_head.weight"));
  // Tied config with a head that is not the embedding.
  dir = Write(scratch, "mismatch", Tiny(), tensors, KeyLayout::kMambaSsm, FileFormat::kPytorch);
  std::string error = OpenError(dir);
  EXPECT_THAT(error, HasSubstr("tensor lm_head.weight"));
  EXPECT_THAT(error, HasSubstr("differs from the embedding"));
}

TEST(CheckpointTest, VocabIsPaddedToTheMultiple) {
  ScratchDir scratch;
  ModelConfig config = Tiny();
  config.vocab_size = 257;
  config.pad_vocab_size_multiple = 8;
  std::vector<TensorData> tensors = RandomModelTensors(config, DType::kF32, DType::kF32, 1);
  EXPECT_EQ(tensors.front().shape, std::vector<int64_t>({264, 64}));  // 257 -> 264
  std::string dir =
      Write(scratch, "padded", config, tensors, KeyLayout::kMambaSsm, FileFormat::kSafetensors);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(OpenModelFiles(dir)->config.vocab_size, 257);
  EXPECT_EQ((*checkpoint)->Info("embedding.weight")->rows(), 264);
  // An embedding left unpadded is a wrong shape.
  tensors.front().shape = {257, 64};
  tensors.front().bytes.resize(257 * 64 * 4);
  dir = Write(scratch, "unpadded", config, tensors, KeyLayout::kMambaSsm, FileFormat::kSafetensors);
  std::string error = OpenError(dir);
  EXPECT_THAT(error, HasSubstr("backbone.embedding.weight"));
  EXPECT_THAT(error, HasSubstr("[257, 64]"));
  EXPECT_THAT(error, HasSubstr("[264, 64]"));
}

TEST(CheckpointTest, MissingWrongShapeAndUnusedTensorsAreNamed) {
  ScratchDir scratch;
  std::vector<TensorData> tensors = RandomModelTensors(Tiny(), DType::kF32, DType::kF32, 1);
  for (FileFormat format : {FileFormat::kSafetensors, FileFormat::kPytorch}) {
    std::string suffix = FileFormatName(format);
    std::vector<TensorData> missing;
    for (const TensorData& t : tensors) {
      if (t.name != "layers.1.mixer.D") missing.push_back(t);
    }
    std::string dir =
        Write(scratch, "missing" + suffix, Tiny(), missing, KeyLayout::kMambaSsm, format);
    EXPECT_THAT(OpenError(dir), HasSubstr("missing tensor layers.1.mixer.D"));

    std::vector<TensorData> wrong = tensors;
    for (TensorData& t : wrong) {
      if (t.name == "layers.0.mixer.A_log") {
        t.shape = {9};
        t.bytes.resize(9 * 4);
      }
    }
    dir = Write(scratch, "wrong" + suffix, Tiny(), wrong, KeyLayout::kHuggingFace, format);
    std::string error = OpenError(dir);
    EXPECT_THAT(error, HasSubstr("backbone.layers.0.mixer.A_log"));
    EXPECT_THAT(error, HasSubstr("shape [9]; the config needs [8]"));

    std::vector<TensorData> extra = tensors;
    extra.push_back({"layers.2.mixer.D", DType::kF32, {8}, std::string(32, '\0')});
    dir = Write(scratch, "extra" + suffix, Tiny(), extra, KeyLayout::kMambaSsm, format);
    EXPECT_THAT(OpenError(dir), HasSubstr("unused tensor backbone.layers.2.mixer.D"));
  }
}

TEST(CheckpointTest, DamagedFilesAreNamed) {
  ScratchDir scratch;
  std::vector<TensorData> tensors = RandomModelTensors(Tiny(), DType::kF32, DType::kF32, 1);
  std::string dir =
      Write(scratch, "st", Tiny(), tensors, KeyLayout::kHuggingFace, FileFormat::kSafetensors);
  std::string path = dir + "/model.safetensors";
  std::string bytes = testing::ReadFileBytes(path);
  // Truncated: the last tensor no longer fits.
  testing::WriteFileBytes(path, bytes.substr(0, bytes.size() - 100));
  std::string error = OpenError(dir);
  EXPECT_THAT(error, HasSubstr("model.safetensors"));
  EXPECT_THAT(error, HasSubstr("truncated"));
  // A corrupt header.
  std::string corrupt = bytes;
  corrupt[20] = '\x01';
  testing::WriteFileBytes(path, corrupt);
  EXPECT_THAT(OpenError(dir), HasSubstr("not well-formed JSON"));
  // Two keys for one canonical name.
  std::vector<StoredTensor> twice(2);
  std::string payload(8, '\0');
  twice[0].name = "backbone.embedding.weight";
  twice[0].shape = {2};
  twice[0].bytes = {reinterpret_cast<const uint8_t*>(payload.data()), 8};
  twice[1] = twice[0];
  twice[1].name = "backbone.embeddings.weight";
  testing::WriteFileBytes(path, SerializeSafetensors(twice));
  EXPECT_THAT(OpenError(dir), HasSubstr("both name embedding.weight"));
  // A truncated pytorch_model.bin names the file.
  std::filesystem::remove(path);
  std::string pt =
      Write(scratch, "pt", Tiny(), tensors, KeyLayout::kMambaSsm, FileFormat::kPytorch);
  std::string pt_bytes = testing::ReadFileBytes(pt + "/pytorch_model.bin");
  testing::WriteFileBytes(pt + "/pytorch_model.bin", pt_bytes.substr(0, pt_bytes.size() / 2));
  EXPECT_THAT(OpenError(pt), HasSubstr("pytorch_model.bin"));
  testing::WriteFileBytes(path, SerializeSafetensors(twice));
  // No tensor files at all.
  std::filesystem::remove(path);
  absl::StatusOr<std::unique_ptr<Checkpoint>> none = OpenCheckpoint(dir);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(OpenError(scratch.Sub("nowhere")), HasSubstr("config.json"));
}

TEST(CheckpointTest, RealTorchSaveLayoutFromCPython) {
  // testdata/torch_like.bin: pickled and zipped by CPython (make_fixtures.py), values
  // listed there. Opened without validation: it is not a whole model.
  ScratchDir scratch;
  std::filesystem::copy_file(std::string(COIL_CHECKPOINT_TESTDATA) + "/torch_like.bin",
                             scratch.Sub("pytorch_model.bin"));
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      checkpoint::OpenCheckpointFiles(scratch.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& c = **checkpoint;
  EXPECT_EQ(c.TensorNames(), std::vector<std::string>({"conv", "embedding.weight", "lm_head.weight",
                                                       "norm_f.weight", "packed"}));
  EXPECT_EQ(*c.ReadF32("embedding.weight"), std::vector<float>({0.5f, -1, 2, 0.25f, 3, -0.125f}));
  EXPECT_EQ(*c.ReadF32("lm_head.weight"), *c.ReadF32("embedding.weight"));
  EXPECT_EQ(*c.ReadF32("norm_f.weight"), std::vector<float>({1.5f, -2.5f, 1e-3f}));
  EXPECT_EQ(*c.ReadF32("packed"), std::vector<float>({1, -2, 0.5f, 4}));  // storage offset 2
  EXPECT_EQ(c.Info("conv")->shape, std::vector<int64_t>({3, 1, 2}));
  EXPECT_EQ(*c.ReadF32("conv"), std::vector<float>({1, 2, 3, 4, 5, 6}));
}

TEST(CheckpointTest, RequiredTensorsOf130mAddUpToItsSize) {
  // mamba2-130m has about 129 million parameters (embedding 50288 x 768 plus 24 layers of
  // about 3.77 million): a check of the shapes RequiredTensors derives.
  ModelConfig config = *NamedModelShape("130m");
  int64_t total = 0;
  for (const TensorSpec& spec : RequiredTensors(config)) {
    int64_t count = 1;
    for (int64_t dim : spec.shape) count *= dim;
    total += count;
  }
  EXPECT_GT(total, 125'000'000);
  EXPECT_LT(total, 135'000'000);
  // embedding, 24 x (norm, in_proj, conv1d weight and bias, dt_bias, A_log, D, mixer norm,
  // out_proj), norm_f; tied, so no lm_head.
  EXPECT_EQ(RequiredTensors(config).size(), 1 + 24 * 9 + 1u);
}

TEST(CheckpointTest, RequiredTensorsOfNemotron130mAddUpToItsSize) {
  // d 768, vocab 50288 (tied), 28 layers: 12 Mamba2 (in_proj 5144 x 768 with 24 heads of 64
  // in 8 groups of d_state 128, out_proj 768 x 1536, conv 3584 x 4 plus bias, 3 x 24, norm
  // 1536), 4 attention (q, o 768 x 768; k, v 256 x 768), 12 MLP (2 x 3072 x 768), 28 block
  // norms and norm_f: 163,355,232 parameters worked out by hand.
  ModelConfig config = *NamedModelShape("nemotron-130m");
  int64_t total = 0;
  for (const TensorSpec& spec : RequiredTensors(config)) {
    int64_t count = 1;
    for (int64_t dim : spec.shape) count *= dim;
    total += count;
  }
  const int64_t mamba = 5144 * 768 + 768 * 1536 + 3584 * 4 + 3584 + 3 * 24 + 1536;
  const int64_t attention = 2 * 768 * 768 + 2 * 256 * 768;
  const int64_t mlp = 2 * 3072 * 768;
  EXPECT_EQ(total, 50288 * 768 + 12 * mamba + 4 * attention + 12 * mlp + 29 * 768);
  // embedding, 28 block norms, 12 x 9 Mamba2 tensors, 4 x 4 attention, 12 x 2 MLP, norm_f.
  EXPECT_EQ(RequiredTensors(config).size(), 1 + 28 + 12 * 8 + 4 * 4 + 12 * 2 + 1u);
}

TEST(CheckpointTest, NemotronHTensorsAreCheckedByName) {
  ScratchDir scratch;
  ModelConfig config = *NamedModelShape("nemotron-tiny");
  std::vector<TensorData> tensors = RandomModelTensors(config, DType::kBF16, DType::kF32, 3);
  // Every format the writer has, sharded too, opens and validates.
  for (FileFormat format : {FileFormat::kSafetensors, FileFormat::kPytorch}) {
    const std::string dir = Write(scratch, absl::StrCat("nemotron_", FileFormatName(format)),
                                  config, tensors, KeyLayout::kHuggingFace, format);
    absl::StatusOr<ModelFiles> files = OpenModelFiles(dir);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_EQ(files->config.format, ConfigFormat::kNemotronH);
    EXPECT_EQ(files->checkpoint->layout(), KeyLayout::kHuggingFace);
    // Layer 1 is attention: its q_proj is stored under backbone.layers.1.mixer.q_proj.weight.
    EXPECT_THAT(files->checkpoint->Describe("layers.1.mixer.q_proj.weight"),
                HasSubstr("backbone.layers.1.mixer.q_proj.weight"));
  }
  ASSERT_TRUE(OpenModelFiles(Write(scratch, "nemotron_sharded", config, tensors,
                                   KeyLayout::kHuggingFace, FileFormat::kSafetensors, 3))
                  .ok());
  EXPECT_FALSE(WriteModelDirectory(config, tensors, {KeyLayout::kMambaSsm, FileFormat::kPytorch, 1},
                                   scratch.Sub("nemotron_mamba_ssm"))
                   .ok());
  // A missing attention projection, a misshaped MLP projection.
  std::vector<TensorData> missing;
  for (const TensorData& t : tensors) {
    if (t.name != "layers.1.mixer.k_proj.weight") missing.push_back(t);
  }
  EXPECT_THAT(OpenError(Write(scratch, "nemotron_missing", config, missing, KeyLayout::kHuggingFace,
                              FileFormat::kSafetensors)),
              HasSubstr("missing tensor layers.1.mixer.k_proj.weight"));
  std::vector<TensorData> misshaped = tensors;
  for (TensorData& t : misshaped) {
    if (t.name == "layers.2.mixer.up_proj.weight") t.shape = {64, 128};  // transposed
  }
  EXPECT_THAT(OpenError(Write(scratch, "nemotron_misshaped", config, misshaped,
                              KeyLayout::kHuggingFace, FileFormat::kSafetensors)),
              HasSubstr("backbone.layers.2.mixer.up_proj.weight"));
}

}  // namespace
}  // namespace coil::model
