// What a metric update costs the engine loop, and what a scrape costs: single-threaded
// updates, updates contended by every benchmark thread, and rendering the full coil set.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "engine/metrics/coil_metrics.h"

namespace coil::metrics {
namespace {

CoilMetrics& Shared() {
  static const std::unique_ptr<CoilMetrics> metrics = CoilMetrics::Create().value();
  return *metrics;
}

void BM_CounterIncrement(benchmark::State& state) {
  Counter& counter = Shared().generated_tokens();
  for (auto _ : state) counter.Increment();
}
BENCHMARK(BM_CounterIncrement)->Threads(1)->Threads(2);

void BM_GaugeSet(benchmark::State& state) {
  Gauge& gauge = Shared().requests_running();
  double value = 0;
  for (auto _ : state) gauge.Set(value += 1);
}
BENCHMARK(BM_GaugeSet);

void BM_HistogramObserve(benchmark::State& state) {
  Histogram& histogram = Shared().inter_token_latency();  // 18 bounds
  double value = 0.0;
  for (auto _ : state) {
    histogram.Observe(value);
    value = value > 6.0 ? 0.0 : value + 0.013;  // walks every bucket
  }
}
BENCHMARK(BM_HistogramObserve)->Threads(1)->Threads(2);

void BM_RenderCoilMetrics(benchmark::State& state) {
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = Shared().registry().Render();
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderCoilMetrics);

}  // namespace
}  // namespace coil::metrics

BENCHMARK_MAIN();
