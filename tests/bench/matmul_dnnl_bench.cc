// coil's own CPU matmul against oneDNN's matmul at the mamba2-130m shapes, with bf16
// weights (coil's AVX-512 BF16 tiles, or its AVX2 widening form) and with f32 weights
// (both sides' fp32 FMA kernels: the like-for-like pair on a machine without AVX-512 BF16,
// where oneDNN 2.6 has no fast bf16 matmul), for M = 1 (decode: bandwidth bound) and
// M = 512 (prefill: compute bound), and whether each one's row results change with M
// (batch invariance). oneDNN's threads come from OpenMP: run with OMP_NUM_THREADS=2 to
// compare with coil's threads:2.
//   OMP_NUM_THREADS=2 build/tests/bench/matmul_dnnl_bench --benchmark_repetitions=3
#include <cstring>
#include <memory>
#include <random>
#include <string>
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

// The weights of one shape in one dtype: bf16 (the models' matrices) or f32.
struct Weights {
  Weights(const Shape& s, bool bf16) : bf16(bf16) {
    if (bf16) {
      w16 = RandomBf16(s.n * s.k, 1);
    } else {
      w32 = RandomF32(s.n * s.k, 1);
      for (float& f : w32) f *= 0.1f;
    }
  }
  const void* data() const { return bf16 ? static_cast<const void*>(w16.data()) : w32.data(); }
  bool bf16;
  std::vector<uint16_t> w16;
  std::vector<float> w32;
};

class DnnlMatmul {
 public:
  DnnlMatmul(int64_t m, int64_t n, int64_t k, const Weights& w)
      : engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_),
        m_(m),
        k_(k),
        bf16_(w.bf16),
        xb_(bf16_ ? m * k : 0) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt in = bf16_ ? dt::bf16 : dt::f32;
    dnnl::memory::desc a_md({m, k}, in, tag::ab);
    dnnl::memory::desc b_md({k, n}, in, tag::ba);  // W [n, k] row-major
    dnnl::memory::desc c_md({m, n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine_);
    impl_ = pd.impl_info_str();
    prim_ = dnnl::matmul(pd);
    a_ = dnnl::memory(a_md, engine_, bf16_ ? static_cast<void*>(xb_.data()) : nullptr);
    b_ = dnnl::memory(b_md, engine_, const_cast<void*>(w.data()));
    c_ = dnnl::memory(c_md, engine_);
  }
  // y = x W^T. With bf16 weights x is rounded to bf16 first, as in coil's kernel; that
  // rounding is part of the op.
  const float* Run(const float* x) {
    if (bf16_) {
      for (int64_t i = 0; i < m_ * k_; ++i) xb_[i] = FloatToBf16(x[i]);
    } else {
      a_.set_data_handle(const_cast<float*>(x));
    }
    prim_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
    return static_cast<const float*>(c_.get_data_handle());
  }
  // oneDNN's name for the implementation it picked ("brg:avx512_core_bf16", "gemm:jit", ...).
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  int64_t m_, k_;
  bool bf16_;
  std::vector<uint16_t> xb_;
  std::string impl_;
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
};

void SetCounters(benchmark::State& state, int64_t m, const Shape& s, const Weights& w) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * s.n * s.k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(((w.bf16 ? 2.0 : 4.0) * s.n * s.k + 4.0 * m * (s.k + s.n)) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Dnnl(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const Weights w(s, state.range(2) == 0);
  const auto x = RandomF32(m * s.k, 2);
  std::unique_ptr<DnnlMatmul> made;
  try {
    made = std::make_unique<DnnlMatmul>(m, s.n, s.k, w);
  } catch (const dnnl::error& e) {
    // oneDNN 2.6 has a bf16 matmul only where the CPU has AVX-512.
    state.SkipWithError(
        (std::string("oneDNN has no such matmul on this CPU: ") + e.what()).c_str());
    return;
  }
  state.SetLabel(made->impl());
  for (auto _ : state) benchmark::DoNotOptimize(made->Run(x.data()));
  SetCounters(state, m, s, w);
  // Batch invariance: row 0 of this M against the same row computed with M = 1.
  DnnlMatmul one(1, s.n, s.k, w);
  std::vector<float> row0(made->Run(x.data()), made->Run(x.data()) + s.n);
  state.counters["row_same_as_m1"] =
      std::memcmp(row0.data(), one.Run(x.data()), s.n * 4) == 0 ? 1 : 0;
}

void BM_Coil(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const Weights w(s, state.range(2) == 0);
  auto backend = CreateBackend(BackendKind::kCpu, {.threads = static_cast<int>(state.range(3))});
  auto x = RandomF32(m * s.k, 2);
  std::vector<float> y(m * s.n), y1(s.n);
  const Tensor wt(const_cast<void*>(w.data()), w.bf16 ? DType::kBF16 : DType::kF32, {s.n, s.k});
  for (auto _ : state) {
    (void)(*backend)->Matmul(Tensor(x.data(), DType::kF32, {m, s.k}), wt,
                             Tensor(y.data(), DType::kF32, {m, s.n}));
  }
  SetCounters(state, m, s, w);
  (void)(*backend)->Matmul(Tensor(x.data(), DType::kF32, {1, s.k}), wt,
                           Tensor(y1.data(), DType::kF32, {1, s.n}));
  state.counters["row_same_as_m1"] = std::memcmp(y.data(), y1.data(), s.n * 4) == 0 ? 1 : 0;
}

BENCHMARK(BM_Dnnl)
    ->ArgsProduct({{0, 1, 2}, {1, 512}, {0, 1}})
    ->ArgNames({"shape", "m", "f32w"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Coil)
    ->ArgsProduct({{0, 1, 2}, {1, 512}, {0, 1}, {1, 2}})
    ->ArgNames({"shape", "m", "f32w", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace coil

BENCHMARK_MAIN();
