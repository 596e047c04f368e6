// The pool of KV pages for attention layers: a page holds block_size tokens of K and V for
// every attention layer, and each request has one block table that grows as it does (as in
// vLLM). A pure Mamba2 model has no attention layers and uses no pages. Invariant: a page
// is either free or in exactly one KvBlocks.
#ifndef COIL_SCHEDULER_KV_PAGE_POOL_H_
#define COIL_SCHEDULER_KV_PAGE_POOL_H_

#include <cstdint>
#include <vector>

namespace coil {

// A request's block table: page i holds its positions [i * block_size, (i + 1) *
// block_size). Only the pool adds or removes pages.
class KvBlocks {
 public:
  const std::vector<int32_t>& page_ids() const { return page_ids_; }
  int32_t num_pages() const { return static_cast<int32_t>(page_ids_.size()); }

 private:
  friend class KvPagePool;
  std::vector<int32_t> page_ids_;
};

class KvPagePool {
 public:
  KvPagePool(int32_t num_pages, int32_t block_size);

  // ceil(num_tokens / block_size): the pages num_tokens positions occupy.
  int32_t PagesFor(int64_t num_tokens) const;
  // Pages `blocks` still lacks to cover num_tokens positions (0 when it already does).
  int32_t PagesToGrow(const KvBlocks& blocks, int64_t num_tokens) const;

  // Grows `blocks` to cover num_tokens positions. When too few pages are free it returns
  // false and changes nothing (no partial allocation to undo).
  bool Grow(KvBlocks* blocks, int64_t num_tokens);
  // Returns every page of `blocks` to the pool and leaves it empty. A page freed twice is
  // a bug in the caller and aborts.
  void Free(KvBlocks* blocks);

  int32_t block_size() const { return block_size_; }
  int32_t num_total() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_pages_.size()); }
  int32_t num_used() const { return num_total() - num_free(); }

 private:
  int32_t block_size_;
  std::vector<int32_t> free_pages_;  // a stack; freed pages are reused first (LIFO)
  std::vector<bool> in_use_;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_KV_PAGE_POOL_H_
