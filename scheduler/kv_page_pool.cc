#include "scheduler/kv_page_pool.h"

#include <algorithm>

#include "common/logging.h"

namespace coil {

KvPagePool::KvPagePool(int32_t num_pages, int32_t block_size)
    : block_size_(block_size), holders_(std::max(num_pages, 0), 0) {
  COIL_CHECK(block_size_ > 0) << "block_size " << block_size_;
  free_pages_.reserve(holders_.size());
  for (int32_t page = num_total() - 1; page >= 0; --page) free_pages_.push_back(page);
}

int32_t KvPagePool::PagesFor(int64_t num_tokens) const {
  return static_cast<int32_t>((std::max<int64_t>(num_tokens, 0) + block_size_ - 1) / block_size_);
}

int32_t KvPagePool::PagesToGrow(const KvBlocks& blocks, int64_t num_tokens) const {
  return std::max(PagesFor(num_tokens) - blocks.num_pages(), 0);
}

bool KvPagePool::Grow(KvBlocks* blocks, int64_t num_tokens) {
  const int32_t needed = PagesToGrow(*blocks, num_tokens);
  if (needed > num_free()) return false;
  for (int32_t i = 0; i < needed; ++i) {
    const int32_t page = free_pages_.back();
    free_pages_.pop_back();
    holders_[page] = 1;
    blocks->page_ids_.push_back(page);
  }
  return true;
}

void KvPagePool::Share(const KvBlocks& from, int32_t count, KvBlocks* to) {
  COIL_CHECK(count >= 0 && count <= from.num_pages() && to->page_ids_.empty())
      << "sharing " << count << " of " << from.num_pages() << " pages into a table of "
      << to->num_pages();
  for (int32_t i = 0; i < count; ++i) {
    const int32_t page = from.page_ids_[i];
    COIL_CHECK(holders_[page] > 0) << "kv page " << page << " shared while free";
    ++holders_[page];
    to->page_ids_.push_back(page);
  }
}

void KvPagePool::Free(KvBlocks* blocks) {
  // Pushed in reverse so that the request's first page is the next one handed out.
  for (auto it = blocks->page_ids_.rbegin(); it != blocks->page_ids_.rend(); ++it) {
    const int32_t page = *it;
    COIL_CHECK(page >= 0 && page < num_total() && holders_[page] > 0)
        << "kv page " << page << " freed twice";
    if (--holders_[page] == 0) free_pages_.push_back(page);
  }
  blocks->page_ids_.clear();
}

}  // namespace coil
