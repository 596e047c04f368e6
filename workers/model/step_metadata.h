// StepMetadata: what every layer of a step needs to know about the plan, built once per
// step (not per layer) from the StepPlan: the packed token ids, each token's position, the
// RecurrentBatch the stateful kernels take, the PagedKvBatch the attention ops take (each
// sequence's block table from the plan; models with attention only), and which rows are
// sampled.
//
// Worked example: a plan with decodes of requests A (slot 2) and B (slot 0) and a
// 3-token prefill chunk of C (slot 1, fresh), sampled at its end:
//   token_ids   = [a, b, c0, c1, c2]
//   cu_seqlens  = [0, 1, 2, 5]            (runs of 1, 1 and 3 tokens)
//   positions   = [pA, pB, 0, 1, 2]
//   slots       = [2, 0, 1], fresh = [0, 0, 1]
//   sample_rows = [0, 1, 4]               (cu_seqlens[s + 1] - 1 for each sampled s)
#ifndef COIL_WORKERS_MODEL_STEP_METADATA_H_
#define COIL_WORKERS_MODEL_STEP_METADATA_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/paged_kv_batch.h"
#include "kernels/recurrent_batch.h"
#include "scheduler/plan.h"

namespace coil {

struct StepMetadata {
  std::vector<int32_t> token_ids;    // [T]
  std::vector<int32_t> positions;    // [T] absolute position of each token
  RecurrentBatch batch;              // per sequence: cu_seqlens, slots, fresh, start positions
  PagedKvBatch kv;                   // block_size 0 for a model without attention layers
  std::vector<int32_t> sample_rows;  // [S] the row whose logits are sampled
  std::vector<int32_t> sample_sequences;  // [S] the plan's sequence index of each

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_samples() const { return static_cast<int32_t>(sample_rows.size()); }
};

// The KV pages a rank holds: `block_size` 0 for a model without attention layers (the plan's
// block tables are then ignored).
struct KvPages {
  int32_t block_size = 0;
  int64_t pages = 0;
};

// Checks token ids against the padded vocabulary, the batch against `state_rows` and, with
// KV pages, each sequence's block table (it covers the sequence's positions with pages of
// the pool, no page written this step is in another table) (INTERNAL naming the sequence:
// a plan that fails here was built wrong).
absl::StatusOr<StepMetadata> BuildStepMetadata(const StepPlan& plan, int64_t padded_vocab,
                                               int64_t state_rows, const KvPages& kv = {});

// The step's arrays packed into one block of 32-bit words, so that one host -> device copy
// per step moves all the kernels read (docs/ARCHITECTURE.md §4): token ids, cu_seqlens, slots,
// start positions, sample rows, the fresh flags as bytes (padded to a whole word), then the
// KV block offsets and block table (attention models only). The offsets are in words from
// the block's start. The block table comes last, so that every offset of a step depends
// only on its token, sequence and sample counts: a decode graph captured for a bucket reads
// the same addresses whatever the block tables' lengths (DecodeGraphs).
struct PackedStepMetadata {
  std::vector<int32_t> words;
  size_t token_ids = 0;
  size_t cu_seqlens = 0;
  size_t slots = 0;
  size_t start_positions = 0;
  size_t sample_rows = 0;
  size_t fresh = 0;  // byte i of the fresh flags is byte i from word `fresh` on
  size_t cu_blocks = 0;
  size_t block_table = 0;
};
// `packed`'s vectors are reused (no allocation once they are large enough).
void PackStepMetadata(const StepMetadata& meta, PackedStepMetadata& packed);
// The words PackStepMetadata writes for `meta`.
int64_t PackedWords(const StepMetadata& meta);
// The most words PackStepMetadata writes for a step of `rows` tokens without KV block tables
// (sequences and sample rows are at most one per token); block tables come on top.
int64_t MaxPackedWords(int64_t rows);
// The most words PackStepMetadata writes for a decode step of `bucket` sequences whose
// block tables hold at most `pages_per_sequence` pages each (0: no attention layers).
int64_t MaxDecodePackedWords(int64_t bucket, int64_t pages_per_sequence);

// True when the step samples every packed row, in order (sample_rows = 0, 1, ..., T-1): the
// usual decode step, whose lm_head then reads the final norm's rows without a gather.
bool SamplesEveryRow(const StepMetadata& meta);

// ---- decode-only steps, replayed as CUDA graphs per batch-size bucket ----
// True when every sequence runs exactly one token and resumes a state it already has (no
// fresh start): the steps a graph captured on a batch of scratch-row entries can replay.
bool IsDecodeOnly(const StepMetadata& meta);
// The bucket of `num_seqs` sequences: the smallest power of two at least num_seqs
// (1, 2, 4, 8, ...).
int64_t DecodeBucket(int64_t num_seqs);
// A decode-only `meta` of n sequences padded to `bucket` >= n: the added entries are token
// 0 on `scratch_row` (fresh 0, position 0), which nobody reads, and, for a model with
// attention (meta.kv.block_size > 0), a block table of the one page `scratch_page` (the KV
// cache's scratch page, which padding entries may all write); sample rows are padded with
// rows num_samples()..bucket-1 so that every bucket row gets logits, the real samples
// first. sample_sequences is left as it was (the real samples).
StepMetadata PadDecodeBatch(const StepMetadata& meta, int64_t bucket, int32_t scratch_row,
                            int32_t scratch_page = 0);
// `bucket` entries that are all padding: what a graph is captured on, so that capturing
// never touches a live request's state or KV page. With KV pages (kv.block_size > 0) each
// entry's table is the scratch page, page index kv.pages.
StepMetadata ScratchDecodeBatch(int64_t bucket, int32_t scratch_row, const KvPages& kv = {});

}  // namespace coil

#endif  // COIL_WORKERS_MODEL_STEP_METADATA_H_
