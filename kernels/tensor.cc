#include "kernels/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace coil {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
  }
  return "?";
}

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  COIL_CHECK(rank_ <= kMaxRank);
  int i = 0;
  for (int64_t d : shape) shape_[i++] = d;
  int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    strides_[d] = stride;
    stride *= shape_[d];
  }
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
               std::initializer_list<int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  COIL_CHECK(rank_ <= kMaxRank && strides.size() == shape.size());
  int i = 0;
  for (int64_t d : shape) shape_[i++] = d;
  i = 0;
  for (int64_t s : strides) strides_[i++] = s;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool Tensor::contiguous() const {
  int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != stride) return false;
    stride *= shape_[d];
  }
  return true;
}

Tensor Tensor::Columns(int64_t begin, int64_t count) const {
  COIL_CHECK(rank_ == 2 && begin >= 0 && begin + count <= shape_[1]);
  Tensor view = *this;
  view.data_ = static_cast<char*>(data_) + begin * strides_[1] * DTypeSize(dtype_);
  view.shape_[1] = count;
  return view;
}

Tensor Tensor::Index(int64_t i) const {
  COIL_CHECK(rank_ >= 1 && i >= 0 && i < shape_[0]);
  Tensor view;
  view.data_ = static_cast<char*>(data_) + i * strides_[0] * DTypeSize(dtype_);
  view.dtype_ = dtype_;
  view.device_ = device_;
  view.rank_ = rank_ - 1;
  for (int d = 1; d < rank_; ++d) {
    view.shape_[d - 1] = shape_[d];
    view.strides_[d - 1] = strides_[d];
  }
  return view;
}

std::string Tensor::DebugString() const {
  std::string s = absl::StrCat(DTypeName(dtype_), "[",
                               absl::StrJoin(shape_.begin(), shape_.begin() + rank_, ","), "]");
  if (!contiguous()) {
    absl::StrAppend(&s, "/s(", absl::StrJoin(strides_.begin(), strides_.begin() + rank_, ","),
                    ")");
  }
  if (device_ == Device::kCuda) absl::StrAppend(&s, "@cuda");
  return s;
}

}  // namespace coil
