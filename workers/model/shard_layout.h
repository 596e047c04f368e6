// ShardLayout: which part of a model one tensor-parallel rank holds (docs/ARCHITECTURE.md
// §5). Mamba2 blocks: tp must divide nheads; each rank holds nheads / tp consecutive heads,
// with the B/C groups those heads read (a group may be shared by neighbouring ranks when
// ngroups % tp != 0). Attention blocks: tp must divide the query heads; each rank holds
// heads / tp consecutive query heads and the KV heads they read: kv_heads / tp of them when
// tp divides the KV heads, else every KV head one of its query heads reads (neighbouring
// ranks may then share one). MLP blocks: tp must divide intermediate_size; each rank holds
// a contiguous 1/tp of it (up_proj's rows, down_proj's columns). Embedding and lm_head: a
// contiguous near-equal range of the padded vocabulary. Everything a rank loads and
// allocates follows from this one struct.
#ifndef COIL_WORKERS_MODEL_SHARD_LAYOUT_H_
#define COIL_WORKERS_MODEL_SHARD_LAYOUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kv_cache.h"
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
  // Attention blocks (all 0 without them): the query heads [q_head_begin, q_head_end), the KV
  // heads [kv_head_begin, kv_head_end) they read, global query heads per KV head.
  int64_t q_head_begin = 0;
  int64_t q_head_end = 0;
  int64_t kv_head_begin = 0;
  int64_t kv_head_end = 0;
  int64_t q_per_kv = 0;
  int64_t attention_head_dim = 0;
  // MLP blocks (0 without them): this rank's intermediate features [mlp_begin, mlp_end).
  int64_t mlp_begin = 0;
  int64_t mlp_end = 0;

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

  int64_t q_heads() const { return q_head_end - q_head_begin; }
  int64_t kv_heads() const { return kv_head_end - kv_head_begin; }
  // q, k and v of this rank side by side: the width of the fused qkv projection's output.
  int64_t qkv_width() const { return (q_heads() + 2 * kv_heads()) * attention_head_dim; }
  // True when local query head h reads local KV head h / (q_heads() / kv_heads()), the map
  // PagedAttention takes: the local query heads are whole KV groups, or all read one KV head.
  bool kv_groups_whole() const {
    return kv_heads() == 1 || (q_head_begin % q_per_kv == 0 && q_head_end % q_per_kv == 0);
  }
  // The local KV head local query head h reads.
  int64_t kv_head_of(int64_t h) const { return (q_head_begin + h) / q_per_kv - kv_head_begin; }
  int64_t mlp_width() const { return mlp_end - mlp_begin; }
};

// INVALID_ARGUMENT naming the TP size and the field it does not divide (the Mamba2 heads,
// the attention heads, the MLP's intermediate size).
absl::StatusOr<ShardLayout> MakeShardLayout(const ModelConfig& config, int tp_size, int rank);

// The state pool of `state_rows` sequences for the rank `layout` describes, its SSM state
// of `ssm_dtype` (f32 or bf16).
StatePoolShape ShardStateShape(const ModelConfig& config, const ShardLayout& layout,
                               int64_t state_rows, DType ssm_dtype = DType::kF32);

// The most state bytes one sequence takes on any rank at TP `tp_size` (every rank sizes its
// pool for the same rows, so the largest shard decides how many fit a budget).
absl::StatusOr<int64_t> MaxStateBytesPerSequence(const ModelConfig& config, int tp_size,
                                                 DType ssm_dtype = DType::kF32);

// The KV cache of `pages` pages of `block_size` tokens for the rank `layout` describes, K/V
// kept in `dtype` (bf16 for a bf16 model). Where the local query heads are whole KV groups
// a cache layer holds one attention layer's local KV heads; where they are not, each local
// KV head of each attention layer gets a cache layer of its own (one KV head wide), so that
// attention runs once per KV head on the query heads that read it. The bytes per page are
// the same either way: 2 * attention layers * block_size * local KV heads * head_dim.
KvCacheShape ShardKvShape(const ModelConfig& config, const ShardLayout& layout, int64_t pages,
                          int64_t block_size, DType dtype);

// The most KV bytes one page takes on any rank at TP `tp_size` (0 without attention).
absl::StatusOr<int64_t> MaxKvBytesPerPage(const ModelConfig& config, int tp_size,
                                          int64_t block_size, DType dtype);

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_SHARD_LAYOUT_H_
