// The chunk list of the CUDA SSD scan: which packed rows each chunk covers. A sequence's run
// is cut at every multiple of chunk_size of its absolute position (so the first chunk of a
// resuming run may be short), chunks never span two sequences, and runs of one token have
// no chunks (the decode kernel takes them, as the CPU takes them through the recurrence).
// The geometry functions are __host__ __device__: the host sizes the launches and the
// device builds the list from the step's device mirrors with the very same arithmetic.
#ifndef COIL_KERNELS_CUDA_SSD_CHUNKS_H_
#define COIL_KERNELS_CUDA_SSD_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "kernels/recurrent_batch.h"

#ifndef COIL_HOST_DEVICE
#if defined(__CUDACC__)
#define COIL_HOST_DEVICE __host__ __device__
#else
#define COIL_HOST_DEVICE
#endif
#endif

// `#pragma unroll` in device code (a fixed-size array indexed by an unrolled loop stays in
// registers); nothing on the host.
#ifndef COIL_UNROLL
#if defined(__CUDA_ARCH__)
#define COIL_UNROLL _Pragma("unroll")
#else
#define COIL_UNROLL
#endif
#endif

namespace coil::cuda {

// One chunk: rows [row0, row0 + length) of sequence `seq`, all inside one multiple of
// chunk_size of the absolute position. Its C B^T block (per group, [length][length]) starts
// at float `cb_offset + g * length * length` of the C B^T buffer.
struct SsdChunk {
  int64_t cb_offset;
  int32_t row0;
  int32_t length;
  int32_t seq;
  int32_t reserved;  // keeps the struct 8-byte aligned without implicit padding
};

// The number of pieces of a run of `length` tokens starting at absolute `position`:
// the chunk-size multiples it touches. Example (chunk 8): position 6, length 12 covers
// positions 6..17 -> pieces [6, 8), [8, 16), [16, 18): 3.
COIL_HOST_DEVICE inline int32_t SsdPieceCount(int64_t position, int64_t length, int64_t chunk) {
  return static_cast<int32_t>((position + length - 1) / chunk - position / chunk + 1);
}

// Piece k of that run, as an offset into the run and a length.
COIL_HOST_DEVICE inline void SsdPiece(int64_t position, int64_t length, int64_t chunk, int32_t k,
                                      int32_t* offset, int32_t* piece_length) {
  const int64_t first_chunk = position / chunk;
  const int64_t begin = k == 0 ? position : (first_chunk + k) * chunk;
  const int64_t boundary = (first_chunk + k + 1) * chunk;
  const int64_t end = position + length < boundary ? position + length : boundary;
  *offset = static_cast<int32_t>(begin - position);
  *piece_length = static_cast<int32_t>(end - begin);
}

// What a sequence contributes to the list: its chunk count and the sum of its chunks'
// squared lengths (the C B^T floats per group). Runs of one token contribute nothing.
struct SsdSequenceTotals {
  int32_t chunks;
  int64_t cb_floats;
};

COIL_HOST_DEVICE inline SsdSequenceTotals SsdTotalsOf(int64_t position, int64_t length,
                                                      int64_t chunk) {
  SsdSequenceTotals t{0, 0};
  if (length < 2) return t;
  t.chunks = SsdPieceCount(position, length, chunk);
  for (int32_t k = 0; k < t.chunks; ++k) {
    int32_t offset, piece;
    SsdPiece(position, length, chunk, k, &offset, &piece);
    t.cb_floats += static_cast<int64_t>(piece) * piece;
  }
  return t;
}

// The chunk scan computes C B^T in 64x64 tiles of its lower triangle: tile pair `pair` of a
// chunk is (t_tile, s_tile) with s_tile <= t_tile, numbered row by row: (0,0), (1,0), (1,1),
// (2,0), ... A chunk of T tiles per side has T (T + 1) / 2 pairs.
COIL_HOST_DEVICE inline void SsdTrianglePair(int32_t pair, int32_t* t_tile, int32_t* s_tile) {
  int32_t t = 0;
  while ((t + 1) * (t + 2) / 2 <= pair) ++t;
  *t_tile = t;
  *s_tile = pair - t * (t + 1) / 2;
}

// The whole list, built on the host (the launcher uses the totals; tests use the list).
struct SsdChunkPlan {
  std::vector<SsdChunk> chunks;
  // [num_seqs + 1]: sequence s owns chunks [seq_first_chunk[s], seq_first_chunk[s + 1]).
  std::vector<int32_t> seq_first_chunk;
  int64_t cb_floats_per_group = 0;  // sum of the chunks' squared lengths
  int32_t max_length = 0;           // the longest chunk
};

// `groups` scales the C B^T offsets (each chunk holds one block per group).
SsdChunkPlan BuildSsdChunkPlan(const RecurrentBatch& batch, int64_t chunk_size, int64_t groups);

// The last chunked scan's plan, kept by the CUDA backend: every layer of a step scans the
// same batch, so the host geometry and the device chunk list are built once per step rather
// than once per layer. The plan depends only on the batch's host run lengths and start
// positions, chunk_size and groups (the key); the device list on those and on where it was
// built (the workspace address and generation: a reallocated workspace holds no list).
class SsdPlanCache {
 public:
  // The plan of (batch, chunk_size, groups): the cached one when the key matches the last
  // call's, else built afresh, which also forgets the device list.
  const SsdChunkPlan& PlanFor(const RecurrentBatch& batch, int64_t chunk_size, int64_t groups);
  // Whether the device list of the current plan was built at `at` in workspace generation
  // `generation` (and not overwritten since: see ForgetDeviceList).
  bool HasDeviceList(const void* at, uint64_t generation) const {
    return device_valid_ && device_at_ == at && device_generation_ == generation;
  }
  void SetDeviceList(const void* at, uint64_t generation) {
    device_valid_ = true;
    device_at_ = at;
    device_generation_ = generation;
  }
  // After anything that may have rewritten the list (a graph replay, a capture).
  void ForgetDeviceList() { device_valid_ = false; }

 private:
  bool valid_ = false;
  std::vector<int32_t> cu_seqlens_, start_positions_;
  int64_t chunk_size_ = 0, groups_ = 0;
  SsdChunkPlan plan_;
  bool device_valid_ = false;
  const void* device_at_ = nullptr;
  uint64_t device_generation_ = 0;
};

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_SSD_CHUNKS_H_
