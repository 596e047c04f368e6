#include "workers/step_metadata.h"

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace coil {

absl::StatusOr<StepMetadata> BuildStepMetadata(const StepPlan& plan, int64_t padded_vocab,
                                               int64_t state_rows) {
  StepMetadata meta;
  const int32_t total = plan.NumTokens();
  meta.token_ids.reserve(static_cast<size_t>(total));
  meta.positions.reserve(static_cast<size_t>(total));
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    const ScheduledSequence& seq = plan.sequences[s];
    const int32_t length = static_cast<int32_t>(seq.token_ids.size());
    for (int32_t i = 0; i < length; ++i) {
      const int32_t id = seq.token_ids[i];
      if (id < 0 || id >= padded_vocab) {
        return absl::InternalError(absl::StrCat("step ", plan.step_id, ": request ",
                                                seq.request_id, " has token id ", id,
                                                " outside the vocabulary [0, ", padded_vocab,
                                                ")"));
      }
      meta.token_ids.push_back(id);
      meta.positions.push_back(seq.start_position + i);
    }
    meta.batch.Add(length, seq.state_slot, seq.fresh, seq.start_position);
    if (seq.sample) {
      meta.sample_rows.push_back(meta.batch.cu_seqlens.back() - 1);
      meta.sample_sequences.push_back(static_cast<int32_t>(s));
    }
  }
  if (!plan.sequences.empty()) {
    const absl::Status valid = ValidateRecurrentBatch(meta.batch, total, state_rows);
    if (!valid.ok()) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": ", valid.message()));
    }
  }
  return meta;
}

}  // namespace coil
