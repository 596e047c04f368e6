#include "scheduler/scheduler_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace coil {
namespace {

absl::Status AtLeast(const char* name, int64_t value, int64_t limit) {
  if (value >= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " is ", value, "; it must be at least ", limit, "; raise it"));
}

}  // namespace

absl::Status SchedulerConfig::Validate() const {
  for (absl::Status status :
       {AtLeast("max_num_seqs", max_num_seqs, 1), AtLeast("state_rows", state_rows, 1),
        AtLeast("max_model_len", max_model_len, 2), AtLeast("max_queue", max_queue, 0),
        AtLeast("block_size", block_size, 1), AtLeast("ssd_chunk_size", ssd_chunk_size, 1),
        AtLeast("num_attention_layers", num_attention_layers, 0),
        AtLeast("kv_pages", kv_pages, uses_kv_pages() ? 1 : 0),
        AtLeast("prefix_cache_max_rows", prefix_cache_max_rows, 0)}) {
    if (!status.ok()) return status;
  }
  if (prefix_cache && uses_kv_pages() && ssd_chunk_size % block_size != 0) {
    // Snapshots are taken at chunk multiples and share the prefix's pages whole: a page
    // cut by a snapshot would be written by the requests resumed from it.
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix_cache with block_size ", block_size, " and ssd_chunk_size ", ssd_chunk_size,
        ": the KV page size must divide the chunk size so that snapshots end on whole pages; "
        "choose a block size that divides ",
        ssd_chunk_size, " or turn the prefix cache off"));
  }
  // The oldest running prefill shares a step with at most (running - 1) decodes and must
  // still get one whole SSD chunk, or a long prompt would never advance.
  const int64_t running = std::min(max_num_seqs, state_rows);
  const int64_t needed = running - 1 + ssd_chunk_size;
  if (max_batched_tokens < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batched_tokens is ", max_batched_tokens, "; with ", running,
        " running requests and ssd_chunk_size ", ssd_chunk_size, " it must be at least ", needed,
        " so that a prompt chunk fits beside the decodes; raise it or lower "
        "max_num_seqs"));
  }
  return absl::OkStatus();
}

}  // namespace coil
