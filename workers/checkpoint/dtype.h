// Element types a checkpoint may hold (F32, F16, BF16) and the conversions between them.
// Conversions are exact where the target can represent the value; narrowing to bf16 or f16
// rounds to nearest, ties to even, and keeps NaN a NaN.
#ifndef COIL_WORKERS_CHECKPOINT_DTYPE_H_
#define COIL_WORKERS_CHECKPOINT_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil::checkpoint {

enum class DType { kF32, kF16, kBF16 };

// Bytes per element.
size_t DTypeSize(DType dtype);
// "f32", "f16", "bf16".
const char* DTypeName(DType dtype);
// Accepts "f32", "f16", "bf16" (the names coil's flags use).
absl::StatusOr<DType> ParseDType(absl::string_view name);

float F16ToF32(uint16_t bits);
float BF16ToF32(uint16_t bits);
uint16_t F32ToBF16(float value);
uint16_t F32ToF16(float value);

// Converts `count` elements from `src` (of `src_dtype`) to `dst` (of `dst_dtype`). The
// buffers must not overlap. Same dtype is a plain copy.
void ConvertElements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_DTYPE_H_
