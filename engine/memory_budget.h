// MemoryBudget: how coil-serve splits --memory-budget, the memory one rank gives to requests,
// between the two things a request holds while it runs: a recurrent-state row (every Mamba2
// layer's conv and SSM state: a fixed size per request) and, for a model with attention
// layers, KV pages (K and V of every attention layer, block_size tokens a page: a request
// holds as many as its tokens need). The budget is per rank; each rank's row and page take
// the bytes of the largest shard, so every rank fits the same numbers.
//
// The split: without flags, every state row is matched with the pages of one request of
// max_model_len tokens, so that the budget holds `rows` requests at full length, rows capped
// at max_num_seqs; whatever the rows leave goes to pages (short requests then leave pages
// free for others, and a long one preempts only when many run). --state-rows fixes the
// rows and the rest goes to pages; --kv-pages fixes the pages and the rest goes to rows;
// both fix both. Each pool holds one scratch entry beyond its count (the state pool's
// scratch row, the KV cache's scratch page), on top of the budget. A model without
// attention layers gets no pages: its rows are the budget over one row's bytes, capped at
// max_num_seqs plus the rows the prefix cache may keep (BudgetRequest::spare_rows).
#ifndef COIL_ENGINE_MEMORY_BUDGET_H_
#define COIL_ENGINE_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace coil {

// "2GiB", "512MiB", "1.5G", "1000000": bytes. `flag` names the flag in errors.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text, const std::string& flag);

struct BudgetRequest {
  int64_t budget_bytes = 0;
  int64_t row_bytes = 0;   // one state row on the largest shard
  int64_t page_bytes = 0;  // one KV page on the largest shard; 0: no attention layers
  int32_t block_size = 16;
  int32_t max_model_len = 4096;
  int32_t max_num_seqs = 256;
  int32_t state_rows = 0;  // --state-rows; 0: derive
  int32_t kv_pages = 0;    // --kv-pages; 0: derive
  // Rows a derived count may hold beyond max_num_seqs, for the prefix cache's snapshots
  // (rows no running request could use at once): 0 with the cache off, its row cap, or
  // INT32_MAX for as many as the budget holds.
  int32_t spare_rows = 0;
};

struct Budgets {
  int32_t state_rows = 0;
  int32_t kv_pages = 0;
  int64_t bytes = 0;  // what they take per rank, scratch entries included
  // One line for the start-up log: the numbers, their bytes and where they came from.
  std::string description;
};

// INVALID_ARGUMENT naming the flag to change when the budget holds no request (or no row
// beside the pages given), or when --kv-pages is given for a model without attention.
absl::StatusOr<Budgets> SplitMemoryBudget(const BudgetRequest& request);

}  // namespace coil

#endif  // COIL_ENGINE_MEMORY_BUDGET_H_
