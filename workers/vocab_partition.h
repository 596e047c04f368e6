// How the padded vocabulary is split over tensor-parallel ranks: contiguous, near-equal
// ranges (the first `padded % tp` ranks get one row more), so a vocabulary that `tp` does not
// divide still works. The embedding, lm_head and the sampler all use this one rule.
#ifndef COIL_WORKERS_VOCAB_PARTITION_H_
#define COIL_WORKERS_VOCAB_PARTITION_H_

#include <algorithm>
#include <cstdint>

namespace coil {

struct VocabRange {
  int32_t begin = 0;  // first padded-vocab id of this rank
  int32_t end = 0;    // one past the last
  int32_t size() const { return end - begin; }
};

inline VocabRange PartitionVocab(int32_t padded_vocab, int32_t tp_size, int32_t rank) {
  const int32_t base = padded_vocab / tp_size;
  const int32_t extra = padded_vocab % tp_size;
  const int32_t begin = rank * base + std::min(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace coil

#endif  // COIL_WORKERS_VOCAB_PARTITION_H_
