// StoredTensor: where one tensor's bytes lie in a mapped checkpoint file, as a reader found
// them. Invariant (every reader checks it before building one): `bytes` lies inside the
// mapping and holds exactly product(shape) elements of `dtype`, row-major.
#ifndef COIL_WORKERS_CHECKPOINT_STORED_TENSOR_H_
#define COIL_WORKERS_CHECKPOINT_STORED_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/checkpoint/dtype.h"

namespace coil::checkpoint {

struct StoredTensor {
  std::string name;  // the key in the file
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> bytes;
  std::string file;          // the file holding it, for error messages
  uint64_t file_offset = 0;  // where `bytes` starts in `file`, for error messages
};

// product(shape) * DTypeSize(dtype), refusing negative dimensions, more than 8 dimensions
// and totals over 2^48 bytes (no overflow on hostile headers). `name` is for errors.
absl::StatusOr<uint64_t> TensorByteSize(const std::vector<int64_t>& shape, DType dtype,
                                        const std::string& name);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_STORED_TENSOR_H_
