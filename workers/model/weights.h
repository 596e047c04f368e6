// Weights: how one rank reads its slices of a checkpoint's tensors into backend memory, and
// the weights of each layer kind. A WeightLoader converts what it reads to the element type
// the model computes with (matrices f32 or bf16, vectors always f32), uploads it once and
// keeps the buffers in a WeightStore; layers hold Tensor views into those buffers and never
// see the checkpoint. Which slice a rank reads follows from its ShardLayout alone.
#ifndef COIL_WORKERS_MODEL_WEIGHTS_H_
#define COIL_WORKERS_MODEL_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/tensor.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/model/model_config.h"
#include "workers/model/shard_layout.h"

namespace coil::model {

// The element type of the big matrices (projections, embedding, lm_head). Vectors (norms,
// conv, A_log, D, dt_bias) are always f32.
enum class WeightType {
  kAuto,  // bf16 when the checkpoint stores them in 16 bits (f16 is converted), else f32
  kF32,
  kBF16,
};
absl::StatusOr<WeightType> ParseWeightType(absl::string_view text);  // auto|f32|bf16

// The element type the model's matrices (and a KV cache) take for `type`: kAuto reads the
// stored type of layer 0's first matrix (bf16 for 16-bit weights, f32 for f32 ones).
absl::StatusOr<::coil::DType> ChooseWeightDType(const checkpoint::Checkpoint& checkpoint,
                                                const ModelConfig& config, WeightType type);

// The bytes of weights the rank `layout` describes holds once loaded, matrices in
// `matrix_dtype` (f32 or bf16) and vectors in f32: what Model::Load's WeightStore ends up
// with, worked out from the config and the layout alone (no tensor is read), so that a
// program can refuse a checkpoint that does not fit before loading it.
int64_t ShardWeightBytes(const ModelConfig& config, const ShardLayout& layout,
                         ::coil::DType matrix_dtype);

// Owns the backend memory of a rank's weights.
class WeightStore {
 public:
  size_t bytes() const { return bytes_; }
  // Uploads `host` and returns a view of it with `dtype` and `shape`.
  absl::StatusOr<Tensor> Upload(Backend& backend, const std::vector<uint8_t>& host,
                                ::coil::DType dtype, std::initializer_list<int64_t> shape);

 private:
  std::vector<Buffer> buffers_;
  size_t bytes_ = 0;
};

class WeightLoader {
 public:
  // `matrix_dtype` is f32 or bf16. All arguments must outlive the loader.
  WeightLoader(const checkpoint::Checkpoint& checkpoint, Backend& backend,
               ::coil::DType matrix_dtype, WeightStore& store)
      : checkpoint_(checkpoint), backend_(backend), matrix_dtype_(matrix_dtype), store_(store) {}

  ::coil::DType matrix_dtype() const { return matrix_dtype_; }
  // The rows of each segment of matrix `name`, in turn: [sum of counts, cols].
  absl::StatusOr<Tensor> MatrixRows(const std::string& name,
                                    absl::Span<const checkpoint::RowSegment> segments,
                                    int64_t cols);
  // Row segments of several matrices stacked in turn ([sum of counts, cols]): one matrix
  // where the model computes several projections of the same input in one matmul.
  absl::StatusOr<Tensor> StackedRows(
      const std::vector<std::pair<std::string, checkpoint::RowSegment>>& parts, int64_t cols);
  // Columns [begin, begin + count) of every row of matrix `name` (`rows` rows).
  absl::StatusOr<Tensor> MatrixColumns(const std::string& name, int64_t rows, int64_t begin,
                                       int64_t count);
  // The rows of each segment as f32 [sum of counts, cols] (conv weights: small, kept f32).
  absl::StatusOr<Tensor> F32Rows(const std::string& name,
                                 absl::Span<const checkpoint::RowSegment> segments,
                                 int64_t cols);
  // The elements of each segment of vector `name` as f32 [count].
  absl::StatusOr<Tensor> Vector(const std::string& name,
                                absl::Span<const checkpoint::RowSegment> segments,
                                int64_t count);
  // A whole vector of `count` f32 elements.
  absl::StatusOr<Tensor> WholeVector(const std::string& name, int64_t count);
  // f32 zeros [count] (a bias the checkpoint does not have).
  absl::StatusOr<Tensor> Zeros(int64_t count);

 private:
  absl::StatusOr<std::vector<uint8_t>> ReadRows(const std::string& name,
                                                absl::Span<const checkpoint::RowSegment> segments,
                                                int64_t cols, ::coil::DType dtype);

  const checkpoint::Checkpoint& checkpoint_;
  Backend& backend_;
  ::coil::DType matrix_dtype_;
  WeightStore& store_;
};

// The canonical name of layer `layer`'s tensor `suffix` ("layers.3.mixer.in_proj.weight").
std::string LayerTensorName(int64_t layer, absl::string_view suffix);

// A Mamba2 mixer's slices on one rank (ShardLayout: its heads and the groups they read).
struct Mamba2Weights {
  Tensor in_proj;      // [in_proj_rows, D]: z | x | B | C | dt of this rank
  Tensor conv_weight;  // f32 [conv_channels, d_conv]: x | B | C channels
  Tensor conv_bias;    // f32 [conv_channels] (zeros without a conv bias)
  Tensor dt_bias;      // f32 [heads]
  Tensor a_log;        // f32 [heads]
  Tensor d;            // f32 [heads]
  Tensor norm;         // f32 [d_inner]: the gated RMSNorm's weight
  Tensor out_proj;     // [D, d_inner]: the columns of this rank's heads
};
absl::StatusOr<Mamba2Weights> LoadMamba2Weights(WeightLoader& loader, const ModelConfig& config,
                                                const ShardLayout& layout, int64_t layer);

// An attention block's slices: this rank's query heads and the KV heads they read.
struct AttentionWeights {
  Tensor qkv;     // [(q_heads + 2 kv_heads) * head_dim, D]: q_proj's rows, k_proj's, v_proj's
  Tensor o_proj;  // [D, q_heads * head_dim]: the columns of this rank's query heads
};
absl::StatusOr<AttentionWeights> LoadAttentionWeights(WeightLoader& loader,
                                                      const ModelConfig& config,
                                                      const ShardLayout& layout, int64_t layer);

// An MLP block's slices: up_proj column-parallel, down_proj row-parallel.
struct MlpWeights {
  Tensor up;    // [mlp_width, D]: this rank's rows of up_proj
  Tensor down;  // [D, mlp_width]: the matching columns of down_proj
};
absl::StatusOr<MlpWeights> LoadMlpWeights(WeightLoader& loader, const ModelConfig& config,
                                          const ShardLayout& layout, int64_t layer);

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_WEIGHTS_H_
