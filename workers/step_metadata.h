// StepMetadata: what every layer of a step needs to know about the plan, built once per
// step (not per layer) from the StepPlan: the packed token ids, each token's position, the
// RecurrentBatch the stateful kernels take, and which rows are sampled.
//
// Worked example: a plan with decodes of requests A (slot 2) and B (slot 0) and a
// 3-token prefill chunk of C (slot 1, fresh), sampled at its end:
//   token_ids   = [a, b, c0, c1, c2]
//   cu_seqlens  = [0, 1, 2, 5]            (runs of 1, 1 and 3 tokens)
//   positions   = [pA, pB, 0, 1, 2]
//   slots       = [2, 0, 1], fresh = [0, 0, 1]
//   sample_rows = [0, 1, 4]               (cu_seqlens[s + 1] - 1 for each sampled s)
#ifndef COIL_WORKERS_STEP_METADATA_H_
#define COIL_WORKERS_STEP_METADATA_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/recurrent_batch.h"
#include "scheduler/plan.h"

namespace coil {

struct StepMetadata {
  std::vector<int32_t> token_ids;    // [T]
  std::vector<int32_t> positions;    // [T] absolute position of each token
  RecurrentBatch batch;              // per sequence: cu_seqlens, slots, fresh, start positions
  std::vector<int32_t> sample_rows;  // [S] the row whose logits are sampled
  std::vector<int32_t> sample_sequences;  // [S] the plan's sequence index of each

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_samples() const { return static_cast<int32_t>(sample_rows.size()); }
};

// Checks token ids against the padded vocabulary and the batch against `state_rows`
// (INTERNAL naming the sequence: a plan that fails here was built wrong).
absl::StatusOr<StepMetadata> BuildStepMetadata(const StepPlan& plan, int64_t padded_vocab,
                                               int64_t state_rows);

}  // namespace coil

#endif  // COIL_WORKERS_STEP_METADATA_H_
