// Per-op figures at the mamba2-130m shape on one backend (the op harness's perf cases,
// tests/unit/kernels/op_cases.h): for each --rows count, decode (that many sequences of one
// token) when rows <= --max-decode-rows, else prefill (one sequence of that many tokens).
// The attention ops (KvCacheWrite, PagedAttention) and Relu2 run at nemotron-130m's shape
// over --context positions: decode rows at position context - 1, prefill prompts of up to
// --context rows ending there (a bf16 cache of 1 KiB per position and sequence, so mind
// rows x context in decode).
// Each case runs once untimed (first-use work: a GPU matmul's plan), then --repeats launches
// between two Synchronize() calls, timed by the wall clock: on a GPU the queued launches
// overlap the kernels, so with 20+ repeats the figure is the device time per call (or the
// launch rate, for kernels shorter than a launch). Stateful ops (conv, scan) re-run on the
// state their previous launch left: the work per call is the same. With --fastest each
// launch is timed alone and the fastest kept (a CPU shared with other work). Prints one Markdown
// table: time per call, GB/s (the bytes the op must move), % of --bandwidth-gbs, GFLOP/s.
// A plain program (no Google Benchmark): it builds wherever the core does.
//
//   op_bench [--device cpu|cuda] [--rows 1,256,2048,16384] [--ops SsmScan,Matmul]
//            [--repeats 20] [--bandwidth-gbs G] [--threads T] [--context 4096] [--fastest]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/cpus.h"
#include "kernels/backend_factory.h"
#include "workers/backend_flags.h"
#include "tests/unit/kernels/op_cases.h"
#include "tests/unit/kernels/op_test_util.h"

// --device, --threads, --cuda-pdl and --cuda-matmul-rows: workers/backend_flags.h.
ABSL_FLAG(std::string, rows, "1,256,2048,16384", "token rows per case, comma-separated");
ABSL_FLAG(int32_t, max_decode_rows, 256,
          "rows up to this count are decode batches, larger ones one prefill sequence");
ABSL_FLAG(std::string, ops, "", "only these ops, comma-separated (e.g. SsmScan,Matmul); all if empty");
ABSL_FLAG(int32_t, repeats, 20, "timed launches per case (20+ on a GPU)");
ABSL_FLAG(double, bandwidth_gbs, -1,
          "memory bandwidth for the bound, GB/s (-1: 4800, an H200, with cuda; 33 on the cpu, "
          "docs/PERFORMANCE.md)");
ABSL_FLAG(bool, fastest, false,
          "time each launch alone (synchronized) and report the fastest, not the mean: on a "
          "machine shared with other work the fastest call is the one nothing interrupted");
ABSL_FLAG(int32_t, context, 4096,
          "positions the attention cases attend over (decode rows at context - 1, prefill "
          "prompts of up to this many rows)");

namespace coil::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Figure {
  double us_per_call = 0;
};

absl::StatusOr<Figure> Measure(Backend& backend, OpCase& op, int repeats, bool fastest) {
  op.MakeInputs(SeedFromName(op.Name()));
  COIL_RETURN_IF_ERROR(op.Prepare(backend));
  COIL_RETURN_IF_ERROR(op.Launch(backend));
  COIL_RETURN_IF_ERROR(backend.Synchronize());
  if (fastest) {  // each call alone, the fastest kept
    double best = 0;
    for (int i = 0; i < repeats; ++i) {
      const Clock::time_point start = Clock::now();
      COIL_RETURN_IF_ERROR(op.Launch(backend));
      COIL_RETURN_IF_ERROR(backend.Synchronize());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (i == 0 || seconds < best) best = seconds;
    }
    return Figure{best * 1e6};
  }
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < repeats; ++i) COIL_RETURN_IF_ERROR(op.Launch(backend));
  COIL_RETURN_IF_ERROR(backend.Synchronize());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return Figure{seconds * 1e6 / repeats};
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "op_bench [--device cpu|cuda] [--rows 1,256,2048,16384] [--ops SsmScan,Matmul] "
      "[--repeats 20] [--bandwidth-gbs G] [--threads T] [--context 4096] [--fastest]");
  ParseDashedCommandLine(argc, argv);
  absl::StatusOr<BackendFlags> device = BackendFlagsFromCommandLine();
  if (!device.ok()) {
    std::fprintf(stderr, "op_bench: %s\n", std::string(device.status().message()).c_str());
    return 2;
  }
  const BackendKind* kind = &device->device;
  std::vector<int> rows_list;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_rows), ',', absl::SkipWhitespace())) {
    int rows = 0;
    if (!absl::SimpleAtoi(part, &rows) || rows < 1) {
      std::fprintf(stderr, "op_bench: --rows %s: expected positive integers, e.g. 1,256,2048\n",
                   std::string(part).c_str());
      return 2;
    }
    rows_list.push_back(rows);
  }
  const std::vector<std::string> ops =
      absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipWhitespace());
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (repeats < 1) {
    std::fprintf(stderr, "op_bench: --repeats %d: expected at least 1\n", repeats);
    return 2;
  }
  const int context = absl::GetFlag(FLAGS_context);
  if (context < 1) {
    std::fprintf(stderr, "op_bench: --context %d: expected at least 1\n", context);
    return 2;
  }
  double bandwidth_gbs = absl::GetFlag(FLAGS_bandwidth_gbs);
  if (bandwidth_gbs <= 0) bandwidth_gbs = *kind == BackendKind::kCuda ? 4800 : 33;

  device->options.threads = ChooseThreads(device->options.threads, 1);
  auto backend = CreateBackend(*kind, device->options);
  if (!backend.ok()) {
    std::fprintf(stderr, "op_bench: %s\n", std::string(backend.status().message()).c_str());
    return 1;
  }
  std::printf("op_bench: %s, %d repeats, bound at %.0f GB/s\n\n", (*backend)->Name().c_str(),
              repeats, bandwidth_gbs);
  std::printf("| op | mode | rows | params | µs/call | GB/s | %% of %.0f GB/s | GFLOP/s |\n",
              bandwidth_gbs);
  std::printf("|---|---|---:|---|---:|---:|---:|---:|\n");
  std::fflush(stdout);

  int failures = 0, ran = 0;
  for (int rows : rows_list) {
    const bool decode = rows <= absl::GetFlag(FLAGS_max_decode_rows);
    std::vector<std::unique_ptr<OpCase>> cases = PerfOpCases(rows, decode, context);
    for (std::unique_ptr<OpCase>& op : cases) {
      if (!ops.empty() && std::find(ops.begin(), ops.end(), op->Op()) == ops.end()) continue;
      ++ran;
      const absl::StatusOr<Figure> figure =
          Measure(**backend, *op, repeats, absl::GetFlag(FLAGS_fastest));
      const std::string head = absl::StrCat("| ", op->Op(), " | ", decode ? "decode" : "prefill",
                                            " | ", rows, " | ", op->Params(), " | ");
      if (!figure.ok()) {
        ++failures;
        std::printf("%sfailed: %s | | | |\n", head.c_str(),
                    std::string(figure.status().message()).c_str());
      } else {
        // bytes() and flops() are known once MakeInputs has built the batch.
        const double gbs = op->bytes() / (figure->us_per_call * 1e3);
        const double gflops = op->flops() / (figure->us_per_call * 1e3);
        std::printf("%s%s | %s | %.1f%% | %s |\n", head.c_str(),
                    absl::StrFormat("%.2f", figure->us_per_call).c_str(),
                    absl::StrFormat("%.1f", gbs).c_str(), 100.0 * gbs / bandwidth_gbs,
                    op->flops() > 0 ? absl::StrFormat("%.1f", gflops).c_str() : "-");
      }
      std::fflush(stdout);
      op.reset();  // free this case's host and device memory before the next one
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "op_bench: --ops %s matched no case; op names: %s\n",
                 absl::GetFlag(FLAGS_ops).c_str(), absl::StrJoin(kBackendOps, ", ").c_str());
    return 2;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace coil::testing

int main(int argc, char** argv) { return coil::testing::Main(argc, argv); }
