// The numbers the scheduler plans against: the model's shape (SSD chunk size, attention
// layers, EOS), the budgets (state rows, KV pages) and the limits (sequences, tokens per
// step, context length, queue). Invariant: a config that passes Validate() lets the
// oldest running request make progress every step.
#ifndef COIL_SCHEDULER_SCHEDULER_CONFIG_H_
#define COIL_SCHEDULER_SCHEDULER_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"

namespace coil {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;         // running requests at once
  int32_t max_batched_tokens = 2048;  // tokens in one step, decodes and prefill chunks
  int32_t max_model_len = 4096;       // prompt plus output tokens of one request
  int32_t max_queue = 1024;           // waiting requests before submissions are refused
  int32_t state_rows = 256;           // recurrent-state rows (the workers size memory from it)
  int32_t kv_pages = 0;               // KV pages; used only when num_attention_layers > 0
  int32_t block_size = 16;            // tokens per KV page
  int32_t num_attention_layers = 0;   // 0 for a pure Mamba2 model
  int32_t ssd_chunk_size = 256;       // prompts split at its multiples (docs/ARCHITECTURE.md §4)
  int32_t eos_token_id = -1;          // -1: the model has none
  // Prefix caching: the state of a prompt at chunk multiples is kept in rows no request
  // holds (with a hybrid's KV pages of that prefix, shared), and a later prompt that starts
  // with the same tokens resumes from it. With KV pages, block_size must divide
  // ssd_chunk_size.
  bool prefix_cache = false;
  int32_t prefix_cache_max_rows = 0;  // the most rows snapshots may hold; 0: no cap

  bool uses_kv_pages() const { return num_attention_layers > 0; }

  // INVALID_ARGUMENT naming the field, its value, the limit and the fix.
  absl::Status Validate() const;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_SCHEDULER_CONFIG_H_
