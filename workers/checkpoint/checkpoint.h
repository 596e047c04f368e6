// Checkpoint: the tensor files of a model directory opened for reading (an index and its
// safetensors shards, one model.safetensors, or a torch.save pytorch_model.bin). It holds
// every tensor under its canonical name (the mamba_ssm key without "backbone.", so both key
// layouts read alike: "embedding.weight", "layers.3.mixer.in_proj.weight", "norm_f.weight",
// "lm_head.weight"), memory-mapped and never copied whole: a caller reads a tensor, a row
// range, a column range or a list of row segments into its own buffer, in f32, bf16 or
// f16, touching only the pages of the bytes it asked for.
#ifndef COIL_WORKERS_CHECKPOINT_CHECKPOINT_H_
#define COIL_WORKERS_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "workers/checkpoint/dtype.h"
#include "workers/checkpoint/mapped_file.h"
#include "workers/checkpoint/stored_tensor.h"

namespace coil::checkpoint {

// A tensor's element type as stored and its shape. Slices view it as a matrix of rows()
// (the first dimension) by cols() (the product of the others; 1 for a vector).
struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const;
  int64_t num_elements() const { return rows() * cols(); }
};

// `count` rows starting at `begin`.
struct RowSegment {
  int64_t begin = 0;
  int64_t count = 0;
};

// Which key layout and file format a checkpoint was found in.
enum class KeyLayout { kMambaSsm, kHuggingFace };
enum class FileFormat { kSafetensors, kPytorch };
const char* KeyLayoutName(KeyLayout layout);
const char* FileFormatName(FileFormat format);

class Checkpoint {
 public:
  Checkpoint(KeyLayout layout, FileFormat format,
             std::vector<std::unique_ptr<MappedFile>> files,
             std::map<std::string, StoredTensor> tensors);

  KeyLayout layout() const { return layout_; }
  FileFormat format() const { return format_; }

  // Canonical names, sorted.
  std::vector<std::string> TensorNames() const;
  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }
  // NOT_FOUND naming the tensor when absent.
  absl::StatusOr<TensorInfo> Info(const std::string& name) const;

  // Each Read* converts to `out_dtype` and needs `out` to be exactly the size of the
  // result (rows x columns x DTypeSize(out_dtype)), row-major; OUT_OF_RANGE names the
  // tensor when a range falls outside it.
  absl::Status ReadTensor(const std::string& name, DType out_dtype, absl::Span<uint8_t> out) const;
  absl::Status ReadRows(const std::string& name, int64_t begin, int64_t count, DType out_dtype,
                        absl::Span<uint8_t> out) const;
  // Columns [begin, begin + count) of every row.
  absl::Status ReadColumns(const std::string& name, int64_t begin, int64_t count, DType out_dtype,
                           absl::Span<uint8_t> out) const;
  // The rows of each segment in turn (e.g. a rank's z, x, B, C and dt rows of in_proj).
  absl::Status ReadSegments(const std::string& name, absl::Span<const RowSegment> segments,
                            DType out_dtype, absl::Span<uint8_t> out) const;

  // Convenience: a whole tensor in f32.
  absl::StatusOr<std::vector<float>> ReadF32(const std::string& name) const;

  // The stored bytes of a tensor, inside the mapping: for diagnostics and for tests that
  // check that a slice touches only its own pages.
  absl::StatusOr<absl::Span<const uint8_t>> StoredBytes(const std::string& name) const;
  // The original key, file and byte offset of a tensor ("backbone.embeddings.weight in
  // /m/model.safetensors at byte 128").
  std::string Describe(const std::string& name) const;

 private:
  absl::StatusOr<const StoredTensor*> Find(const std::string& name) const;
  absl::Status CheckOut(const StoredTensor& tensor, int64_t elements, DType out_dtype,
                        absl::Span<uint8_t> out) const;

  KeyLayout layout_;
  FileFormat format_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, StoredTensor> tensors_;  // canonical name -> stored tensor
};

// The canonical name for a key in either layout ("backbone.embeddings.weight" ->
// "embedding.weight"); a key outside both layouts is returned unchanged (and will be
// reported as unused).
std::string CanonicalTensorName(const std::string& key);

// A sharded checkpoint's model.safetensors.index.json: tensor name -> shard file name.
using ShardIndex = std::map<std::string, std::string>;

// Parses the text of an index file (`index_path` names it in errors): its "weight_map"
// object, each value a file name in the model directory (no '/', NUL, "." or "..").
// DATA_LOSS for malformed JSON or a missing weight_map, INVALID_ARGUMENT for a shard name
// that would leave the directory.
absl::StatusOr<ShardIndex> ParseSafetensorsIndex(absl::string_view text,
                                                 const std::string& index_path);

// Opens the tensor files of `model_dir`: model.safetensors.index.json (with its shards),
// model.safetensors or pytorch_model.bin, in that order of preference. Checks each file's
// format, not the tensors against a config (workers/model/model_files.h does that).
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpointFiles(const std::string& model_dir);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_CHECKPOINT_H_
