#include "workers/model/weights.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::model {
namespace {

using checkpoint::RowSegment;

// The checkpoint readers' element type for a kernel dtype.
checkpoint::DType ToStoredType(::coil::DType dtype) {
  switch (dtype) {
    case ::coil::DType::kBF16: return checkpoint::DType::kBF16;
    case ::coil::DType::kF16: return checkpoint::DType::kF16;
    default: return checkpoint::DType::kF32;
  }
}

int64_t RowCount(absl::Span<const RowSegment> segments) {
  int64_t rows = 0;
  for (const RowSegment& segment : segments) rows += segment.count;
  return rows;
}

}  // namespace

absl::StatusOr<WeightType> ParseWeightType(absl::string_view text) {
  if (text == "auto") return WeightType::kAuto;
  if (text == "f32") return WeightType::kF32;
  if (text == "bf16") return WeightType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("weight type '", text, "' is not one of auto, f32, bf16"));
}

std::string LayerTensorName(int64_t layer, absl::string_view suffix) {
  return absl::StrCat("layers.", layer, ".", suffix);
}

absl::StatusOr<::coil::DType> ChooseWeightDType(const checkpoint::Checkpoint& checkpoint,
                                                const ModelConfig& config, WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return ::coil::DType::kF32;
    case WeightType::kBF16:
      return ::coil::DType::kBF16;
    case WeightType::kAuto:
      break;
  }
  const char* first = "mixer.in_proj.weight";
  if (config.layer_kind(0) == LayerKind::kAttention) first = "mixer.q_proj.weight";
  if (config.layer_kind(0) == LayerKind::kMlp) first = "mixer.up_proj.weight";
  COIL_ASSIGN_OR_RETURN(const checkpoint::TensorInfo info,
                        checkpoint.Info(LayerTensorName(0, first)));
  return info.dtype == checkpoint::DType::kF32 ? ::coil::DType::kF32 : ::coil::DType::kBF16;
}

int64_t ShardWeightBytes(const ModelConfig& c, const ShardLayout& s, ::coil::DType matrix_dtype) {
  // Follows Model::LoadWeights and the Load*Weights functions below, tensor by tensor.
  const int64_t m = static_cast<int64_t>(DTypeSize(matrix_dtype));
  const int64_t f32 = 4;
  const int64_t d = c.d_model;
  const int64_t vocab = s.vocab.size();
  int64_t bytes = vocab * d * m * (c.tie_embeddings ? 1 : 2);  // embedding, lm_head
  bytes += d * f32;                                            // norm_f
  for (int64_t l = 0; l < c.n_layer; ++l) {
    bytes += d * f32;  // the block's norm
    switch (c.layer_kind(l)) {
      case LayerKind::kMamba2:
        bytes += s.in_proj_rows() * d * m;                  // in_proj
        bytes += s.conv_channels() * (c.d_conv + 1) * f32;  // conv1d weight and bias
        bytes += 3 * s.heads() * f32 + s.d_inner() * f32;   // dt_bias, A_log, D; norm
        bytes += d * s.d_inner() * m;                       // out_proj
        break;
      case LayerKind::kAttention:
        bytes += s.qkv_width() * d * m;                       // q, k, v
        bytes += d * s.q_heads() * c.attention_head_dim * m;  // o_proj
        break;
      case LayerKind::kMlp:
        bytes += 2 * s.mlp_width() * d * m;  // up_proj, down_proj
        break;
    }
  }
  return bytes;
}

absl::StatusOr<Tensor> WeightStore::Upload(Backend& backend, const std::vector<uint8_t>& host,
                                           ::coil::DType dtype,
                                           std::initializer_list<int64_t> shape) {
  COIL_ASSIGN_OR_RETURN(Buffer buffer, backend.Allocate(host.size()));
  COIL_RETURN_IF_ERROR(backend.CopyFromHost(buffer.data(), host.data(), host.size()));
  Tensor tensor(buffer.data(), dtype, shape, backend.device());
  bytes_ += host.size();
  buffers_.push_back(std::move(buffer));
  return tensor;
}

absl::StatusOr<std::vector<uint8_t>> WeightLoader::ReadRows(
    const std::string& name, absl::Span<const RowSegment> segments, int64_t cols,
    ::coil::DType dtype) {
  std::vector<uint8_t> host(static_cast<size_t>(RowCount(segments) * cols) * DTypeSize(dtype));
  COIL_RETURN_IF_ERROR(
      checkpoint_.ReadSegments(name, segments, ToStoredType(dtype), absl::MakeSpan(host)));
  return host;
}

absl::StatusOr<Tensor> WeightLoader::MatrixRows(const std::string& name,
                                                absl::Span<const RowSegment> segments,
                                                int64_t cols) {
  COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host, ReadRows(name, segments, cols, matrix_dtype_));
  return store_.Upload(backend_, host, matrix_dtype_, {RowCount(segments), cols});
}

absl::StatusOr<Tensor> WeightLoader::StackedRows(
    const std::vector<std::pair<std::string, RowSegment>>& parts, int64_t cols) {
  std::vector<uint8_t> host;
  int64_t rows = 0;
  for (const auto& [name, segment] : parts) {
    COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> part,
                          ReadRows(name, {&segment, 1}, cols, matrix_dtype_));
    host.insert(host.end(), part.begin(), part.end());
    rows += segment.count;
  }
  return store_.Upload(backend_, host, matrix_dtype_, {rows, cols});
}

absl::StatusOr<Tensor> WeightLoader::MatrixColumns(const std::string& name, int64_t rows,
                                                   int64_t begin, int64_t count) {
  std::vector<uint8_t> host(static_cast<size_t>(rows * count) * DTypeSize(matrix_dtype_));
  COIL_RETURN_IF_ERROR(checkpoint_.ReadColumns(name, begin, count, ToStoredType(matrix_dtype_),
                                               absl::MakeSpan(host)));
  return store_.Upload(backend_, host, matrix_dtype_, {rows, count});
}

absl::StatusOr<Tensor> WeightLoader::F32Rows(const std::string& name,
                                             absl::Span<const RowSegment> segments,
                                             int64_t cols) {
  COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host,
                        ReadRows(name, segments, cols, ::coil::DType::kF32));
  return store_.Upload(backend_, host, ::coil::DType::kF32, {RowCount(segments), cols});
}

absl::StatusOr<Tensor> WeightLoader::Vector(const std::string& name,
                                            absl::Span<const RowSegment> segments,
                                            int64_t count) {
  COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host, ReadRows(name, segments, 1, ::coil::DType::kF32));
  return store_.Upload(backend_, host, ::coil::DType::kF32, {count});
}

absl::StatusOr<Tensor> WeightLoader::WholeVector(const std::string& name, int64_t count) {
  const RowSegment all{0, count};
  return Vector(name, {&all, 1}, count);
}

absl::StatusOr<Tensor> WeightLoader::Zeros(int64_t count) {
  return store_.Upload(backend_, std::vector<uint8_t>(static_cast<size_t>(count) * 4, 0),
                       ::coil::DType::kF32, {count});
}

absl::StatusOr<Mamba2Weights> LoadMamba2Weights(WeightLoader& loader, const ModelConfig& c,
                                                const ShardLayout& s, int64_t layer) {
  const int64_t d = c.d_model, e_all = c.d_inner(), n = c.d_state, g_all = c.ngroups;
  const int64_t p = c.headdim;
  // in_proj rows and conv channels of this rank: z, x and dt by heads; B and C by groups.
  const RowSegment z_rows{s.head_begin * p, s.d_inner()};
  const RowSegment x_rows{e_all + s.head_begin * p, s.d_inner()};
  const RowSegment b_rows{2 * e_all + s.group_begin * n, s.bc_width()};
  const RowSegment c_rows{2 * e_all + g_all * n + s.group_begin * n, s.bc_width()};
  const RowSegment dt_rows{2 * e_all + 2 * g_all * n + s.head_begin, s.heads()};
  const RowSegment in_proj_segments[] = {z_rows, x_rows, b_rows, c_rows, dt_rows};
  // conv1d convolves [x | B | C] of d_inner + 2 * ngroups * d_state channels.
  const RowSegment conv_segments[] = {{s.head_begin * p, s.d_inner()},
                                      {e_all + s.group_begin * n, s.bc_width()},
                                      {e_all + g_all * n + s.group_begin * n, s.bc_width()}};
  const RowSegment head_rows{s.head_begin, s.heads()};
  const RowSegment inner_rows{s.head_begin * p, s.d_inner()};

  Mamba2Weights w;
  COIL_ASSIGN_OR_RETURN(w.in_proj, loader.MatrixRows(LayerTensorName(layer, "mixer.in_proj.weight"),
                                                     in_proj_segments, d));
  COIL_ASSIGN_OR_RETURN(w.conv_weight,
                        loader.F32Rows(LayerTensorName(layer, "mixer.conv1d.weight"),
                                       conv_segments, c.d_conv));
  if (c.conv_bias) {
    COIL_ASSIGN_OR_RETURN(w.conv_bias, loader.Vector(LayerTensorName(layer, "mixer.conv1d.bias"),
                                                     conv_segments, s.conv_channels()));
  } else {
    COIL_ASSIGN_OR_RETURN(w.conv_bias, loader.Zeros(s.conv_channels()));
  }
  COIL_ASSIGN_OR_RETURN(w.dt_bias, loader.Vector(LayerTensorName(layer, "mixer.dt_bias"),
                                                 {&head_rows, 1}, s.heads()));
  COIL_ASSIGN_OR_RETURN(w.a_log, loader.Vector(LayerTensorName(layer, "mixer.A_log"),
                                               {&head_rows, 1}, s.heads()));
  COIL_ASSIGN_OR_RETURN(w.d, loader.Vector(LayerTensorName(layer, "mixer.D"), {&head_rows, 1},
                                           s.heads()));
  COIL_ASSIGN_OR_RETURN(w.norm, loader.Vector(LayerTensorName(layer, "mixer.norm.weight"),
                                              {&inner_rows, 1}, s.d_inner()));
  COIL_ASSIGN_OR_RETURN(w.out_proj,
                        loader.MatrixColumns(LayerTensorName(layer, "mixer.out_proj.weight"), d,
                                             s.head_begin * p, s.d_inner()));
  return w;
}

absl::StatusOr<AttentionWeights> LoadAttentionWeights(WeightLoader& loader, const ModelConfig& c,
                                                      const ShardLayout& s, int64_t layer) {
  const int64_t d = c.d_model, dh = c.attention_head_dim;
  const RowSegment q_rows{s.q_head_begin * dh, s.q_heads() * dh};
  const RowSegment kv_rows{s.kv_head_begin * dh, s.kv_heads() * dh};
  AttentionWeights w;
  COIL_ASSIGN_OR_RETURN(
      w.qkv, loader.StackedRows({{LayerTensorName(layer, "mixer.q_proj.weight"), q_rows},
                                 {LayerTensorName(layer, "mixer.k_proj.weight"), kv_rows},
                                 {LayerTensorName(layer, "mixer.v_proj.weight"), kv_rows}},
                                d));
  COIL_ASSIGN_OR_RETURN(w.o_proj,
                        loader.MatrixColumns(LayerTensorName(layer, "mixer.o_proj.weight"), d,
                                             s.q_head_begin * dh, s.q_heads() * dh));
  return w;
}

absl::StatusOr<MlpWeights> LoadMlpWeights(WeightLoader& loader, const ModelConfig& c,
                                          const ShardLayout& s, int64_t layer) {
  const RowSegment rows{s.mlp_begin, s.mlp_width()};
  MlpWeights w;
  COIL_ASSIGN_OR_RETURN(w.up, loader.MatrixRows(LayerTensorName(layer, "mixer.up_proj.weight"),
                                                {&rows, 1}, c.d_model));
  COIL_ASSIGN_OR_RETURN(
      w.down, loader.MatrixColumns(LayerTensorName(layer, "mixer.down_proj.weight"), c.d_model,
                                   s.mlp_begin, s.mlp_width()));
  return w;
}

}  // namespace coil::model
