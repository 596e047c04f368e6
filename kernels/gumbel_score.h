// One Gumbel-max score and the order on (score, index) candidates, shared by the CPU and
// GPU GumbelArgmax kernels: larger scores win, the lower index among equals; NaN never
// becomes a candidate, so the order is total and any reduction tree gives a left scan's
// answer.
#ifndef COIL_KERNELS_GUMBEL_SCORE_H_
#define COIL_KERNELS_GUMBEL_SCORE_H_

#include <cstdint>

#include "kernels/philox.h"

#if defined(__CUDACC__)
#define COIL_GUMBEL_FN __host__ __device__ inline
#else
#define COIL_GUMBEL_FN inline
#endif

namespace coil::gumbel {

struct ScorePair {
  double score;   // -inf while there is no candidate
  int32_t index;  // -1 while there is no candidate
};

// The host sampler's arithmetic: the logit divided (not multiplied by a reciprocal) by the
// temperature in double, plus the id's draw.
COIL_GUMBEL_FN double Score(float logit, float temperature, uint64_t seed, uint32_t step,
                            uint32_t id) {
  return static_cast<double>(logit) / static_cast<double>(temperature) +
         philox::Gumbel(seed, step, id);
}

COIL_GUMBEL_FN ScorePair BetterOf(ScorePair a, ScorePair b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  return (b.score > a.score || (b.score == a.score && b.index < a.index)) ? b : a;
}

// Folds column `index` into `best` during a left-to-right scan (a strict > keeps the first).
COIL_GUMBEL_FN void ScanStep(ScorePair& best, double score, int32_t index) {
  if (score > best.score) {
    best.score = score;
    best.index = index;
  }
}

COIL_GUMBEL_FN uint64_t SeedOf(int32_t low, int32_t high) {
  return static_cast<uint64_t>(static_cast<uint32_t>(low)) |
         (static_cast<uint64_t>(static_cast<uint32_t>(high)) << 32);
}

}  // namespace coil::gumbel

#undef COIL_GUMBEL_FN

#endif  // COIL_KERNELS_GUMBEL_SCORE_H_
