// PagedKvBatch: what the attention ops take about the sequences packed in a step, built once
// per step like RecurrentBatch. Rows are the sequences' query runs laid end to end; the K/V
// of position p of sequence s live in page block_table[cu_blocks[s] + p / block_size], slot
// p % block_size, of every attention layer's cache (kernels/kv_cache.h).
// Invariant (ValidatePagedKvBatch, checked by every attention op before any memory is
// touched): runs are non-empty and cover the rows; each sequence's table covers start + run
// positions with page ids in [0, pages] (page `pages` is the scratch page that padding
// entries of a CUDA-graph batch share); a page that a sequence writes this step (the pages
// of its run's positions) appears nowhere else in the step's tables, but for the scratch
// page.
#ifndef COIL_KERNELS_PAGED_KV_BATCH_H_
#define COIL_KERNELS_PAGED_KV_BATCH_H_

#include <cstdint>
#include <vector>

namespace coil {

struct PagedKvBatch {
  // Tokens per page (the cache's dimension 1).
  int32_t block_size = 0;
  // [num_seqs + 1]: cu_seqlens[0] == 0, cu_seqlens[num_seqs] == rows of the step, as in
  // RecurrentBatch. Sequence s owns rows [cu_seqlens[s], cu_seqlens[s + 1]).
  std::vector<int32_t> cu_seqlens;
  // [num_seqs]: the positions of sequence s already in its pages; row i of its run is
  // position start_positions[s] + i and attends to positions [0, start + i].
  std::vector<int32_t> start_positions;
  // [num_seqs + 1]: sequence s's pages are block_table[cu_blocks[s] .. cu_blocks[s + 1]).
  std::vector<int32_t> cu_blocks;
  // The pages of every sequence, laid end to end: entry i of s holds positions
  // [i * block_size, (i + 1) * block_size).
  std::vector<int32_t> block_table;

  // Device mirrors of the four arrays above for a device backend (null on the CPU); the
  // caller fills them once per step (a CUDA graph reads them at each replay, so a replay
  // sees the contexts and tables the caller wrote into the same buffers before it).
  const int32_t* device_cu_seqlens = nullptr;
  const int32_t* device_start_positions = nullptr;
  const int32_t* device_cu_blocks = nullptr;
  const int32_t* device_block_table = nullptr;
  // For a CUDA graph capture: the longest context (start + run) any replay of the graph
  // will have, which sizes the attention kernels' grids and scratch; 0 takes this batch's
  // longest. When set, every sequence's context must be at most this. The CPU ignores it.
  int32_t max_context = 0;

  int num_seqs() const { return static_cast<int>(start_positions.size()); }
  int32_t run_begin(int s) const { return cu_seqlens[s]; }
  int32_t run_length(int s) const { return cu_seqlens[s + 1] - cu_seqlens[s]; }
  // Positions sequence s holds once this step's run is written: what its last row reads.
  int32_t context_length(int s) const { return start_positions[s] + run_length(s); }
  // The page holding position p of sequence s.
  int32_t page(int s, int64_t p) const {
    return block_table[cu_blocks[s] + static_cast<int32_t>(p / block_size)];
  }

  // Appends one sequence of `length` query rows from position `start_position` whose
  // pages are `pages` (a convenience for tests and runners).
  void Add(int32_t length, int32_t start_position, const std::vector<int32_t>& pages) {
    if (cu_seqlens.empty()) cu_seqlens.push_back(0);
    if (cu_blocks.empty()) cu_blocks.push_back(0);
    cu_seqlens.push_back(cu_seqlens.back() + length);
    start_positions.push_back(start_position);
    block_table.insert(block_table.end(), pages.begin(), pages.end());
    cu_blocks.push_back(static_cast<int32_t>(block_table.size()));
  }
};

}  // namespace coil

#endif  // COIL_KERNELS_PAGED_KV_BATCH_H_
