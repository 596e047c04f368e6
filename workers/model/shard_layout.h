// ShardLayout: which part of a Mamba2 model one tensor-parallel rank holds
// (docs/ARCHITECTURE.md §5).
// tp must divide nheads: each rank holds
// nheads / tp consecutive heads, with the B/C groups those heads read (a group may be shared
// by neighbouring ranks when ngroups % tp != 0), and a contiguous near-equal range of the
// padded vocabulary. Everything a rank loads and allocates follows from this one struct.
#ifndef COIL_WORKERS_MODEL_SHARD_LAYOUT_H_
#define COIL_WORKERS_MODEL_SHARD_LAYOUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/state_pool.h"
#include "workers/model/model_config.h"
#include "workers/vocab_partition.h"

namespace coil::model {

struct ShardLayout {
  int tp_size = 1;
  int rank = 0;
  int64_t head_begin = 0;  // this rank's heads: [head_begin, head_end)
  int64_t head_end = 0;
  int64_t group_begin = 0;  // the groups those heads read: [group_begin, group_end)
  int64_t group_end = 0;
  int64_t heads_per_group = 0;
  int64_t headdim = 0;
  int64_t d_state = 0;
  VocabRange vocab;

  int64_t heads() const { return head_end - head_begin; }
  int64_t groups() const { return group_end - group_begin; }
  int64_t d_inner() const { return heads() * headdim; }  // local z / x / y width
  int64_t bc_width() const { return groups() * d_state; }   // local B (and C) width
  int64_t conv_channels() const { return d_inner() + 2 * bc_width(); }
  int64_t in_proj_rows() const { return 2 * d_inner() + 2 * bc_width() + heads(); }
  // True when every local group's heads are all on this rank: the gated norm then needs
  // no all-reduce.
  bool groups_whole() const {
    return head_begin % heads_per_group == 0 && head_end % heads_per_group == 0;
  }
  // The position of local head 0 inside its group (0 when groups are whole).
  int64_t first_head_in_group() const { return head_begin % heads_per_group; }
};

// INVALID_ARGUMENT naming the TP size when it does not divide the heads.
absl::StatusOr<ShardLayout> MakeShardLayout(const ModelConfig& config, int tp_size, int rank);

// The state pool of `state_rows` sequences for the rank `layout` describes.
StatePoolShape ShardStateShape(const ModelConfig& config, const ShardLayout& layout,
                               int64_t state_rows);

// The most state bytes one sequence takes on any rank at TP `tp_size` (every rank sizes its
// pool for the same rows, so the largest shard decides how many fit a budget).
absl::StatusOr<int64_t> MaxStateBytesPerSequence(const ModelConfig& config, int tp_size);

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_SHARD_LAYOUT_H_
