// This machine's memory bandwidth, stream-style, on the CPU backend's own thread pool:
// read (a sum, the pattern of streaming weights and state; also with software prefetch),
// copy, and triad, over a 256 MiB array (far beyond the caches), 1 and 2 threads. The
// decode bounds in docs/PERFORMANCE.md divide bytes moved per token by these figures.
// Beside them, the decode state update as the model runs it: SsmScan of one token for each
// of B sequences (mamba2-130m's 24 heads x 64 x 128 state per layer), over 24 layers'
// state pools in turn, so each step streams 24 x B x 786 KB of f32 state in and out (600 MB
// at B = 32, beyond the caches), or half that with a bf16 state. Its bytes per step are the
// state read and written once; GB/s beside triad's says how close the update comes to the
// streaming rate. Every array comes from the CPU backend's Allocate, as the model's weights
// and state pools do (2 MiB aligned, on transparent huge pages where the kernel gives them),
// so the bounds are measured on the same kind of memory the model streams.
//   build/tests/bench/memory_bandwidth_bench --benchmark_repetitions=5
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

constexpr int64_t kFloats = int64_t{64} << 20;  // 256 MiB

// `count` values of T from the CPU backend's Allocate, each set to `value`; the Buffer
// keeps them.
template <typename T>
T* BackendArray(Buffer& keep, int64_t count, T value) {
  static const std::unique_ptr<Backend> backend = [] {
    auto created = CreateBackend(BackendKind::kCpu, {.threads = 1});
    return created.ok() ? std::move(*created) : nullptr;
  }();
  if (backend == nullptr) return nullptr;
  auto buffer = backend->Allocate(static_cast<size_t>(count) * sizeof(T));
  if (!buffer.ok()) return nullptr;
  keep = std::move(*buffer);
  T* data = static_cast<T*>(keep.data());
  std::fill(data, data + count, value);
  return data;
}

COIL_VECTORIZE float SumBlock(const float* a, int64_t n) {
  float lanes[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += a[i + j];
  }
  return FoldLanes16(lanes);
}

// The same sum with each cache line prefetched kPrefetchFloats ahead, as the matmuls prefetch
// their weights. Over one long array the hardware prefetchers alone reach the same rate; the
// matmuls' 1.5-3 KB weight rows are what they cannot follow (docs/kernels.md).
constexpr int64_t kPrefetchFloats = 1024;  // 4 KB

COIL_VECTORIZE float SumBlockPrefetched(const float* a, int64_t n) {
  float lanes[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    __builtin_prefetch(a + i + kPrefetchFloats, 0, 3);
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

template <float (*Sum)(const float*, int64_t)>
void RunRead(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  Buffer keep;
  const float* a = BackendArray(keep, kFloats, 1.0f);
  if (a == nullptr) {
    state.SkipWithError("cannot allocate the array");
    return;
  }
  for (auto _ : state) {
    pool.ParallelFor(kFloats, 1 << 16, [&](int64_t b, int64_t e) {
      float sum = Sum(a + b, e - b);
      benchmark::DoNotOptimize(sum);
    });
  }
  state.SetBytesProcessed(state.iterations() * kFloats * 4);
}

void BM_Read(benchmark::State& state) { RunRead<&SumBlock>(state); }
void BM_ReadPrefetched(benchmark::State& state) { RunRead<&SumBlockPrefetched>(state); }

void BM_Copy(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  Buffer keep_a, keep_b;
  const float* a = BackendArray(keep_a, kFloats, 1.0f);
  float* b = BackendArray(keep_b, kFloats, 0.0f);
  if (a == nullptr || b == nullptr) {
    state.SkipWithError("cannot allocate the arrays");
    return;
  }
  for (auto _ : state) {
    pool.ParallelFor(kFloats, 1 << 16,
                     [&](int64_t s, int64_t e) { CopyBlock(a + s, b + s, e - s); });
    benchmark::DoNotOptimize(b);
  }
  state.SetBytesProcessed(state.iterations() * kFloats * 8);
}

void BM_Triad(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  Buffer keep_a, keep_b, keep_c;
  const float* a = BackendArray(keep_a, kFloats, 1.0f);
  const float* b = BackendArray(keep_b, kFloats, 2.0f);
  float* c = BackendArray(keep_c, kFloats, 0.0f);
  if (a == nullptr || b == nullptr || c == nullptr) {
    state.SkipWithError("cannot allocate the arrays");
    return;
  }
  for (auto _ : state) {
    pool.ParallelFor(kFloats, 1 << 16,
                     [&](int64_t s, int64_t e) { TriadBlock(a + s, b + s, c + s, e - s); });
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(state.iterations() * kFloats * 12);
}

// mamba2-130m's scan shape.
constexpr int64_t kLayers = 24, kHeads = 24, kHeaddim = 64, kDState = 128;

void BM_DecodeStateUpdate(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const DType state_dtype = state.range(2) != 0 ? DType::kBF16 : DType::kF32;
  auto backend = CreateBackend(BackendKind::kCpu, {.threads = static_cast<int>(state.range(1))});
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  const int64_t per_row = kHeads * kHeaddim * kDState;
  const int64_t width = kHeads * kHeaddim + 2 * kDState + kHeads;  // x | B | C | dt
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  // Each layer's pool as bytes of the state's type (the bf16 bits of the same values).
  const size_t element = DTypeSize(state_dtype);
  std::vector<Buffer> pools(kLayers);
  std::vector<std::vector<float>> inputs(kLayers);
  for (int64_t l = 0; l < kLayers; ++l) {
    auto pool = (*backend)->Allocate((batch + 1) * per_row * element);
    if (!pool.ok()) {
      state.SkipWithError(std::string(pool.status().message()).c_str());
      return;
    }
    pools[l] = std::move(*pool);
    uint8_t* bytes = static_cast<uint8_t*>(pools[l].data());
    for (int64_t i = 0; i < (batch + 1) * per_row; ++i) {
      const float v = uniform(rng);
      if (state_dtype == DType::kBF16) {
        const uint16_t h = FloatToBf16(v);
        std::memcpy(bytes + 2 * i, &h, 2);
      } else {
        std::memcpy(bytes + 4 * i, &v, 4);
      }
    }
    inputs[l].resize(batch * width);
    for (float& v : inputs[l]) v = uniform(rng);
  }
  std::vector<float> a_log(kHeads, 0.5f), d(kHeads, 1.0f), dt_bias(kHeads, -2.0f);
  std::vector<float> y(batch * kHeads * kHeaddim);
  RecurrentBatch rb;
  for (int s = 0; s < batch; ++s) rb.Add(1, s, false, 100);
  const Tensor vec_a(a_log.data(), DType::kF32, {kHeads}), vec_d(d.data(), DType::kF32, {kHeads}),
      vec_bias(dt_bias.data(), DType::kF32, {kHeads});
  const Tensor out(y.data(), DType::kF32, {batch, kHeads * kHeaddim});
  const int64_t hp = kHeads * kHeaddim;
  for (auto _ : state) {
    for (int64_t l = 0; l < kLayers; ++l) {
      const Tensor in(inputs[l].data(), DType::kF32, {batch, width});
      const absl::Status s = (*backend)->SsmScan(
          in.Columns(0, hp), in.Columns(hp + 2 * kDState, kHeads), vec_a, in.Columns(hp, kDState),
          in.Columns(hp + kDState, kDState), vec_d, vec_bias, SsmScanOptions{}, rb,
          Tensor(pools[l].data(), state_dtype, {batch + 1, kHeads, kHeaddim, kDState}), out);
      if (!s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        return;
      }
    }
  }
  // The state read and written once per layer and sequence.
  state.SetBytesProcessed(state.iterations() * kLayers * batch * per_row *
                          static_cast<int64_t>(element) * 2);
}

BENCHMARK(BM_Read)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadPrefetched)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Copy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Triad)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
// (batch, threads, bf16 state)
BENCHMARK(BM_DecodeStateUpdate)
    ->Args({1, 1, 0})
    ->Args({1, 2, 0})
    ->Args({32, 1, 0})
    ->Args({32, 2, 0})
    ->Args({32, 1, 1})
    ->Args({32, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace coil

BENCHMARK_MAIN();
