// Perf mode of the op harness: every op case at the mamba2-130m shape, on the CPU backend
// with 1 and 2 threads and, where a GPU is visible, on the CUDA backend (each iteration
// waits for the stream, so a figure includes launch and synchronization), for decode
// batches (1, 8, 32 sequences of one token) and a 512-token prefill. Reports GFLOP/s and
// GB/s (the bytes an op must move at least: weights, activations, state read and
// written). Prints figures; asserts nothing.
//   build/tests/bench/backend_ops_bench --benchmark_filter=Matmul --benchmark_repetitions=3
//   build/tests/bench/backend_ops_bench --benchmark_filter=/cuda
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "kernels/backend_factory.h"
#include "tests/unit/kernels/op_cases.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::testing {
namespace {

void RunCase(benchmark::State& state, int rows, bool decode, int case_index, BackendKind kind,
             int threads) {
  auto backend = CreateBackend(kind, {.threads = threads});
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  auto op = std::move(PerfOpCases(rows, decode)[case_index]);
  op->MakeInputs(SeedFromName(op->Name()));
  absl::Status s = op->Prepare(**backend);
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  // One untimed run: first-use work (a GPU matmul's plan and its 16-bit copy of x).
  s = op->Launch(**backend);
  if (s.ok()) s = (*backend)->Synchronize();
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  for (auto _ : state) {
    s = op->Launch(**backend);
    if (s.ok()) s = (*backend)->Synchronize();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.counters["GFLOP/s"] = benchmark::Counter(op->flops() * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(op->bytes() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void RegisterAll() {
  struct Target {
    BackendKind kind;
    int threads;
    std::string name;
  };
  std::vector<Target> targets = {{BackendKind::kCpu, 1, "threads:1"},
                                 {BackendKind::kCpu, 2, "threads:2"}};
  // The CUDA entries exist only where a GPU is visible (elsewhere they would all fail).
  if (CreateBackend(BackendKind::kCuda).ok()) targets.push_back({BackendKind::kCuda, 1, "cuda"});
  struct Mode {
    int rows;
    bool decode;
    const char* name;
  };
  for (const Mode& mode : {Mode{1, true, "decode1"}, Mode{8, true, "decode8"},
                           Mode{32, true, "decode32"}, Mode{512, false, "prefill512"}}) {
    const auto cases = PerfOpCases(mode.rows, mode.decode);
    for (int i = 0; i < static_cast<int>(cases.size()); ++i) {
      for (const Target& target : targets) {
        const std::string name =
            absl::StrCat(cases[i]->Op(), "/", mode.name, "/", cases[i]->Params(), "/",
                         target.name);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          RunCase(st, mode.rows, mode.decode, i, target.kind, target.threads);
        })->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  }
}

}  // namespace
}  // namespace coil::testing

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  coil::testing::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
