// The pool of KV pages for attention layers: a page holds block_size tokens of K and V for
// every attention layer, and each request has one block table that grows as it does (as in
// vLLM). A pure Mamba2 model has no attention layers and uses no pages. A page may be held
// by several tables at once (a prefix-cache snapshot and the requests resumed from it): it
// is counted, and free again when the last holder lets it go. Invariant: a page is either
// free or held by one or more KvBlocks, as many times as its count says; the scheduler only
// shares whole pages of a computed prefix, which nobody writes again.
#ifndef COIL_SCHEDULER_KV_PAGE_POOL_H_
#define COIL_SCHEDULER_KV_PAGE_POOL_H_

#include <cstdint>
#include <vector>

namespace coil {

// A block table: page i holds its positions [i * block_size, (i + 1) * block_size). Only the
// pool adds or removes pages.
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

  // Grows `blocks` to cover num_tokens positions with free pages. When too few pages are
  // free it returns false and changes nothing (no partial allocation to undo).
  bool Grow(KvBlocks* blocks, int64_t num_tokens);
  // Appends the first `count` pages of `from` to `to` (empty so far), each now held once
  // more: how a snapshot keeps a request's prefix and a resumed request reads it.
  void Share(const KvBlocks& from, int32_t count, KvBlocks* to);
  // Lets go of every page of `blocks` (a page no table holds any more is free again) and
  // leaves it empty. Letting go of a page more often than it was held is a bug in the
  // caller and aborts.
  void Free(KvBlocks* blocks);

  // How many tables hold `page` (0: free).
  int32_t holders(int32_t page) const { return holders_[page]; }
  int32_t block_size() const { return block_size_; }
  int32_t num_total() const { return static_cast<int32_t>(holders_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_pages_.size()); }
  int32_t num_used() const { return num_total() - num_free(); }

 private:
  int32_t block_size_;
  std::vector<int32_t> free_pages_;  // a stack; freed pages are reused first (LIFO)
  std::vector<int32_t> holders_;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_KV_PAGE_POOL_H_
