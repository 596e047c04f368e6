// coil's own AVX-512 BF16 matmul against oneDNN's bf16 matmul at the mamba2-130m shapes,
// for M = 1 (decode: bandwidth bound) and M = 512 (prefill: compute bound), and whether
// each one's row results change with M (batch invariance). oneDNN's threads come from
// OpenMP: run with OMP_NUM_THREADS=2 to compare with coil's threads:2.
//   OMP_NUM_THREADS=2 build/tests/bench/matmul_dnnl_bench --benchmark_repetitions=3
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/vec_math.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace coil {
namespace {

struct Shape {
  int64_t n, k;
};
constexpr Shape kShapes[] = {{3352, 768}, {768, 1536}, {50288, 768}};

std::vector<uint16_t> RandomBf16(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  std::vector<uint16_t> v(count);
  for (auto& h : v) h = FloatToBf16(dist(rng));
  return v;
}

std::vector<float> RandomF32(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& f : v) f = dist(rng);
  return v;
}

class DnnlMatmul {
 public:
  DnnlMatmul(int64_t m, int64_t n, int64_t k, const uint16_t* w)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), m_(m), k_(k), xb_(m * k) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc a_md({m, k}, dt::bf16, tag::ab);
    dnnl::memory::desc b_md({k, n}, dt::bf16, tag::ba);  // W [n, k] row-major
    dnnl::memory::desc c_md({m, n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine_);
    prim_ = dnnl::matmul(pd);
    a_ = dnnl::memory(a_md, engine_, xb_.data());
    b_ = dnnl::memory(b_md, engine_, const_cast<uint16_t*>(w));
    c_ = dnnl::memory(c_md, engine_);
  }
  // y = bf16(x) W^T; the f32 -> bf16 rounding of x is part of the op, as in coil's kernel.
  const float* Run(const float* x) {
    for (int64_t i = 0; i < m_ * k_; ++i) xb_[i] = FloatToBf16(x[i]);
    prim_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
    return static_cast<const float*>(c_.get_data_handle());
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  int64_t m_, k_;
  std::vector<uint16_t> xb_;
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
};

void SetCounters(benchmark::State& state, int64_t m, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * s.n * s.k * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(
      (2.0 * s.n * s.k + 4.0 * m * (s.k + s.n)) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Dnnl(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const auto w = RandomBf16(s.n * s.k, 1);
  const auto x = RandomF32(m * s.k, 2);
  DnnlMatmul mm(m, s.n, s.k, w.data());
  for (auto _ : state) benchmark::DoNotOptimize(mm.Run(x.data()));
  SetCounters(state, m, s);
  // Batch invariance: row 0 of this M against the same row computed with M = 1.
  DnnlMatmul one(1, s.n, s.k, w.data());
  std::vector<float> row0(mm.Run(x.data()), mm.Run(x.data()) + s.n);
  state.counters["row_same_as_m1"] =
      std::memcmp(row0.data(), one.Run(x.data()), s.n * 4) == 0 ? 1 : 0;
}

void BM_Coil(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  auto backend = CreateBackend(BackendKind::kCpu, {.threads = static_cast<int>(state.range(2))});
  auto w = RandomBf16(s.n * s.k, 1);
  auto x = RandomF32(m * s.k, 2);
  std::vector<float> y(m * s.n), y1(s.n);
  const Tensor wt(w.data(), DType::kBF16, {s.n, s.k});
  for (auto _ : state) {
    (void)(*backend)->Matmul(Tensor(x.data(), DType::kF32, {m, s.k}), wt,
                             Tensor(y.data(), DType::kF32, {m, s.n}));
  }
  SetCounters(state, m, s);
  (void)(*backend)->Matmul(Tensor(x.data(), DType::kF32, {1, s.k}), wt,
                           Tensor(y1.data(), DType::kF32, {1, s.n}));
  state.counters["row_same_as_m1"] = std::memcmp(y.data(), y1.data(), s.n * 4) == 0 ? 1 : 0;
}

BENCHMARK(BM_Dnnl)
    ->ArgsProduct({{0, 1, 2}, {1, 512}})
    ->ArgNames({"shape", "m"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Coil)
    ->ArgsProduct({{0, 1, 2}, {1, 512}, {1, 2}})
    ->ArgNames({"shape", "m", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace coil

BENCHMARK_MAIN();
