#include "workers/model/shard_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::model {

absl::StatusOr<ShardLayout> MakeShardLayout(const ModelConfig& config, int tp_size, int rank) {
  const auto divides = [&](const char* what, int64_t count) -> absl::Status {
    if (tp_size >= 1 && count % tp_size == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("the tensor-parallel size (mpirun -np) is ",
                                                   tp_size, " but the model has ", count, " ", what,
                                                   "; use a size that divides ", count));
  };
  const int64_t nheads = config.nheads();
  if (config.num_layers(LayerKind::kMamba2) > 0) COIL_RETURN_IF_ERROR(divides("heads", nheads));
  if (config.has_attention()) {
    COIL_RETURN_IF_ERROR(divides("attention heads (num_attention_heads)", config.attention_heads));
  }
  if (config.num_layers(LayerKind::kMlp) > 0) {
    COIL_RETURN_IF_ERROR(divides("MLP features (intermediate_size)", config.intermediate_size));
  }
  if (rank < 0 || rank >= tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ", tp_size, ")"));
  }
  ShardLayout layout;
  layout.tp_size = tp_size;
  layout.rank = rank;
  const int64_t per_rank = nheads / tp_size;
  layout.head_begin = rank * per_rank;
  layout.head_end = layout.head_begin + per_rank;
  layout.heads_per_group = nheads / config.ngroups;
  layout.group_begin = layout.head_begin / layout.heads_per_group;
  layout.group_end = (layout.head_end - 1) / layout.heads_per_group + 1;
  layout.headdim = config.headdim;
  layout.d_state = config.d_state;
  layout.vocab = PartitionVocab(static_cast<int32_t>(config.padded_vocab_size()), tp_size, rank);
  if (config.has_attention()) {
    const int64_t q_per_rank = config.attention_heads / tp_size;
    layout.q_per_kv = config.attention_heads / config.kv_heads;
    layout.q_head_begin = rank * q_per_rank;
    layout.q_head_end = layout.q_head_begin + q_per_rank;
    // Split evenly when tp divides them; else the KV heads this rank's query heads read
    // (the same heads: with even splitting every rank's query heads read exactly its own).
    layout.kv_head_begin = layout.q_head_begin / layout.q_per_kv;
    layout.kv_head_end = (layout.q_head_end - 1) / layout.q_per_kv + 1;
    layout.attention_head_dim = config.attention_head_dim;
  }
  if (config.num_layers(LayerKind::kMlp) > 0) {
    const int64_t per = config.intermediate_size / tp_size;
    layout.mlp_begin = rank * per;
    layout.mlp_end = layout.mlp_begin + per;
  }
  return layout;
}

StatePoolShape ShardStateShape(const ModelConfig& config, const ShardLayout& layout,
                               int64_t state_rows, DType ssm_dtype) {
  StatePoolShape shape;
  shape.layers = config.num_layers(LayerKind::kMamba2);
  shape.state_rows = state_rows;
  shape.d_conv = config.d_conv;
  shape.conv_channels = layout.conv_channels();
  shape.heads = layout.heads();
  shape.headdim = config.headdim;
  shape.d_state = config.d_state;
  shape.ssm_dtype = ssm_dtype;
  return shape;
}

absl::StatusOr<int64_t> MaxStateBytesPerSequence(const ModelConfig& config, int tp_size,
                                                 DType ssm_dtype) {
  int64_t most = 0;
  for (int rank = 0; rank < tp_size; ++rank) {
    COIL_ASSIGN_OR_RETURN(const ShardLayout layout, MakeShardLayout(config, tp_size, rank));
    most = std::max(most, ShardStateShape(config, layout, 1, ssm_dtype).bytes_per_sequence());
  }
  return most;
}

}  // namespace coil::model

namespace coil::model {

KvCacheShape ShardKvShape(const ModelConfig& config, const ShardLayout& layout, int64_t pages,
                          int64_t block_size, DType dtype) {
  KvCacheShape shape;
  const int64_t layers = config.num_layers(LayerKind::kAttention);
  const bool whole = layers == 0 || layout.kv_groups_whole();
  shape.layers = whole ? layers : layers * layout.kv_heads();
  shape.pages = pages;
  shape.block_size = block_size;
  shape.kv_heads = whole ? layout.kv_heads() : 1;
  shape.head_dim = layout.attention_head_dim;
  shape.dtype = dtype;
  return shape;
}

absl::StatusOr<int64_t> MaxKvBytesPerPage(const ModelConfig& config, int tp_size,
                                          int64_t block_size, DType dtype) {
  int64_t most = 0;
  if (!config.has_attention()) return most;
  for (int rank = 0; rank < tp_size; ++rank) {
    COIL_ASSIGN_OR_RETURN(const ShardLayout layout, MakeShardLayout(config, tp_size, rank));
    most = std::max(most, ShardKvShape(config, layout, 1, block_size, dtype).bytes_per_page());
  }
  return most;
}

}  // namespace coil::model
