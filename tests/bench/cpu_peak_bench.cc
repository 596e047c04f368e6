// This machine's peak arithmetic rate on the CPU backend's own thread pool, the bound that
// docs/PERFORMANCE.md sets prefill against: AVX-512 BF16 dot products (vdpbf16ps, 32
// multiply-adds of bf16 pairs into 16 f32 lanes, 64 flops), f32 FMAs (vfmadd, 32 flops) and
// 8-wide AVX2 FMAs (16 flops), each on 12 independent accumulators (more than latency x
// throughput), 1 and 2 threads. Reports flops per second as items per second. Skips where the CPU
// lacks the instructions.
//   build/tests/bench/cpu_peak_bench --benchmark_repetitions=3
#include <cstdint>

#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "benchmark/benchmark.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace coil {
namespace {

constexpr int64_t kSteps = int64_t{1} << 22;  // per thread and iteration
constexpr int kAccumulators = 12;

#if defined(__x86_64__)
// Twelve named accumulators (an array would live in memory); the empty asm keeps them
// distinct (otherwise equal inputs fold into one) and in registers.
#define COIL_EACH(OP) \
  OP(c0) OP(c1) OP(c2) OP(c3) OP(c4) OP(c5) OP(c6) OP(c7) OP(c8) OP(c9) OP(c10) OP(c11)
#define COIL_KEEP                                                                                \
  asm volatile(""                                                                                \
               : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7), \
                 "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11))
#define COIL_ZERO(c) __m512 c = _mm512_setzero_ps();
#define COIL_SUM(c) sum = _mm512_add_ps(sum, c);
#define COIL_ZERO8(c) __m256 c = _mm256_setzero_ps();
#define COIL_SUM8(c) sum = _mm256_add_ps(sum, c);

__attribute__((target("avx512f,avx512bf16"))) float Bf16Dots(int64_t steps) {
  COIL_EACH(COIL_ZERO)
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), w = (__m512bh)_mm512_set1_epi16(0x3c00);
#define COIL_DOT(c) c = _mm512_dpbf16_ps(c, x, w);
  for (int64_t s = 0; s < steps; ++s) {
    COIL_EACH(COIL_DOT)
    COIL_KEEP;
  }
#undef COIL_DOT
  __m512 sum = _mm512_setzero_ps();
  COIL_EACH(COIL_SUM)
  return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx512f"))) float F32Fmas(int64_t steps) {
  COIL_EACH(COIL_ZERO)
  const __m512 x = _mm512_set1_ps(1.0f), w = _mm512_set1_ps(1e-9f);
#define COIL_FMA(c) c = _mm512_fmadd_ps(x, w, c);
  for (int64_t s = 0; s < steps; ++s) {
    COIL_EACH(COIL_FMA)
    COIL_KEEP;
  }
#undef COIL_FMA
  __m512 sum = _mm512_setzero_ps();
  COIL_EACH(COIL_SUM)
  return _mm512_reduce_add_ps(sum);
}
__attribute__((target("avx2,fma"))) float F32Fmas8(int64_t steps) {
  COIL_EACH(COIL_ZERO8)
  const __m256 x = _mm256_set1_ps(1.0f), w = _mm256_set1_ps(1e-9f);
#define COIL_FMA(c) c = _mm256_fmadd_ps(x, w, c);
  for (int64_t s = 0; s < steps; ++s) {
    COIL_EACH(COIL_FMA)
    COIL_KEEP;
  }
#undef COIL_FMA
  __m256 sum = _mm256_setzero_ps();
  COIL_EACH(COIL_SUM8)
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}
#undef COIL_SUM8
#undef COIL_ZERO8
#undef COIL_SUM
#undef COIL_ZERO
#undef COIL_KEEP
#undef COIL_EACH

template <float (*Kernel)(int64_t)>
void RunPeak(benchmark::State& state, int64_t flops_per_instruction) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  for (auto _ : state) {
    pool.ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) benchmark::DoNotOptimize(Kernel(kSteps));
    });
  }
  state.SetItemsProcessed(state.iterations() * threads * kSteps * kAccumulators *
                          flops_per_instruction);
}

void BM_Bf16DotPeak(benchmark::State& state) {
  if (!CpuFeatures::Get().avx512_bf16) {
    state.SkipWithError("this CPU has no AVX-512 BF16");
    return;
  }
  RunPeak<&Bf16Dots>(state, 64);
}

void BM_F32FmaPeak(benchmark::State& state) {
  if (!CpuFeatures::Get().avx512) {
    state.SkipWithError("this CPU has no AVX-512");
    return;
  }
  RunPeak<&F32Fmas>(state, 32);
}

void BM_F32FmaPeakAvx2(benchmark::State& state) {
  if (!CpuFeatures::Get().avx2_fma) {
    state.SkipWithError("this CPU has no AVX2 and FMA");
    return;
  }
  RunPeak<&F32Fmas8>(state, 16);
}

BENCHMARK(BM_Bf16DotPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32FmaPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32FmaPeakAvx2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif  // __x86_64__

}  // namespace
}  // namespace coil

BENCHMARK_MAIN();
