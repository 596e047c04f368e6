#include "workers/model/attention_layer.h"

#include <cmath>
#include <utility>

namespace coil::model {

AttentionLayer::AttentionLayer(AttentionWeights weights, const ShardLayout& layout,
                               int64_t cache_index, bool bf16_rows)
    : w_(std::move(weights)),
      layout_(layout),
      cache_index_(cache_index),
      bf16_rows_(bf16_rows),
      scale_(static_cast<float>(1.0 / std::sqrt(static_cast<double>(layout.attention_head_dim)))) {}

ScratchWidths AttentionLayer::scratch() const {
  ScratchWidths widths;
  const int64_t q_width = layout_.q_heads() * layout_.attention_head_dim;
  widths.a = layout_.qkv_width();  // q | k | v
  widths.c = q_width;              // the attention's output with f32 weights
  widths.rows16 = q_width;         // o_proj's input with bf16 weights
  return widths;
}

void AttentionLayer::Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
                             const Tensor& out) const {
  Backend& backend = ctx.backend();
  const Device device = backend.device();
  const int64_t rows = step.rows, dh = layout_.attention_head_dim;
  const int64_t q_width = layout_.q_heads() * dh, kv_width = layout_.kv_heads() * dh;
  const Tensor qkv(step.scratch.a, ::coil::DType::kF32, {rows, layout_.qkv_width()}, device);
  const Tensor q = qkv.Columns(0, q_width);
  const Tensor k = qkv.Columns(q_width, kv_width);
  const Tensor v = qkv.Columns(q_width + kv_width, kv_width);
  const Tensor attended =
      bf16_rows_ ? Tensor(step.scratch.rows16, ::coil::DType::kBF16, {rows, q_width}, device)
                 : Tensor(step.scratch.c, ::coil::DType::kF32, {rows, q_width}, device);
  const KvCache& cache = *step.kv_cache;
  const PagedKvBatch& batch = *step.kv;

  ctx.Run([&] { return backend.Matmul(x, w_.qkv, qkv); });
  if (layout_.kv_groups_whole()) {
    const Tensor k_cache = cache.KCache(cache_index_), v_cache = cache.VCache(cache_index_);
    ctx.Run([&] { return backend.KvCacheWrite(k, v, batch, k_cache, v_cache); });
    ctx.Run([&] { return backend.PagedAttention(q, k_cache, v_cache, batch, scale_, attended); });
  } else {
    // Query heads straddle KV groups here: each local KV head has a cache layer of its own
    // (ShardKvShape), written from its columns of k and v and read by its query heads alone.
    const int64_t kv_heads = layout_.kv_heads();
    int64_t h = 0;
    for (int64_t j = 0; j < kv_heads; ++j) {
      const int64_t first = h;
      while (h < layout_.q_heads() && layout_.kv_head_of(h) == j) ++h;
      const Tensor k_cache = cache.KCache(cache_index_ * kv_heads + j);
      const Tensor v_cache = cache.VCache(cache_index_ * kv_heads + j);
      ctx.Run([&] {
        return backend.KvCacheWrite(k.Columns(j * dh, dh), v.Columns(j * dh, dh), batch, k_cache,
                                    v_cache);
      });
      ctx.Run([&] {
        return backend.PagedAttention(q.Columns(first * dh, (h - first) * dh), k_cache, v_cache,
                                      batch, scale_,
                                      attended.Columns(first * dh, (h - first) * dh));
      });
    }
  }
  ctx.Run([&] { return backend.Matmul(attended, w_.o_proj, out); });
}

}  // namespace coil::model
