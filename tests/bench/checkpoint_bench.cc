// Checkpoint reading throughput: opening and validating a model directory, and reading
// rows, columns and segments of a 130m-sized in_proj ([3352, 768]) with each conversion a
// worker does at load (f16 -> f32, f16 -> bf16, bf16 -> bf16, f32 -> bf16). Prints figures,
// asserts nothing. Files live in a temporary directory removed at exit.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "benchmark/benchmark.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/model/model_files.h"
#include "workers/model/model_writer.h"

namespace coil::model {
namespace {

using checkpoint::Checkpoint;
using checkpoint::DType;
using checkpoint::FileFormat;
using checkpoint::KeyLayout;
using checkpoint::TensorInfo;

// A model directory's tensors, opened and checked against its config.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& dir) {
  absl::StatusOr<ModelFiles> files = OpenModelFiles(dir);
  if (!files.ok()) return files.status();
  return std::move(files->checkpoint);
}

constexpr int64_t kRows = 3352;
constexpr int64_t kCols = 768;

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("coil_checkpoint_bench_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A directory holding one [kRows, kCols] tensor of `dtype` (opened without validation).
std::unique_ptr<Checkpoint> OpenMatrix(const TempDir& temp, DType dtype) {
  std::string dir = temp.Sub(std::string("matrix_") + checkpoint::DTypeName(dtype));
  ModelConfig config = *NamedModelShape("tiny");
  TensorData tensor;
  tensor.name = "w";
  tensor.dtype = dtype;
  tensor.shape = {kRows, kCols};
  std::vector<float> values(kRows * kCols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) * 1e-3f;
  tensor.bytes.resize(values.size() * checkpoint::DTypeSize(dtype));
  checkpoint::ConvertElements(values.data(), DType::kF32, tensor.bytes.data(), dtype, values.size());
  if (!std::filesystem::exists(dir)) {
    (void)WriteModelDirectory(config, {tensor},
                              {KeyLayout::kHuggingFace, FileFormat::kSafetensors, 1}, dir);
  }
  return std::move(*checkpoint::OpenCheckpointFiles(dir));
}

void BM_ReadRows(benchmark::State& state, DType from, DType to) {
  TempDir temp;
  std::unique_ptr<Checkpoint> checkpoint = OpenMatrix(temp, from);
  std::vector<uint8_t> out(kRows * kCols * checkpoint::DTypeSize(to));
  for (auto _ : state) {
    benchmark::DoNotOptimize(checkpoint->ReadRows("w", 0, kRows, to, absl::MakeSpan(out)));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * checkpoint::DTypeSize(from));
}
BENCHMARK_CAPTURE(BM_ReadRows, f16_to_f32, DType::kF16, DType::kF32);
BENCHMARK_CAPTURE(BM_ReadRows, f16_to_bf16, DType::kF16, DType::kBF16);
BENCHMARK_CAPTURE(BM_ReadRows, bf16_to_bf16, DType::kBF16, DType::kBF16);
BENCHMARK_CAPTURE(BM_ReadRows, bf16_to_f32, DType::kBF16, DType::kF32);
BENCHMARK_CAPTURE(BM_ReadRows, f32_to_bf16, DType::kF32, DType::kBF16);

// A TP2 rank's share of out_proj-like columns: half of every row.
void BM_ReadColumnsHalf(benchmark::State& state) {
  TempDir temp;
  std::unique_ptr<Checkpoint> checkpoint = OpenMatrix(temp, DType::kF16);
  std::vector<uint8_t> out(kRows * (kCols / 2) * 4);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        checkpoint->ReadColumns("w", kCols / 2, kCols / 2, DType::kF32, absl::MakeSpan(out)));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kRows * (kCols / 2) * 2);
}
BENCHMARK(BM_ReadColumnsHalf);

// Open + validate a whole model directory (tiny shape, 21 tensors).
void BM_OpenCheckpoint(benchmark::State& state, FileFormat format) {
  TempDir temp;
  ModelConfig config = *NamedModelShape("tiny");
  std::string dir = temp.Sub("tiny");
  (void)WriteModelDirectory(config, RandomModelTensors(config, DType::kF16, DType::kF32, 0),
                            {KeyLayout::kMambaSsm, format, 1}, dir);
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
    benchmark::DoNotOptimize(checkpoint.ok());
  }
}
BENCHMARK_CAPTURE(BM_OpenCheckpoint, safetensors, FileFormat::kSafetensors);
BENCHMARK_CAPTURE(BM_OpenCheckpoint, pytorch, FileFormat::kPytorch);

// Open, validate and read every tensor of a real-sized model directory named by
// COIL_BENCH_MODEL_DIR (e.g. `coil-make-model --shape 130m --dtype f16 --out DIR`), as a
// TP1 worker does at start-up. Skipped without it (writing 260 MB takes a while).
void BM_LoadModelDir(benchmark::State& state, DType to) {
  const char* dir = std::getenv("COIL_BENCH_MODEL_DIR");
  if (dir == nullptr) {
    state.SkipWithError("set COIL_BENCH_MODEL_DIR to a model directory");
    return;
  }
  int64_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = OpenCheckpoint(dir);
    if (!checkpoint.ok()) {
      state.SkipWithError(std::string(checkpoint.status().message()).c_str());
      return;
    }
    bytes = 0;
    for (const std::string& name : (*checkpoint)->TensorNames()) {
      TensorInfo info = *(*checkpoint)->Info(name);
      std::vector<uint8_t> out(info.num_elements() * checkpoint::DTypeSize(to));
      benchmark::DoNotOptimize((*checkpoint)->ReadTensor(name, to, absl::MakeSpan(out)));
      bytes += info.num_elements() * checkpoint::DTypeSize(info.dtype);
    }
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK_CAPTURE(BM_LoadModelDir, to_f32, DType::kF32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadModelDir, to_bf16, DType::kBF16)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace coil::model

BENCHMARK_MAIN();
