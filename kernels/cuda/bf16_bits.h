// bf16 as bits (uint16_t) on the GPU and in the host emulations alike: the rounding the
// bf16 products and the bf16 state use (round to nearest even, NaN kept a quiet NaN, the
// CPU's FloatToBf16) and the exact widening back.
#ifndef COIL_KERNELS_CUDA_BF16_BITS_H_
#define COIL_KERNELS_CUDA_BF16_BITS_H_

#include <cstdint>
#include <cstring>

#include "kernels/cuda/ssd_chunks.h"  // COIL_HOST_DEVICE

namespace coil::cuda {

// fp32 round to nearest even to bf16, as bits (__float2bfloat16_rn's rule; NaN stays NaN).
COIL_HOST_DEVICE inline uint16_t Bf16BitsOf(float value) {
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(value);
#else
  std::memcpy(&bits, &value, sizeof(bits));
#endif
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

COIL_HOST_DEVICE inline float FloatOfBf16Bits(uint16_t half) {
  const uint32_t bits = static_cast<uint32_t>(half) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_BF16_BITS_H_
