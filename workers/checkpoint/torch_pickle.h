// The pickle subset torch.save writes for a state dict, read without executing anything:
// an (Ordered)dict of name -> torch._utils._rebuild_tensor_v2(storage, offset, size,
// stride, requires_grad, hooks), each storage a persistent id ('storage', torch.XStorage,
// key, location, numel). Only the opcodes and globals that output needs are accepted; any
// other opcode or global is refused with its name and byte offset. Nothing is imported or
// called: REDUCE is interpreted for the two allowed callables only.
#ifndef COIL_WORKERS_CHECKPOINT_TORCH_PICKLE_H_
#define COIL_WORKERS_CHECKPOINT_TORCH_PICKLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/checkpoint/dtype.h"

namespace coil::checkpoint {

struct PickledTensor {
  std::string name;         // the state-dict key
  std::string storage_key;  // the zip entry data/<storage_key>
  DType dtype = DType::kF32;
  int64_t storage_numel = 0;   // elements in the storage
  int64_t storage_offset = 0;  // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // in elements
};

// Parses data.pkl. INVALID_ARGUMENT (naming the opcode or global) for anything outside
// the subset, DATA_LOSS for a truncated or malformed stream.
absl::StatusOr<std::vector<PickledTensor>> ParseTorchStateDict(absl::Span<const uint8_t> pickle);

// Writes data.pkl for `tensors` with the opcodes torch.save uses (protocol 2, memoised
// globals, batched SETITEMS, an OrderedDict with its _metadata attribute): the inverse of
// ParseTorchStateDict. Tensors sharing a storage_key share one storage, as tied weights do.
std::string WriteTorchStateDict(const std::vector<PickledTensor>& tensors);

// "FloatStorage", "HalfStorage", "BFloat16Storage".
const char* TorchStorageName(DType dtype);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_TORCH_PICKLE_H_
