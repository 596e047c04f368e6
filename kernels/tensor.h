// Tensor: a non-owning view of a strided array on one device (host or CUDA memory).
// Invariant: a view never frees its memory; shape and strides (in elements) have the same
// rank, and a contiguous view's strides are the row-major strides of its shape.
#ifndef COIL_KERNELS_TENSOR_H_
#define COIL_KERNELS_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace coil {

enum class DType { kF32, kBF16, kF16, kI32 };
enum class Device { kCpu, kCuda };

inline constexpr size_t DTypeSize(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 ? 2 : 4;
}
const char* DTypeName(DType dtype);
const char* DeviceName(Device device);

class Tensor {
 public:
  static constexpr int kMaxRank = 5;

  Tensor() = default;
  // A contiguous row-major view.
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
         Device device = Device::kCpu);
  // A strided view; `strides` are in elements.
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
         std::initializer_list<int64_t> strides, Device device = Device::kCpu);

  bool empty() const { return data_ == nullptr; }
  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank_ : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + rank_ : i]; }
  int64_t numel() const;
  bool contiguous() const;
  // True when the innermost dimension is unit-stride (rows may be strided).
  bool rows_contiguous() const { return rank_ == 0 || strides_[rank_ - 1] == 1; }

  // A view of columns [begin, begin + count) of a rank-2 view (e.g. the x part of in_proj's
  // output): same rows, same row stride.
  Tensor Columns(int64_t begin, int64_t count) const;
  // A view of index `i` of dimension 0, one rank lower.
  Tensor Index(int64_t i) const;

  // "f32[3,4]" or "bf16[2,8]/s(16,1)" when strided: used in error messages.
  std::string DebugString() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  int rank_ = 0;
  std::array<int64_t, kMaxRank> shape_{};
  std::array<int64_t, kMaxRank> strides_{};
};

}  // namespace coil

#endif  // COIL_KERNELS_TENSOR_H_
