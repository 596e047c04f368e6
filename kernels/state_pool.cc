#include "kernels/state_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil {

absl::StatusOr<StatePool> StatePool::Create(Backend& backend, const StatePoolShape& shape) {
  if (shape.layers <= 0 || shape.state_rows <= 0 || shape.d_conv < 2 ||
      shape.conv_channels <= 0 || shape.heads <= 0 || shape.headdim <= 0 ||
      shape.d_state <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state pool shape (layers ", shape.layers, ", rows ", shape.state_rows, ", d_conv ",
        shape.d_conv, ", conv_channels ", shape.conv_channels, ", heads ", shape.heads,
        ", headdim ", shape.headdim, ", d_state ", shape.d_state,
        ") is invalid; every size must be positive and d_conv >= 2"));
  }
  if (shape.ssm_dtype != DType::kF32 && shape.ssm_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("the SSM state's type is ",
                                                   DTypeName(shape.ssm_dtype),
                                                   "; it must be f32 or bf16"));
  }
  const int64_t rows = shape.state_rows + 1;
  COIL_ASSIGN_OR_RETURN(
      Buffer conv, backend.Allocate(shape.layers * rows * shape.conv_floats_per_row() * 4));
  COIL_ASSIGN_OR_RETURN(
      Buffer ssm, backend.Allocate(shape.layers * rows * shape.ssm_bytes_per_row()));
  return StatePool(shape, backend.device(), std::move(conv), std::move(ssm));
}

Tensor StatePool::ConvState(int64_t layer) const {
  COIL_CHECK(layer >= 0 && layer < shape_.layers);
  const int64_t rows = shape_.state_rows + 1;
  float* base = static_cast<float*>(conv_.data()) + layer * rows * shape_.conv_floats_per_row();
  return Tensor(base, DType::kF32, {rows, shape_.d_conv - 1, shape_.conv_channels}, device_);
}

Tensor StatePool::SsmState(int64_t layer) const {
  COIL_CHECK(layer >= 0 && layer < shape_.layers);
  const int64_t rows = shape_.state_rows + 1;
  char* base = static_cast<char*>(ssm_.data()) + layer * rows * shape_.ssm_bytes_per_row();
  return Tensor(base, shape_.ssm_dtype, {rows, shape_.heads, shape_.headdim, shape_.d_state},
                device_);
}

absl::Status StatePool::CopyRow(Backend& backend, int64_t from, int64_t to) const {
  if (from < 0 || from >= shape_.state_rows || to < 0 || to >= shape_.state_rows || from == to) {
    return absl::InvalidArgumentError(absl::StrCat("state row copy from ", from, " to ", to,
                                                   "; both rows must be in [0, ", shape_.state_rows,
                                                   ") and differ"));
  }
  const int64_t rows = shape_.state_rows + 1;
  for (const auto& [buffer, row_bytes] :
       {std::pair<const Buffer*, int64_t>{&conv_, shape_.conv_floats_per_row() * 4},
        {&ssm_, shape_.ssm_bytes_per_row()}}) {
    // Layer l's row r starts at (l * rows + r) * row_bytes: one block per layer.
    const size_t block = static_cast<size_t>(row_bytes);
    char* base = static_cast<char*>(buffer->data());
    COIL_RETURN_IF_ERROR(backend.CopyOnDevice(base + to * block, rows * block, base + from * block,
                                              rows * block, block,
                                              static_cast<size_t>(shape_.layers)));
  }
  return absl::OkStatus();
}

}  // namespace coil
