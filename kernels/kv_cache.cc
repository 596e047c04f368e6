#include "kernels/kv_cache.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil {

absl::StatusOr<KvCache> KvCache::Create(Backend& backend, const KvCacheShape& shape) {
  if (shape.layers <= 0 || shape.pages <= 0 || shape.block_size <= 0 || shape.kv_heads <= 0 ||
      shape.head_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache shape (layers ", shape.layers, ", pages ", shape.pages,
                     ", block_size ", shape.block_size, ", kv_heads ", shape.kv_heads,
                     ", head_dim ", shape.head_dim, ") is invalid; every size must be positive"));
  }
  if (shape.dtype != DType::kF32 && shape.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache dtype ", DTypeName(shape.dtype),
                                                   " is not supported; use f32 or bf16"));
  }
  // Page ids are int32 in the batch; offsets into a layer are 64-bit everywhere.
  if (shape.pages >= std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV cache has ", shape.pages, " pages; page ids are int32, so use fewer"));
  }
  const int64_t elements = shape.layers * (shape.pages + 1) * shape.elements_per_page();
  const size_t bytes = static_cast<size_t>(elements) * DTypeSize(shape.dtype);
  COIL_ASSIGN_OR_RETURN(Buffer k, backend.Allocate(bytes));
  COIL_ASSIGN_OR_RETURN(Buffer v, backend.Allocate(bytes));
  return KvCache(shape, backend.device(), std::move(k), std::move(v));
}

Tensor KvCache::View(const Buffer& buffer, int64_t layer) const {
  COIL_CHECK(layer >= 0 && layer < shape_.layers);
  const int64_t layer_elements = (shape_.pages + 1) * shape_.elements_per_page();
  char* base = static_cast<char*>(buffer.data()) +
               layer * layer_elements * static_cast<int64_t>(DTypeSize(shape_.dtype));
  return Tensor(base, shape_.dtype,
                {shape_.pages + 1, shape_.block_size, shape_.kv_heads, shape_.head_dim}, device_);
}

Tensor KvCache::KCache(int64_t layer) const { return View(k_, layer); }
Tensor KvCache::VCache(int64_t layer) const { return View(v_, layer); }

}  // namespace coil
