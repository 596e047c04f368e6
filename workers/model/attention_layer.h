// AttentionLayer: Nemotron-H's attention block, causal grouped-query attention with no
// positional encoding:
//   [q | k | v] = x W_qkv^T (q_proj, k_proj and v_proj stacked: one matmul);
//   K, V written into the sequence's pages (KvCacheWrite);
//   o = softmax(q k^T / sqrt(head_dim)) v over the sequence's positions so far, query head h
//   reading KV head h / (heads / kv_heads) (PagedAttention); out = o W_o^T
// on this rank's query heads and the KV heads they read (ShardLayout); o_proj is
// row-parallel, so `out` is this rank's share of the sum the model all-reduces. Its K and V
// live in the step's KvCache at its own index among the attention layers: one cache layer
// when the local query heads are whole KV groups (one call of each op), else one cache layer
// per local KV head, each KV head's query heads attending in a call of their own.
#ifndef COIL_WORKERS_MODEL_ATTENTION_LAYER_H_
#define COIL_WORKERS_MODEL_ATTENTION_LAYER_H_

#include <cstdint>

#include "workers/model/layer.h"
#include "workers/model/model_config.h"
#include "workers/model/shard_layout.h"
#include "workers/model/weights.h"

namespace coil::model {

class AttentionLayer final : public Layer {
 public:
  // `cache_index`: this layer's index among the model's attention layers. `bf16_rows`: the
  // matmuls take bf16 rows (bf16 weights), so attention writes o_proj's input as bf16.
  AttentionLayer(AttentionWeights weights, const ShardLayout& layout, int64_t cache_index,
                 bool bf16_rows);

  LayerKind kind() const override { return LayerKind::kAttention; }
  ScratchWidths scratch() const override;
  void Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
               const Tensor& out) const override;

 private:
  AttentionWeights w_;
  ShardLayout layout_;
  int64_t cache_index_;
  bool bf16_rows_;
  float scale_;  // 1 / sqrt(head_dim)
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_ATTENTION_LAYER_H_
