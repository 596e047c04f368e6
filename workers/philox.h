// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11): the value drawn for
// (seed, rng step, vocab id) depends on nothing else, so every rank can draw the numbers of
// its own vocab shard, and a recompute after preemption draws the same numbers again.
#ifndef COIL_WORKERS_PHILOX_H_
#define COIL_WORKERS_PHILOX_H_

#include <array>
#include <cmath>
#include <cstdint>

namespace coil {

// Ten rounds of Philox4x32 on `counter` with `key`.
inline std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMul0) * counter[0];
    const uint64_t product1 = static_cast<uint64_t>(kMul1) * counter[2];
    const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(product0);
    const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(product1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// A uniform draw in the open interval (0, 1) for (seed, step, index), 24 bits of mantissa
// centred in their bin so that neither 0 nor 1 can occur.
inline double UniformOpen01(uint64_t seed, uint32_t step, uint32_t index) {
  const std::array<uint32_t, 4> bits =
      Philox4x32({index, step, 0u, 0u},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  // 53 bits from two words, then shifted by half a unit away from 0.
  const uint64_t mantissa = (static_cast<uint64_t>(bits[0]) << 21) ^ (bits[1] >> 11);
  return (static_cast<double>(mantissa & ((uint64_t{1} << 53) - 1)) + 0.5) * 0x1.0p-53;
}

// A standard Gumbel draw: argmax_i(logit_i / T + Gumbel_i) is a sample from softmax(logit/T).
inline double Gumbel(uint64_t seed, uint32_t step, uint32_t index) {
  return -std::log(-std::log(UniformOpen01(seed, step, index)));
}

}  // namespace coil

#endif  // COIL_WORKERS_PHILOX_H_
