// This machine's memory bandwidth, stream-style, on the CPU backend's own thread pool:
// read (a sum, the pattern of streaming weights and state), copy, and triad, over a
// 256 MiB array (far beyond the caches), 1 and 2 threads. The decode bounds in
// docs/PERFORMANCE.md divide bytes moved per token by these figures.
//   build/tests/bench/memory_bandwidth_bench --benchmark_repetitions=5
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

constexpr int64_t kFloats = int64_t{64} << 20;  // 256 MiB

COIL_VECTORIZE float SumBlock(const float* a, int64_t n) {
  float lanes[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += a[i + j];
  }
  return FoldLanes16(lanes);
}

COIL_VECTORIZE void CopyBlock(const float* a, float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i];
}

COIL_VECTORIZE void TriadBlock(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + 3.0f * b[i];
}

void BM_Read(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> a(kFloats, 1.0f);
  for (auto _ : state) {
    pool.ParallelFor(kFloats, 1 << 16, [&](int64_t b, int64_t e) {
      float sum = SumBlock(a.data() + b, e - b);
      benchmark::DoNotOptimize(sum);
    });
  }
  state.SetBytesProcessed(state.iterations() * kFloats * 4);
}

void BM_Copy(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> a(kFloats, 1.0f), b(kFloats, 0.0f);
  for (auto _ : state) {
    pool.ParallelFor(kFloats, 1 << 16, [&](int64_t s, int64_t e) {
      CopyBlock(a.data() + s, b.data() + s, e - s);
    });
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * kFloats * 8);
}

void BM_Triad(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> a(kFloats, 1.0f), b(kFloats, 2.0f), c(kFloats, 0.0f);
  for (auto _ : state) {
    pool.ParallelFor(kFloats, 1 << 16, [&](int64_t s, int64_t e) {
      TriadBlock(a.data() + s, b.data() + s, c.data() + s, e - s);
    });
    benchmark::DoNotOptimize(c.data());
  }
  state.SetBytesProcessed(state.iterations() * kFloats * 12);
}

BENCHMARK(BM_Read)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Copy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Triad)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace coil

BENCHMARK_MAIN();
