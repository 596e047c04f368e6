#include "kernels/cuda/ssd_chunks.h"

#include <cstddef>

namespace coil::cuda {

SsdChunkPlan BuildSsdChunkPlan(const RecurrentBatch& batch, int64_t chunk_size, int64_t groups) {
  SsdChunkPlan plan;
  const int num_seqs = batch.num_seqs();
  plan.seq_first_chunk.resize(static_cast<size_t>(num_seqs) + 1);
  int64_t cb_floats = 0;
  for (int s = 0; s < num_seqs; ++s) {
    plan.seq_first_chunk[s] = static_cast<int32_t>(plan.chunks.size());
    const int64_t length = batch.run_length(s);
    const int64_t position = batch.start_positions[s];
    const SsdSequenceTotals totals = SsdTotalsOf(position, length, chunk_size);
    for (int32_t k = 0; k < totals.chunks; ++k) {
      int32_t offset, piece;
      SsdPiece(position, length, chunk_size, k, &offset, &piece);
      plan.chunks.push_back({groups * cb_floats, batch.run_begin(s) + offset, piece, s, 0});
      cb_floats += static_cast<int64_t>(piece) * piece;
      if (piece > plan.max_length) plan.max_length = piece;
    }
  }
  plan.seq_first_chunk[num_seqs] = static_cast<int32_t>(plan.chunks.size());
  plan.cb_floats_per_group = cb_floats;
  return plan;
}

const SsdChunkPlan& SsdPlanCache::PlanFor(const RecurrentBatch& batch, int64_t chunk_size,
                                          int64_t groups) {
  if (valid_ && chunk_size == chunk_size_ && groups == groups_ && batch.cu_seqlens == cu_seqlens_ &&
      batch.start_positions == start_positions_) {
    return plan_;
  }
  plan_ = BuildSsdChunkPlan(batch, chunk_size, groups);
  cu_seqlens_ = batch.cu_seqlens;
  start_positions_ = batch.start_positions;
  chunk_size_ = chunk_size;
  groups_ = groups;
  valid_ = true;
  device_valid_ = false;
  return plan_;
}

}  // namespace coil::cuda
