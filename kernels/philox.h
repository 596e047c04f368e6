// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11) shared by the host
// sampler and the GPU kernels: the draw for (seed, rng step, vocab id) depends on nothing
// else, and every step below is an exactly rounded IEEE operation (no libm, no FMA: the
// builds pass -ffp-contract=off and --fmad=false), so host and device give the same bits.
#ifndef COIL_KERNELS_PHILOX_H_
#define COIL_KERNELS_PHILOX_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define COIL_PHILOX_FN __host__ __device__ inline
#else
#define COIL_PHILOX_FN inline
#endif

namespace coil::philox {

struct Words {
  uint32_t w[4];
};

// Ten rounds of Philox4x32 on the counter (c0..c3) with the key (k0, k1).
COIL_PHILOX_FN Words Philox4x32(Words counter, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMul0) * counter.w[0];
    const uint64_t product1 = static_cast<uint64_t>(kMul1) * counter.w[2];
    const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(product0);
    const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(product1);
    counter = Words{{hi1 ^ counter.w[1] ^ k0, lo1, hi0 ^ counter.w[3] ^ k1, lo0}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return counter;
}

// A uniform draw in the open interval (0, 1) for (seed, step, index): 53 bits from two
// words, shifted by half a unit away from 0 so that neither 0 nor 1 can occur.
COIL_PHILOX_FN double UniformOpen01(uint64_t seed, uint32_t step, uint32_t index) {
  const Words bits = Philox4x32(Words{{index, step, 0u, 0u}}, static_cast<uint32_t>(seed),
                                static_cast<uint32_t>(seed >> 32));
  const uint64_t mantissa = (static_cast<uint64_t>(bits.w[0]) << 21) ^ (bits.w[1] >> 11);
  return (static_cast<double>(mantissa & ((uint64_t{1} << 53) - 1)) + 0.5) * 0x1.0p-53;
}

COIL_PHILOX_FN uint64_t DoubleBits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

COIL_PHILOX_FN double DoubleFromBits(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// Natural log of a positive normal double from +, -, *, / only, so that it gives the same
// bits wherever it runs (libm's and CUDA's log may differ in the last place). x = m * 2^e
// with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(f), f = (m - 1) / (m + 1), |f| < 0.172,
// whose odd series to f^25 leaves a relative error below 2^-55 (0.0295^13 / 27).
// Within 2 units in the last place of libm's log (tested on the host); what matters is that
// it is deterministic. Zero or a denormal reads as m * 2^-1023 (finite, never -inf).
COIL_PHILOX_FN double PortableLog(double x) {
  uint64_t bits = DoubleBits(x);
  int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);  // m in [1, 2)
  double m = DoubleFromBits(bits);
  if (m > 1.4142135623730951) {
    m *= 0.5;  // exact
    ++exponent;
  }
  const double f = (m - 1.0) / (m + 1.0);
  const double f2 = f * f;
  double series = 1.0 / 25.0;
  for (int k = 23; k >= 1; k -= 2) series = series * f2 + 1.0 / static_cast<double>(k);
  const double log_m = 2.0 * f * series;
  // ln 2 in two parts (fdlibm's): the high part has 32 significant bits, so e * hi is exact.
  constexpr double kLn2Hi = 0x1.62e42feep-1;
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  const double e = static_cast<double>(exponent);
  return e * kLn2Hi + (log_m + e * kLn2Lo);
}

// A standard Gumbel draw: argmax_i(logit_i / T + Gumbel_i) is a sample from softmax(logit/T).
// u lies in [2^-54, 1]: 1 only when mantissa + 0.5 rounds up (p = 2^-53), where the inner
// log is 0 and the outer one reads -0 as 2^-1023, a finite draw near 709, on every device.
COIL_PHILOX_FN double Gumbel(uint64_t seed, uint32_t step, uint32_t index) {
  return -PortableLog(-PortableLog(UniformOpen01(seed, step, index)));
}

}  // namespace coil::philox

#undef COIL_PHILOX_FN

#endif  // COIL_KERNELS_PHILOX_H_
