// Writes model directories (config.json plus tensors) in either key layout and file
// format, and makes deterministic random weights (Mamba2 or Nemotron-H) at realistic scales.
// coil's own tests, benchmarks and demo use it (through coil-make-model); the readers are its
// inverse.
#ifndef COIL_WORKERS_MODEL_MODEL_WRITER_H_
#define COIL_WORKERS_MODEL_MODEL_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/checkpoint/dtype.h"
#include "workers/model/model_config.h"

namespace coil::model {

// One tensor to write, under its canonical name, with its bytes in `dtype`.
struct TensorData {
  std::string name;
  checkpoint::DType dtype = checkpoint::DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;
};

struct WriteOptions {
  // Also picks the config.json format.
  checkpoint::KeyLayout layout = checkpoint::KeyLayout::kMambaSsm;
  checkpoint::FileFormat format = checkpoint::FileFormat::kSafetensors;
  int shards = 1;  // safetensors only: >1 writes model.safetensors.index.json
};

// The key `canonical` has in `layout` (the inverse of CanonicalTensorName).
std::string LayoutTensorKey(const std::string& canonical, checkpoint::KeyLayout layout);

// Writes `<dir>/config.json` and the tensor file(s); creates `dir` if needed. The config is
// written in the layout's dialect, or as a nemotron_h config for a Nemotron-H model (which
// takes the Hugging Face layout only). In the pytorch format a tied model also gets
// lm_head.weight sharing the embedding's storage, as mamba_ssm's state dict has it.
absl::Status WriteModelDirectory(const ModelConfig& config, const std::vector<TensorData>& tensors,
                                 const WriteOptions& options, const std::string& dir);

// Every tensor RequiredTensors(config) names, in that order, drawn from a generator keyed
// by (seed, canonical name), so the values do not depend on the layout, the format or
// which other tensors exist: matrices and conv weights N(0, 0.02), biases 0, A_log =
// log U(1, 16), dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1], D = 1, norm
// weights 1. Tensors of rank >= 2 are stored in `matrix_dtype`, vectors in `vector_dtype`.
std::vector<TensorData> RandomModelTensors(const ModelConfig& config,
                                           checkpoint::DType matrix_dtype,
                                           checkpoint::DType vector_dtype, uint64_t seed);

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MODEL_WRITER_H_
