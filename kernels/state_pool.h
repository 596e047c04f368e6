// StatePool: the recurrent state of every Mamba2 layer for `state_rows` sequences plus one
// scratch row (index state_rows) that padding entries of a CUDA-graph batch may write and
// nobody reads. In the backend's memory, zeroed at creation: the conv state fp32, the SSM
// state fp32 or bf16 (ssm_dtype: half the bytes, rounded as Backend::SsmScan says). A row's
// contents only matter to the sequence holding that slot; a fresh sequence never reads it.
// Layout: conv [layers, rows + 1, d_conv - 1, conv_channels],
//         ssm  [layers, rows + 1, heads, headdim, d_state].
#ifndef COIL_KERNELS_STATE_POOL_H_
#define COIL_KERNELS_STATE_POOL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/tensor.h"

namespace coil {

struct StatePoolShape {
  int64_t layers = 0;
  int64_t state_rows = 0;  // rows usable by sequences; the pool holds one more (scratch)
  int64_t d_conv = 0;
  int64_t conv_channels = 0;  // this rank's x, B and C channels
  int64_t heads = 0;          // this rank's heads
  int64_t headdim = 0;
  int64_t d_state = 0;
  DType ssm_dtype = DType::kF32;  // f32 or bf16

  int64_t conv_floats_per_row() const { return (d_conv - 1) * conv_channels; }
  // Elements of one row of one layer's SSM state (of ssm_dtype).
  int64_t ssm_floats_per_row() const { return heads * headdim * d_state; }
  int64_t ssm_bytes_per_row() const {
    return ssm_floats_per_row() * static_cast<int64_t>(DTypeSize(ssm_dtype));
  }
  // Bytes of one sequence's state over all layers (what a decode step reads and writes).
  int64_t bytes_per_sequence() const {
    return layers * (conv_floats_per_row() * 4 + ssm_bytes_per_row());
  }
};

class StatePool {
 public:
  // Allocates (layers x (state_rows + 1)) rows of both states in `backend`'s memory.
  static absl::StatusOr<StatePool> Create(Backend& backend, const StatePoolShape& shape);

  const StatePoolShape& shape() const { return shape_; }
  int64_t state_rows() const { return shape_.state_rows; }
  int64_t scratch_row() const { return shape_.state_rows; }
  // [state_rows + 1, d_conv - 1, conv_channels] for `layer`.
  Tensor ConvState(int64_t layer) const;
  // [state_rows + 1, heads, headdim, d_state] of ssm_dtype for `layer`.
  Tensor SsmState(int64_t layer) const;
  size_t bytes() const { return conv_.bytes() + ssm_.bytes(); }

  // Copies row `from`'s conv and SSM state of every layer over row `to`, ordered with
  // `backend`'s ops (one strided copy per state): how a prefix-cache snapshot is taken
  // and restored. Both rows in [0, state_rows) and distinct, else INVALID_ARGUMENT.
  // `backend` must be the one the pool was created on.
  absl::Status CopyRow(Backend& backend, int64_t from, int64_t to) const;

 private:
  StatePool(const StatePoolShape& shape, Device device, Buffer conv, Buffer ssm)
      : shape_(shape), device_(device), conv_(std::move(conv)), ssm_(std::move(ssm)) {}

  StatePoolShape shape_;
  Device device_;
  Buffer conv_;
  Buffer ssm_;
};

}  // namespace coil

#endif  // COIL_KERNELS_STATE_POOL_H_
