#include "workers/model/shard_layout.h"

#include "absl/strings/str_cat.h"

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

}  // namespace coil::model
