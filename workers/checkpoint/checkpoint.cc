#include "workers/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "workers/checkpoint/json_text.h"
#include "workers/checkpoint/pytorch_zip.h"
#include "workers/checkpoint/safetensors.h"

namespace coil::checkpoint {

const char* KeyLayoutName(KeyLayout layout) {
  return layout == KeyLayout::kMambaSsm ? "mamba_ssm" : "hf";
}

const char* FileFormatName(FileFormat format) {
  return format == FileFormat::kSafetensors ? "safetensors" : "pytorch";
}

int64_t TensorInfo::cols() const {
  int64_t cols = 1;
  for (size_t d = 1; d < shape.size(); ++d) cols *= shape[d];
  return cols;
}

std::string CanonicalTensorName(const std::string& key) {
  constexpr absl::string_view kBackbone = "backbone.";
  if (!absl::StartsWith(key, kBackbone)) return key;
  std::string name = key.substr(kBackbone.size());
  if (name == "embeddings.weight") return "embedding.weight";  // Hugging Face
  return name;
}

Checkpoint::Checkpoint(KeyLayout layout, FileFormat format,
                       std::vector<std::unique_ptr<MappedFile>> files,
                       std::map<std::string, StoredTensor> tensors)
    : layout_(layout),
      format_(format),
      files_(std::move(files)),
      tensors_(std::move(tensors)) {}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  return names;
}

absl::StatusOr<const StoredTensor*> Checkpoint::Find(const std::string& name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor ", name, " is not in the checkpoint"));
  }
  return &found->second;
}

absl::StatusOr<TensorInfo> Checkpoint::Info(const std::string& name) const {
  COIL_ASSIGN_OR_RETURN(const StoredTensor* tensor, Find(name));
  return TensorInfo{tensor->dtype, tensor->shape};
}

std::string Checkpoint::Describe(const std::string& name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end()) return name;
  const StoredTensor& tensor = found->second;
  return absl::StrCat(tensor.name, " in ", tensor.file, " at byte ", tensor.file_offset);
}

absl::StatusOr<absl::Span<const uint8_t>> Checkpoint::StoredBytes(const std::string& name) const {
  COIL_ASSIGN_OR_RETURN(const StoredTensor* tensor, Find(name));
  return tensor->bytes;
}

absl::Status Checkpoint::CheckOut(const StoredTensor& tensor, int64_t elements, DType out_dtype,
                                  absl::Span<uint8_t> out) const {
  uint64_t needed = static_cast<uint64_t>(elements) * DTypeSize(out_dtype);
  if (out.size() != needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", elements, " elements of tensor ", tensor.name, " as ",
                     DTypeName(out_dtype), " needs a ", needed, "-byte buffer; got ", out.size()));
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::ReadTensor(const std::string& name, DType out_dtype,
                                    absl::Span<uint8_t> out) const {
  COIL_ASSIGN_OR_RETURN(TensorInfo info, Info(name));
  return ReadRows(name, 0, info.rows(), out_dtype, out);
}

absl::Status Checkpoint::ReadRows(const std::string& name, int64_t begin, int64_t count,
                                  DType out_dtype, absl::Span<uint8_t> out) const {
  RowSegment segment{begin, count};
  return ReadSegments(name, absl::MakeConstSpan(&segment, 1), out_dtype, out);
}

absl::Status Checkpoint::ReadSegments(const std::string& name,
                                      absl::Span<const RowSegment> segments, DType out_dtype,
                                      absl::Span<uint8_t> out) const {
  COIL_ASSIGN_OR_RETURN(const StoredTensor* tensor, Find(name));
  TensorInfo info{tensor->dtype, tensor->shape};
  int64_t rows = info.rows();
  int64_t cols = info.cols();
  int64_t total_rows = 0;
  for (const RowSegment& segment : segments) {
    if (segment.begin < 0 || segment.count < 0 || segment.begin > rows ||
        segment.count > rows - segment.begin) {
      return absl::OutOfRangeError(absl::StrCat("rows [", segment.begin, ", ",
                                                segment.begin + segment.count, ") of tensor ", name,
                                                " fall outside its ", rows, " rows"));
    }
    total_rows += segment.count;
  }
  COIL_RETURN_IF_ERROR(CheckOut(*tensor, total_rows * cols, out_dtype, out));
  size_t in_row = cols * DTypeSize(tensor->dtype);
  size_t out_row = cols * DTypeSize(out_dtype);
  uint8_t* dst = out.data();
  for (const RowSegment& segment : segments) {
    ConvertElements(tensor->bytes.data() + segment.begin * in_row, tensor->dtype, dst, out_dtype,
                    segment.count * cols);
    dst += segment.count * out_row;
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::ReadColumns(const std::string& name, int64_t begin, int64_t count,
                                     DType out_dtype, absl::Span<uint8_t> out) const {
  COIL_ASSIGN_OR_RETURN(const StoredTensor* tensor, Find(name));
  TensorInfo info{tensor->dtype, tensor->shape};
  int64_t rows = info.rows();
  int64_t cols = info.cols();
  if (begin < 0 || count < 0 || begin > cols || count > cols - begin) {
    return absl::OutOfRangeError(absl::StrCat("columns [", begin, ", ", begin + count,
                                              ") of tensor ", name, " fall outside its ", cols,
                                              " columns"));
  }
  COIL_RETURN_IF_ERROR(CheckOut(*tensor, rows * count, out_dtype, out));
  size_t in_size = DTypeSize(tensor->dtype);
  size_t out_size = DTypeSize(out_dtype);
  for (int64_t r = 0; r < rows; ++r) {
    ConvertElements(tensor->bytes.data() + (r * cols + begin) * in_size, tensor->dtype,
                    out.data() + r * count * out_size, out_dtype, count);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Checkpoint::ReadF32(const std::string& name) const {
  COIL_ASSIGN_OR_RETURN(TensorInfo info, Info(name));
  std::vector<float> values(info.num_elements());
  COIL_RETURN_IF_ERROR(ReadTensor(
      name, DType::kF32,
      absl::MakeSpan(reinterpret_cast<uint8_t*>(values.data()), values.size() * sizeof(float))));
  return values;
}

namespace {

bool FileExists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream text;
  text << file.rdbuf();
  if (text.str().size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", text.str().size(), " bytes; the limit is ", limit));
  }
  return text.str();
}

// Adds `stored` under canonical names, refusing two keys that land on one name.
absl::Status AddTensors(std::vector<StoredTensor> stored,
                        std::map<std::string, StoredTensor>& tensors, bool& saw_hf) {
  for (StoredTensor& tensor : stored) {
    if (tensor.name == "backbone.embeddings.weight") saw_hf = true;
    std::string canonical = CanonicalTensorName(tensor.name);
    auto [it, inserted] = tensors.emplace(canonical, tensor);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensors ", it->second.name, " and ",
                                                     tensor.name, " both name ", canonical,
                                                     "; keep one of them"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardIndex> ParseSafetensorsIndex(absl::string_view text,
                                                 const std::string& index_path) {
  absl::StatusOr<nlohmann::json> index = ParseJsonText(text, index_path);
  if (!index.ok()) return absl::DataLossError(index.status().message());
  auto weight_map = index->is_object() ? index->find("weight_map") : index->end();
  if (weight_map == index->end() || !weight_map->is_object()) {
    return absl::DataLossError(
        absl::StrCat(index_path, " has no weight_map object {tensor: file}"));
  }
  ShardIndex shard_of;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string()) {
      return absl::DataLossError(absl::StrCat(index_path, ": weight_map entry ", it.key(), " is ",
                                              it->dump(), "; expected a file name"));
    }
    const std::string& shard = it->get_ref<const std::string&>();
    if (shard.empty() || shard.find_first_of(std::string("/\0", 2)) != std::string::npos ||
        shard == "." || shard == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor ", it.key(), " names shard '", shard,
                       "'; a shard must be a file name in the model directory"));
    }
    shard_of[it.key()] = shard;
  }
  return shard_of;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpointFiles(const std::string& model_dir) {
  std::vector<std::unique_ptr<MappedFile>> files;
  std::map<std::string, StoredTensor> tensors;
  bool saw_hf = false;
  FileFormat format = FileFormat::kSafetensors;
  std::string index_path = model_dir + "/model.safetensors.index.json";
  std::string single_path = model_dir + "/model.safetensors";
  std::string pytorch_path = model_dir + "/pytorch_model.bin";
  if (FileExists(index_path)) {
    COIL_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path, 64u << 20));
    COIL_ASSIGN_OR_RETURN(ShardIndex shard_of, ParseSafetensorsIndex(text, index_path));
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : shard_of) shards.insert(shard);
    for (const std::string& shard : shards) {
      std::string path = model_dir + "/" + shard;
      COIL_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
      COIL_ASSIGN_OR_RETURN(std::vector<StoredTensor> stored,
                            ParseSafetensors(file->bytes(), path));
      for (const StoredTensor& tensor : stored) {
        auto listed = shard_of.find(tensor.name);
        if (listed == shard_of.end() || listed->second != shard) {
          return absl::DataLossError(absl::StrCat(
              path, ": tensor ", tensor.name, " is not listed for this shard in ", index_path,
              listed == shard_of.end() ? "" : absl::StrCat(" (listed in ", listed->second, ")")));
        }
        shard_of.erase(listed);
      }
      COIL_RETURN_IF_ERROR(AddTensors(std::move(stored), tensors, saw_hf));
      files.push_back(std::move(file));
    }
    if (!shard_of.empty()) {
      return absl::DataLossError(absl::StrCat(index_path, " lists tensor ", shard_of.begin()->first,
                                              " in ", shard_of.begin()->second,
                                              ", which does not hold it"));
    }
  } else if (FileExists(single_path)) {
    COIL_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(single_path));
    COIL_ASSIGN_OR_RETURN(std::vector<StoredTensor> stored,
                          ParseSafetensors(file->bytes(), single_path));
    COIL_RETURN_IF_ERROR(AddTensors(std::move(stored), tensors, saw_hf));
    files.push_back(std::move(file));
  } else if (FileExists(pytorch_path)) {
    format = FileFormat::kPytorch;
    COIL_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(pytorch_path));
    COIL_ASSIGN_OR_RETURN(std::vector<StoredTensor> stored,
                          ParsePytorchZip(file->bytes(), pytorch_path));
    COIL_RETURN_IF_ERROR(AddTensors(std::move(stored), tensors, saw_hf));
    files.push_back(std::move(file));
  } else {
    return absl::NotFoundError(
        absl::StrCat(model_dir,
                     " has no model.safetensors.index.json, model.safetensors or "
                     "pytorch_model.bin; point at a model directory"));
  }
  return std::make_unique<Checkpoint>(saw_hf ? KeyLayout::kHuggingFace : KeyLayout::kMambaSsm,
                                      format, std::move(files), std::move(tensors));
}

}  // namespace coil::checkpoint
