#include "workers/model/step_metadata.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace coil {

absl::StatusOr<StepMetadata> BuildStepMetadata(const StepPlan& plan, int64_t padded_vocab,
                                               int64_t state_rows, const KvPages& kv) {
  StepMetadata meta;
  meta.kv.block_size = kv.block_size;
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
    if (kv.block_size > 0) meta.kv.Add(length, seq.start_position, seq.kv_block_table);
    if (seq.sample) {
      meta.sample_rows.push_back(meta.batch.cu_seqlens.back() - 1);
      meta.sample_sequences.push_back(static_cast<int32_t>(s));
    }
  }
  if (!plan.sequences.empty()) {
    absl::Status valid = ValidateRecurrentBatch(meta.batch, total, state_rows);
    if (valid.ok() && kv.block_size > 0) valid = ValidatePagedKvBatch(meta.kv, total, kv.pages);
    if (!valid.ok()) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": ", valid.message()));
    }
  }
  return meta;
}

void PackStepMetadata(const StepMetadata& meta, PackedStepMetadata& packed) {
  const RecurrentBatch& batch = meta.batch;
  const size_t tokens = meta.token_ids.size(), seqs = batch.slots.size(),
               samples = meta.sample_rows.size();
  packed.token_ids = 0;
  packed.cu_seqlens = packed.token_ids + tokens;
  packed.slots = packed.cu_seqlens + batch.cu_seqlens.size();
  packed.start_positions = packed.slots + seqs;
  packed.sample_rows = packed.start_positions + seqs;
  packed.fresh = packed.sample_rows + samples;
  packed.cu_blocks = packed.fresh + (seqs + 3) / 4;
  packed.block_table = packed.cu_blocks + meta.kv.cu_blocks.size();
  packed.words.assign(packed.block_table + meta.kv.block_table.size(), 0);
  int32_t* words = packed.words.data();
  auto put = [](int32_t* dst, const std::vector<int32_t>& src) {
    if (!src.empty()) std::memcpy(dst, src.data(), src.size() * sizeof(int32_t));
  };
  put(words + packed.token_ids, meta.token_ids);
  put(words + packed.cu_seqlens, batch.cu_seqlens);
  put(words + packed.slots, batch.slots);
  put(words + packed.start_positions, batch.start_positions);
  put(words + packed.sample_rows, meta.sample_rows);
  put(words + packed.cu_blocks, meta.kv.cu_blocks);
  put(words + packed.block_table, meta.kv.block_table);
  if (seqs > 0) std::memcpy(words + packed.fresh, batch.fresh.data(), seqs);
}

int64_t PackedWords(const StepMetadata& meta) {
  const int64_t tokens = meta.num_tokens(), seqs = meta.batch.num_seqs(),
                samples = meta.num_samples();
  return tokens + static_cast<int64_t>(meta.batch.cu_seqlens.size()) + 2 * seqs + samples +
         static_cast<int64_t>(meta.kv.cu_blocks.size() + meta.kv.block_table.size()) +
         (seqs + 3) / 4;
}

int64_t MaxPackedWords(int64_t rows) {
  // tokens + (seqs + 1) + 2 seqs + samples + fresh words, with seqs, samples <= rows.
  return rows + (rows + 1) + 2 * rows + rows + (rows + 3) / 4;
}

int64_t MaxDecodePackedWords(int64_t bucket, int64_t pages_per_sequence) {
  if (pages_per_sequence <= 0) return MaxPackedWords(bucket);
  // A decode step's tokens, sequences and samples are each at most `bucket`; the block
  // offsets are bucket + 1 words and the tables at most pages_per_sequence per sequence.
  return MaxPackedWords(bucket) + (bucket + 1) + bucket * pages_per_sequence;
}

bool SamplesEveryRow(const StepMetadata& meta) {
  if (meta.sample_rows.size() != meta.token_ids.size()) return false;
  for (size_t i = 0; i < meta.sample_rows.size(); ++i) {
    if (meta.sample_rows[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

bool IsDecodeOnly(const StepMetadata& meta) {
  const RecurrentBatch& batch = meta.batch;
  if (batch.num_seqs() == 0) return false;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    if (batch.run_length(s) != 1 || batch.fresh[s] != 0) return false;
  }
  return true;
}

int64_t DecodeBucket(int64_t num_seqs) {
  int64_t bucket = 1;
  while (bucket < num_seqs) bucket *= 2;
  return bucket;
}

StepMetadata PadDecodeBatch(const StepMetadata& meta, int64_t bucket, int32_t scratch_row,
                            int32_t scratch_page) {
  StepMetadata padded = meta;
  const bool kv = meta.kv.block_size > 0;
  for (int64_t s = meta.batch.num_seqs(); s < bucket; ++s) {
    padded.token_ids.push_back(0);
    padded.positions.push_back(0);
    padded.batch.Add(1, scratch_row, /*is_fresh=*/false, /*start_position=*/0);
    // Position 0 on the scratch page: a context of one position, the padding's own.
    if (kv) padded.kv.Add(1, /*start_position=*/0, {scratch_page});
  }
  for (int64_t row = meta.num_samples(); row < bucket; ++row) {
    padded.sample_rows.push_back(static_cast<int32_t>(row));
  }
  return padded;
}

StepMetadata ScratchDecodeBatch(int64_t bucket, int32_t scratch_row, const KvPages& kv) {
  StepMetadata empty;
  empty.kv.block_size = kv.block_size;
  return PadDecodeBatch(empty, bucket, scratch_row, static_cast<int32_t>(kv.pages));
}

}  // namespace coil
