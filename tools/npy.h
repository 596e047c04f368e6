// Writes a float32 array as a NumPy .npy file (format version 1.0), so logits dumped by
// coil-run load with numpy.load for comparison against other implementations.
#ifndef COIL_TOOLS_NPY_H_
#define COIL_TOOLS_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace coil {

// `shape` must multiply to data.size().
absl::Status WriteNpyF32(const std::string& path, const std::vector<float>& data,
                         const std::vector<int64_t>& shape);

// The header WriteNpyF32 writes (magic, version, length, dict, padding to 64 bytes).
std::string NpyHeaderF32(const std::vector<int64_t>& shape);

}  // namespace coil

#endif  // COIL_TOOLS_NPY_H_
