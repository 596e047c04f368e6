// KvCache: the K and V of every attention layer of this rank, in pages of block_size tokens
// (the pages the scheduler's KV budget counts: page i holds those tokens for every layer),
// plus one scratch page (index `pages`) that padding entries of a CUDA-graph batch may write
// and nobody reads. In the backend's memory, f32 or bf16 (a bf16 model keeps bf16 K/V),
// zeroed at creation. Layout, for K and for V alike:
//   [layers, pages + 1, block_size, kv_heads, head_dim]
// where kv_heads are this rank's KV heads; a layer's view is contiguous.
#ifndef COIL_KERNELS_KV_CACHE_H_
#define COIL_KERNELS_KV_CACHE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/tensor.h"

namespace coil {

struct KvCacheShape {
  int64_t layers = 0;      // this rank's attention layers
  int64_t pages = 0;       // pages usable by sequences; the cache holds one more (scratch)
  int64_t block_size = 0;  // tokens per page
  int64_t kv_heads = 0;    // this rank's KV heads
  int64_t head_dim = 0;
  DType dtype = DType::kF32;  // f32 or bf16

  int64_t elements_per_page() const { return block_size * kv_heads * head_dim; }
  // Bytes of K and V one page holds over all layers: what a page of the budget costs.
  int64_t bytes_per_page() const {
    return 2 * layers * elements_per_page() * static_cast<int64_t>(DTypeSize(dtype));
  }
  // Bytes of K and V one token holds over all layers (what a decode step reads per token
  // of context).
  int64_t bytes_per_token() const {
    return 2 * layers * kv_heads * head_dim * static_cast<int64_t>(DTypeSize(dtype));
  }
};

class KvCache {
 public:
  // Allocates K and V for (layers x (pages + 1)) pages in `backend`'s memory; INVALID_ARGUMENT
  // naming the bad size, RESOURCE_EXHAUSTED when the memory is not there.
  static absl::StatusOr<KvCache> Create(Backend& backend, const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  int64_t pages() const { return shape_.pages; }
  int64_t scratch_page() const { return shape_.pages; }
  int64_t block_size() const { return shape_.block_size; }
  // [pages + 1, block_size, kv_heads, head_dim] for `layer` (0-based among attention layers).
  Tensor KCache(int64_t layer) const;
  Tensor VCache(int64_t layer) const;
  size_t bytes() const { return k_.bytes() + v_.bytes(); }

 private:
  KvCache(const KvCacheShape& shape, Device device, Buffer k, Buffer v)
      : shape_(shape), device_(device), k_(std::move(k)), v_(std::move(v)) {}
  Tensor View(const Buffer& buffer, int64_t layer) const;

  KvCacheShape shape_;
  Device device_;
  Buffer k_;
  Buffer v_;
};

}  // namespace coil

#endif  // COIL_KERNELS_KV_CACHE_H_
