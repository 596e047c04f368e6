// Reads the safetensors format: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
// Every entry is checked before use: a well-formed header inside the file, F32/F16/BF16,
// dtype x shape = end - begin, offsets inside the data and not overlapping, unique names.
#ifndef COIL_WORKERS_CHECKPOINT_SAFETENSORS_H_
#define COIL_WORKERS_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/checkpoint/stored_tensor.h"

namespace coil::checkpoint {

// The header may be at most this long (the format's own limit is 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses `file` (the whole file's bytes; `path` names it in errors). The returned spans
// point into `file`. DATA_LOSS for truncation or corruption, UNIMPLEMENTED for a dtype
// coil does not read.
absl::StatusOr<std::vector<StoredTensor>> ParseSafetensors(absl::Span<const uint8_t> file,
                                                           const std::string& path);

// Writes a safetensors file's bytes (header padded with spaces to 8 bytes, tensors in the
// order given, as the reference writer does). The inverse of ParseSafetensors.
std::string SerializeSafetensors(const std::vector<StoredTensor>& tensors);

// Safetensors dtype names ("F32", "F16", "BF16").
const char* SafetensorsDTypeName(DType dtype);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_SAFETENSORS_H_
