// The CUDA causal conv1d's parameters and per-thread bodies as plain __host__ __device__
// C++ (no CUDA types): each kernel thread calls one of these, and a host emulation
// (tests/unit/kernels/cuda/conv_emulation_test.cc) calls the same ones in the kernels'
// launch order, checking the in-place history updates against the CPU reference.
// Invariant: the scratch row (slot == state_rows) is read as zeros and never written.
#ifndef COIL_KERNELS_CUDA_CAUSAL_CONV1D_MATH_H_
#define COIL_KERNELS_CUDA_CAUSAL_CONV1D_MATH_H_

#include <math.h>

#include <cstdint>

#include "kernels/cuda/ssd_chunks.h"  // COIL_HOST_DEVICE

namespace coil::cuda {

struct ConvParams {
  const float* x;       // [rows, channels], row stride x_stride
  const float* weight;  // [channels, width]
  const float* bias;    // [channels]
  float* state;         // [state_rows + 1, width - 1, channels]
  float* out;           // [rows, channels], row stride out_stride
  int64_t x_stride, out_stride;
  const int32_t* cu_seqlens;  // [num_seqs + 1]
  const int32_t* slots;       // [num_seqs]
  const uint8_t* fresh;       // [num_seqs]
  int32_t num_seqs, rows, channels, width, state_rows;
};

COIL_HOST_DEVICE inline float ConvSilu(float v) { return v / (1.0f + expf(-v)); }

// The history (W-1 entries of `channels`) of `slot`.
COIL_HOST_DEVICE inline float* ConvHistory(const ConvParams& p, int32_t slot) {
  return p.state + static_cast<int64_t>(slot) * (p.width - 1) * p.channels;
}

// Entry i of sequence s's window [history (W-1 entries) | run] at channel c: zeros for the
// history of a fresh sequence or the scratch row.
COIL_HOST_DEVICE inline float ConvWindow(const ConvParams& p, int32_t seq, int64_t i, int32_t c) {
  const int32_t hist = p.width - 1;
  if (i < hist) {
    const int32_t slot = p.slots[seq];
    if (slot == p.state_rows || p.fresh[seq] != 0) return 0.0f;
    return ConvHistory(p, slot)[i * p.channels + c];
  }
  return p.x[(p.cu_seqlens[seq] + i - hist) * p.x_stride + c];
}

// out[row, c] for packed `row` of sequence `seq`: bias, then the taps in order, then SiLU.
// Reads the old history only: the output launch never writes a history.
COIL_HOST_DEVICE inline void ConvOutput(const ConvParams& p, int32_t seq, int32_t row, int32_t c) {
  const float* w = p.weight + static_cast<int64_t>(c) * p.width;
  const int64_t local = row - p.cu_seqlens[seq];
  float acc = p.bias[c];
  for (int32_t k = 0; k < p.width; ++k) acc = acc + w[k] * ConvWindow(p, seq, local + k, c);
  p.out[row * p.out_stride + c] = ConvSilu(acc);
}

// The new history of sequence `seq` at channel c: window entries len .. len + W - 2,
// written in ascending order in place. Entry j takes window entry len + j > j: an input row
// or an old entry not yet overwritten (only entries < j are). Must run after every
// ConvOutput of the sequence has read the old history.
COIL_HOST_DEVICE inline void ConvNewHistory(const ConvParams& p, int32_t seq, int32_t c) {
  const int32_t slot = p.slots[seq];
  if (slot == p.state_rows) return;
  const int64_t length = p.cu_seqlens[seq + 1] - p.cu_seqlens[seq];
  float* history = ConvHistory(p, slot);
  for (int32_t j = 0; j < p.width - 1; ++j) {
    history[static_cast<int64_t>(j) * p.channels + c] = ConvWindow(p, seq, length + j, c);
  }
}

// A run of one token at channel c: returns the output and, when write_history is set,
// updates the history in the same pass: the taps read history entries 0 .. W-2 in order
// while entry k - 1 takes entry k just read; the last takes the input. Without
// write_history it only reads (the fused mixer decode, whose B/C channels are read by
// several blocks and shifted by the last of them).
COIL_HOST_DEVICE inline float ConvDecodeValue(const ConvParams& p, int32_t seq, int32_t c,
                                              bool write_history) {
  const int32_t hist = p.width - 1;
  const int64_t row = p.cu_seqlens[seq];
  const int32_t slot = p.slots[seq];
  const bool scratch = slot == p.state_rows;
  const bool write = write_history && !scratch;
  const bool zero_history = scratch || p.fresh[seq] != 0;
  float* history = ConvHistory(p, slot) + c;
  const float* w = p.weight + static_cast<int64_t>(c) * p.width;
  const float input = p.x[row * p.x_stride + c];
  float acc = p.bias[c];
  for (int32_t k = 0; k < hist; ++k) {
    const float v = zero_history ? 0.0f : history[static_cast<int64_t>(k) * p.channels];
    acc = acc + w[k] * v;
    if (write && k > 0) history[static_cast<int64_t>(k - 1) * p.channels] = v;
  }
  acc = acc + w[hist] * input;
  if (write) history[static_cast<int64_t>(hist - 1) * p.channels] = input;
  return ConvSilu(acc);
}

// A run of one token, output and history in one pass.
COIL_HOST_DEVICE inline void ConvDecode(const ConvParams& p, int32_t seq, int32_t c) {
  p.out[static_cast<int64_t>(p.cu_seqlens[seq]) * p.out_stride + c] =
      ConvDecodeValue(p, seq, c, /*write_history=*/true);
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_CAUSAL_CONV1D_MATH_H_
