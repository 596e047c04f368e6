#include "workers/checkpoint/dtype.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace coil::checkpoint {

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "f16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype '", name, "' is not supported; use f32, f16 or bf16"));
}

namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

float BF16ToF32(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t F32ToBF16(float value) {
  uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float value) {
  uint32_t bits = FloatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs_bits >= 0x47800000u) {
    // |value| >= 65536: infinity. Values between 65504 and 65536 are handled below.
    return sign | 0x7c00u;
  }
  if (abs_bits < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): a subnormal, in units of 2^-24, rounded to
    // nearest even by the float unit itself (the product is exact, rint rounds).
    float magnitude = BitsFloat(abs_bits);
    float units = std::nearbyint(magnitude * 16777216.0f);  // 2^24
    return sign | static_cast<uint16_t>(units);
  }
  // Normal: rebias the exponent from 127 to 15 and round the 23-bit mantissa to 10 bits.
  uint32_t rebased = abs_bits - (112u << 23);
  uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  uint32_t rounded = (rebased + rounding) >> 13;  // may carry into the exponent: still right
  return sign | static_cast<uint16_t>(rounded);
}

namespace {

// Tensors in a checkpoint need not be aligned to their element size (safetensors packs
// an F32 tensor after an odd number of F16 elements): every access goes through memcpy.
// One loop per (source, target) pair, so each compiles to straight-line code.
template <DType kDType>
float LoadAt(const uint8_t* in, size_t i) {
  if constexpr (kDType == DType::kF32) {
    float value;
    std::memcpy(&value, in + 4 * i, 4);
    return value;
  } else {
    uint16_t bits;
    std::memcpy(&bits, in + 2 * i, 2);
    return kDType == DType::kF16 ? F16ToF32(bits) : BF16ToF32(bits);
  }
}

template <DType kDType>
void StoreAt(uint8_t* out, size_t i, float value) {
  if constexpr (kDType == DType::kF32) {
    std::memcpy(out + 4 * i, &value, 4);
  } else {
    uint16_t bits = kDType == DType::kF16 ? F32ToF16(value) : F32ToBF16(value);
    std::memcpy(out + 2 * i, &bits, 2);
  }
}

template <DType kFrom, DType kTo>
void ConvertLoop(const uint8_t* __restrict in, uint8_t* __restrict out, size_t count) {
  for (size_t i = 0; i < count; ++i) StoreAt<kTo>(out, i, LoadAt<kFrom>(in, i));
}

template <DType kFrom>
void ConvertFrom(const uint8_t* in, uint8_t* out, DType to, size_t count) {
  switch (to) {
    case DType::kF32:
      return ConvertLoop<kFrom, DType::kF32>(in, out, count);
    case DType::kF16:
      return ConvertLoop<kFrom, DType::kF16>(in, out, count);
    case DType::kBF16:
      return ConvertLoop<kFrom, DType::kBF16>(in, out, count);
  }
}

}  // namespace

void ConvertElements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * DTypeSize(src_dtype));
    return;
  }
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  switch (src_dtype) {
    case DType::kF32:
      return ConvertFrom<DType::kF32>(in, out, dst_dtype, count);
    case DType::kF16:
      return ConvertFrom<DType::kF16>(in, out, dst_dtype, count);
    case DType::kBF16:
      return ConvertFrom<DType::kBF16>(in, out, dst_dtype, count);
  }
}

}  // namespace coil::checkpoint
