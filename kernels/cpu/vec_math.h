// Elementwise math written so that GCC vectorizes the loops that call it (no libm calls),
// and so that every ISA gives the same bits: only +, -, *, comparisons and bit operations,
// never contracted (-ffp-contract=off). COIL_VECTORIZE compiles a loop for AVX-512, AVX2
// and the baseline, picked at load time; the results of all three are identical because
// each lane computes the same scalar expression.
#ifndef COIL_KERNELS_CPU_VEC_MATH_H_
#define COIL_KERNELS_CPU_VEC_MATH_H_

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define COIL_VECTORIZE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COIL_VECTORIZE
#endif

namespace coil {

inline uint32_t FloatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as vcvtneps2bf16 does (NaN stays NaN).
inline uint16_t FloatToBf16(float x) {
  uint32_t u = FloatBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);
    // Subnormal: value = mant * 2^-24.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// exp(x) within 2 ulp for x in [-86.5, 88.3]; 0 below (where exp is under 3e-38), and
// exp(88.3) above (coil never feeds it such values: decays are exp of values <= 0).
inline float ExpF(float x_in) {
  const float x = x_in < -86.5f ? -86.5f : (x_in > 88.3f ? 88.3f : x_in);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick; r = x - n ln 2 in two parts.
  const float shifter = 12582912.0f;
  const float t = x * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // exp(r) on |r| <= ln2/2: degree-6 polynomial (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = static_cast<int32_t>(FloatBits(t) - FloatBits(shifter));
  float result = BitsFloat(FloatBits(p) + (static_cast<uint32_t>(e) << 23));
  return x_in < -86.5f ? 0.0f : result;
}

inline float SiluF(float x) { return x / (1.0f + ExpF(-x)); }

// log(x) for x in [1, 2]: used by softplus only (log1p(exp(x)) with exp(x) <= 1).
inline float Log1pSmallF(float u) {
  // log1p(u) for u in [0, 1]: log(1 + u) = 2 atanh(u / (2 + u)), odd series to s^11.
  const float s = u / (2.0f + u);
  const float s2 = s * s;
  float p = 0.0769230769f;  // 1/13
  p = p * s2 + 0.0909090909f;
  p = p * s2 + 0.1111111111f;
  p = p * s2 + 0.1428571429f;
  p = p * s2 + 0.2f;
  p = p * s2 + 0.3333333333f;
  p = p * s2 + 1.0f;
  return 2.0f * s * p;
}

// softplus(x) = log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)); x above 20 returns x, as
// torch.nn.functional.softplus does.
inline float SoftplusF(float x) {
  if (x > 20.0f) return x;
  const float ax = x < 0.0f ? -x : x;
  return (x > 0.0f ? x : 0.0f) + Log1pSmallF(ExpF(-ax));
}

// Sum of 16 lane partials in the fixed order every kernel uses (lane i + i+8, then + i+4,
// + i+2, + i+1), the order an AVX-512 register reduction takes.
inline float FoldLanes16(const float* lanes) {
  float a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) a[i] = lanes[i] + lanes[i + 8];
  for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
  for (int i = 0; i < 2; ++i) c[i] = b[i] + b[i + 2];
  return c[0] + c[1];
}

// dst[i] = FloatToBf16(src[i]) for i in [0, n), vectorized (vec_math.cc).
void NarrowToBf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace coil

#endif  // COIL_KERNELS_CPU_VEC_MATH_H_
