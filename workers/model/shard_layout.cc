#include "workers/model/shard_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::model {

absl::StatusOr<ShardLayout> MakeShardLayout(const ModelConfig& config, int tp_size, int rank) {
  const int64_t nheads = config.nheads();
  if (tp_size < 1 || nheads % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tensor-parallel size (mpirun -np) is ", tp_size, " but the model has ", nheads,
        " heads; use a size that divides ", nheads));
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
  return layout;
}

StatePoolShape ShardStateShape(const ModelConfig& config, const ShardLayout& layout,
                               int64_t state_rows) {
  StatePoolShape shape;
  shape.layers = config.num_layers(LayerKind::kMamba2);
  shape.state_rows = state_rows;
  shape.d_conv = config.d_conv;
  shape.conv_channels = layout.conv_channels();
  shape.heads = layout.heads();
  shape.headdim = config.headdim;
  shape.d_state = config.d_state;
  return shape;
}

absl::StatusOr<int64_t> MaxStateBytesPerSequence(const ModelConfig& config, int tp_size) {
  int64_t most = 0;
  for (int rank = 0; rank < tp_size; ++rank) {
    COIL_ASSIGN_OR_RETURN(const ShardLayout layout, MakeShardLayout(config, tp_size, rank));
    most = std::max(most, ShardStateShape(config, layout, 1).bytes_per_sequence());
  }
  return most;
}

}  // namespace coil::model
