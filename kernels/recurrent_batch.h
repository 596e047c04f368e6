// RecurrentBatch: what the stateful kernels (conv1d, SSM scan) take about the sequences
// packed in a step. The rows of an activation tensor are the sequences' token runs laid
// end to end (varlen, no padding); sequence s owns rows [cu_seqlens[s], cu_seqlens[s+1]).
// Invariant (checked once, in the Backend base class, before any memory is touched): runs
// are non-empty and cover the rows exactly; every slot is in [0, state_rows] and no slot
// but the scratch row (slot == state_rows) appears twice.
#ifndef COIL_KERNELS_RECURRENT_BATCH_H_
#define COIL_KERNELS_RECURRENT_BATCH_H_

#include <cstdint>
#include <vector>

namespace coil {

struct RecurrentBatch {
  // [num_seqs + 1]: cu_seqlens[0] == 0, cu_seqlens[num_seqs] == rows of the step.
  // Example: runs of 1, 1 and 5 tokens -> {0, 1, 2, 7}.
  std::vector<int32_t> cu_seqlens;
  // [num_seqs]: the state row each sequence reads (unless fresh) and writes.
  std::vector<int32_t> slots;
  // [num_seqs]: 1 = start from zero state and never read the slot (a new sequence).
  std::vector<uint8_t> fresh;
  // [num_seqs]: absolute position of each run's first token. The chunked scan starts a
  // chunk at every multiple of its chunk size of this position, so a prompt split at chunk
  // multiples computes exactly what it computes whole.
  std::vector<int32_t> start_positions;

  // Device mirrors of the four arrays above for a device backend (null on the CPU);
  // the caller fills them once per step.
  const int32_t* device_cu_seqlens = nullptr;
  const int32_t* device_slots = nullptr;
  const uint8_t* device_fresh = nullptr;
  const int32_t* device_start_positions = nullptr;

  int num_seqs() const { return static_cast<int>(slots.size()); }
  int32_t run_begin(int s) const { return cu_seqlens[s]; }
  int32_t run_length(int s) const { return cu_seqlens[s + 1] - cu_seqlens[s]; }

  // Appends one sequence of `length` tokens (a convenience for tests and runners).
  void Add(int32_t length, int32_t slot, bool is_fresh, int32_t start_position = 0) {
    if (cu_seqlens.empty()) cu_seqlens.push_back(0);
    cu_seqlens.push_back(cu_seqlens.back() + length);
    slots.push_back(slot);
    fresh.push_back(is_fresh ? 1 : 0);
    start_positions.push_back(start_position);
  }
};

}  // namespace coil

#endif  // COIL_KERNELS_RECURRENT_BATCH_H_
