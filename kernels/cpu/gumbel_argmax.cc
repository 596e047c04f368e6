// Gumbel-max sampling per row on the CPU: a left-to-right scan of each row's scores (the
// reference and fast modes are the same scan; the Philox draws dominate its cost).
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/gumbel_score.h"

namespace coil {

void CpuGumbelArgmax(const CpuContext& ctx, const Tensor& logits, const Tensor& temperatures,
                     const Tensor& seeds, const Tensor& steps, int64_t vocab_offset,
                     const Tensor& ids, const Tensor& scores) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  ctx.pool->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* v = RowF32(logits, t);
      const float temperature = temperatures.data<float>()[t * temperatures.stride(0)];
      const int32_t* seed_words = seeds.data<int32_t>() + t * seeds.stride(0);
      const uint64_t seed = gumbel::SeedOf(seed_words[0], seed_words[1]);
      const uint32_t step = static_cast<uint32_t>(steps.data<int32_t>()[t * steps.stride(0)]);
      gumbel::ScorePair best{-std::numeric_limits<double>::infinity(), -1};
      for (int64_t j = 0; j < vocab; ++j) {
        gumbel::ScanStep(best,
                         gumbel::Score(v[j], temperature, seed, step,
                                       static_cast<uint32_t>(vocab_offset + j)),
                         static_cast<int32_t>(j));
      }
      ids.data<int32_t>()[t * ids.stride(0)] = best.index < 0 ? 0 : best.index;
      int32_t* score_words = scores.data<int32_t>() + t * scores.stride(0);
      std::memcpy(score_words, &best.score, sizeof(best.score));
    }
  });
}

}  // namespace coil
