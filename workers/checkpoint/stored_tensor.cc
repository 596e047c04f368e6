#include "workers/checkpoint/stored_tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace coil::checkpoint {

absl::StatusOr<uint64_t> TensorByteSize(const std::vector<int64_t>& shape, DType dtype,
                                        const std::string& name) {
  constexpr uint64_t kMaxBytes = uint64_t{1} << 48;
  if (shape.size() > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has ", shape.size(), " dimensions; the limit is 8"));
  }
  for (int64_t dim : shape) {
    if (dim < 0 || static_cast<uint64_t>(dim) > kMaxBytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape [",
                                                     absl::StrJoin(shape, ", "),
                                                     "]; dimensions must be in [0, 2^48]"));
    }
    if (dim == 0) return 0;
  }
  uint64_t total = DTypeSize(dtype);
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(dim), &total) || total > kMaxBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", name, " with shape [", absl::StrJoin(shape, ", "), "] is over 2^48 bytes"));
    }
  }
  return total;
}

}  // namespace coil::checkpoint
