#include "workers/model/model_writer.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "workers/checkpoint/pytorch_zip.h"
#include "workers/checkpoint/safetensors.h"
#include "workers/model/model_files.h"

namespace coil::model {
namespace {

using checkpoint::DType;
using checkpoint::FileFormat;
using checkpoint::KeyLayout;

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Span<const uint8_t> AsBytes(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// SplitMix64: a small, portable generator (std::normal_distribution is not the same
// across standard libraries, and checkpoints must be reproducible everywhere).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal (Box-Muller).
  double Normal() {
    double u = Uniform();
    double v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
  }

 private:
  uint64_t state_;
};

uint64_t NameSeed(uint64_t seed, const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull ^ seed;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

}  // namespace

std::string LayoutTensorKey(const std::string& canonical, KeyLayout layout) {
  if (canonical == "lm_head.weight") return canonical;
  if (canonical == "embedding.weight" && layout == KeyLayout::kHuggingFace) {
    return "backbone.embeddings.weight";
  }
  return "backbone." + canonical;
}

std::vector<TensorData> RandomModelTensors(const ModelConfig& config, DType matrix_dtype,
                                           DType vector_dtype, uint64_t seed) {
  std::vector<TensorData> tensors;
  for (const TensorSpec& spec : RequiredTensors(config)) {
    TensorData tensor;
    tensor.name = spec.name;
    tensor.shape = spec.shape;
    tensor.dtype = spec.shape.size() >= 2 ? matrix_dtype : vector_dtype;
    int64_t count = 1;
    for (int64_t dim : spec.shape) count *= dim;
    std::vector<float> values(count);
    SplitMix64 rng(NameSeed(seed, spec.name));
    const std::string& n = spec.name;
    if (absl::EndsWith(n, "A_log")) {
      for (float& v : values) v = static_cast<float>(std::log(1.0 + 15.0 * rng.Uniform()));
    } else if (absl::EndsWith(n, "dt_bias")) {
      for (float& v : values) {
        double dt = std::exp(std::log(1e-3) + (std::log(1e-1) - std::log(1e-3)) * rng.Uniform());
        v = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1
      }
    } else if (absl::EndsWith(n, ".D") || absl::EndsWith(n, "norm.weight") ||
               n == "norm_f.weight") {
      for (float& v : values) v = 1.0f;
    } else if (absl::EndsWith(n, ".bias")) {
      for (float& v : values) v = 0.0f;
    } else {
      for (float& v : values) v = static_cast<float>(0.02 * rng.Normal());
    }
    tensor.bytes.resize(count * checkpoint::DTypeSize(tensor.dtype));
    checkpoint::ConvertElements(values.data(), DType::kF32, tensor.bytes.data(), tensor.dtype, count);
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

absl::Status WriteModelDirectory(const ModelConfig& config, const std::vector<TensorData>& tensors,
                                 const WriteOptions& options, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  // A Nemotron-H config has one dialect, with Hugging Face's keys; a Mamba2 config takes the
  // layout's.
  if (config.format == ConfigFormat::kNemotronH && options.layout != KeyLayout::kHuggingFace) {
    return absl::InvalidArgumentError(
        "a nemotron_h model is written in the Hugging Face key layout only (--layout hf)");
  }
  const ConfigFormat config_format =
      config.format == ConfigFormat::kNemotronH   ? ConfigFormat::kNemotronH
      : options.layout == KeyLayout::kHuggingFace ? ConfigFormat::kHuggingFace
                                                  : ConfigFormat::kMambaSsm;
  COIL_RETURN_IF_ERROR(WriteFile(dir + "/config.json", ModelConfigToJson(config, config_format)));

  if (options.format == FileFormat::kPytorch) {
    std::vector<checkpoint::PickledTensor> pickled;
    std::vector<std::pair<std::string, absl::string_view>> storages;
    const TensorData* embedding = nullptr;
    std::string embedding_key;
    for (const TensorData& tensor : tensors) {
      checkpoint::PickledTensor entry;
      entry.name = LayoutTensorKey(tensor.name, options.layout);
      entry.storage_key = std::to_string(storages.size());
      entry.dtype = tensor.dtype;
      entry.storage_numel =
          static_cast<int64_t>(tensor.bytes.size() / checkpoint::DTypeSize(tensor.dtype));
      entry.shape = tensor.shape;
      entry.stride.assign(tensor.shape.size(), 1);
      for (size_t d = tensor.shape.size(); d-- > 1;) {
        entry.stride[d - 1] = entry.stride[d] * tensor.shape[d];
      }
      if (tensor.name == "embedding.weight") {
        embedding = &tensor;
        embedding_key = entry.storage_key;
      }
      pickled.push_back(entry);
      storages.emplace_back(entry.storage_key, tensor.bytes);
    }
    bool has_head = false;
    for (const TensorData& tensor : tensors) has_head |= tensor.name == "lm_head.weight";
    if (config.tie_embeddings && embedding != nullptr && !has_head) {
      checkpoint::PickledTensor head = pickled[embedding - tensors.data()];
      head.name = "lm_head.weight";
      head.storage_key = embedding_key;
      pickled.push_back(head);
    }
    return WriteFile(dir + "/pytorch_model.bin",
                     checkpoint::WritePytorchZip("pytorch_model", pickled, storages));
  }

  auto stored = [&](const TensorData& tensor) {
    checkpoint::StoredTensor entry;
    entry.name = LayoutTensorKey(tensor.name, options.layout);
    entry.dtype = tensor.dtype;
    entry.shape = tensor.shape;
    entry.bytes = AsBytes(tensor.bytes);
    return entry;
  };
  int shards = std::max(1, options.shards);
  if (shards == 1) {
    std::vector<checkpoint::StoredTensor> entries;
    for (const TensorData& tensor : tensors) entries.push_back(stored(tensor));
    return WriteFile(dir + "/model.safetensors", checkpoint::SerializeSafetensors(entries));
  }
  // Contiguous runs of tensors per shard, as Hugging Face's sharding does by size.
  nlohmann::ordered_json index;
  uint64_t total = 0;
  for (const TensorData& tensor : tensors) total += tensor.bytes.size();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  size_t per_shard = (tensors.size() + shards - 1) / shards;
  for (int s = 0; s < shards; ++s) {
    std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<checkpoint::StoredTensor> entries;
    for (size_t i = s * per_shard; i < std::min(tensors.size(), (s + 1) * per_shard); ++i) {
      entries.push_back(stored(tensors[i]));
      index["weight_map"][entries.back().name] = file;
    }
    COIL_RETURN_IF_ERROR(WriteFile(dir + "/" + file, checkpoint::SerializeSafetensors(entries)));
  }
  return WriteFile(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace coil::model
