// Reads a torch.save checkpoint (pytorch_model.bin): a zip archive <prefix>/data.pkl (the
// pickled state dict), <prefix>/data/<key> (one stored entry per storage) and, in newer
// files, <prefix>/byteorder. Each tensor is checked against its storage before use:
// known storage, matching dtype, row-major strides, bytes inside the storage entry.
#ifndef COIL_WORKERS_CHECKPOINT_PYTORCH_ZIP_H_
#define COIL_WORKERS_CHECKPOINT_PYTORCH_ZIP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/checkpoint/stored_tensor.h"
#include "workers/checkpoint/torch_pickle.h"

namespace coil::checkpoint {

// `file` is the whole mapped file; the returned spans point into it.
absl::StatusOr<std::vector<StoredTensor>> ParsePytorchZip(absl::Span<const uint8_t> file,
                                                          const std::string& path);

// Writes a torch.save-style zip: `prefix`/data.pkl for `tensors`, one stored entry per
// storage key (`storages` maps key -> bytes, not copied), version and byteorder entries.
std::string WritePytorchZip(const std::string& prefix, const std::vector<PickledTensor>& tensors,
                            const std::vector<std::pair<std::string, absl::string_view>>& storages);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_PYTORCH_ZIP_H_
