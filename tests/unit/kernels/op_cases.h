// The op case registry shared by the op harness (tests/unit/kernels/backend_ops_test.cc:
// every op x backend x dtype against the CPU reference mode) and the benchmark
// (tests/bench/backend_ops_bench.cc: the same cases in perf mode, GFLOP/s and GB/s).
// A case owns its host inputs (drawn from a seed derived from its name), puts them in a
// backend's memory, runs its op and reads back every output, including its state rows.
#ifndef COIL_TESTS_UNIT_KERNELS_OP_CASES_H_
#define COIL_TESTS_UNIT_KERNELS_OP_CASES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace coil::testing {

struct OpResult {
  // Named outputs compared by NMSE against the reference (state rows the batch used too).
  std::vector<std::pair<std::string, std::vector<float>>> outputs;
  // Guard violations: state rows not in the batch (and the scratch row) that changed, or
  // bytes written past a tensor. Empty when clean.
  std::vector<std::string> guard_violations;
};

class OpCase {
 public:
  virtual ~OpCase() = default;
  // "SsmScan": the op's BackendOpName()
  virtual std::string Op() const = 0;
  // "f32_h4_p8_ds16_g2_seqs4" (the dtype first)
  virtual std::string Params() const = 0;
  std::string Name() const { return Op() + "/" + Params(); }
  // Draws the host inputs from `seed`.
  virtual void MakeInputs(uint64_t seed) = 0;
  // Copies the inputs into `backend`'s memory (again on every call: stateful ops start
  // from the same state each time).
  virtual absl::Status Prepare(Backend& backend) = 0;
  // Runs the op on the prepared inputs.
  virtual absl::Status Launch(Backend& backend) = 0;
  // Reads back the outputs and checks the guards.
  virtual absl::StatusOr<OpResult> Collect() = 0;
  // The outputs worked out by the case itself from the op's equations (in double, sharing
  // no code with the kernels), named and ordered as Collect() gives them; empty when the
  // CPU reference mode is the case's only oracle. Valid after MakeInputs.
  virtual std::vector<std::pair<std::string, std::vector<float>>> Expected() const { return {}; }
  // NMSE bound against the reference; 1e-7 unless the case says why it needs more.
  virtual double max_nmse() const { return 1e-7; }
  // The bound for the backend under test (the reference mode is held to max_nmse()): more
  // where a backend computes in lower precision by design.
  virtual double max_nmse_for(BackendKind /*kind*/) const { return max_nmse(); }
  virtual double flops() const = 0;
  virtual double bytes() const = 0;

  absl::StatusOr<OpResult> Run(Backend& backend) {
    absl::Status s = Prepare(backend);
    if (s.ok()) s = Launch(backend);
    if (!s.ok()) return s;
    return Collect();
  }
};

// The correctness cases: small shapes that reach every code path (edges, tails, strided
// rows, shuffled slots, fresh and resuming sequences, chunk-crossing runs).
std::vector<std::unique_ptr<OpCase>> TestOpCases();
// The perf cases at the mamba2-130m shape (d_model 768, d_inner 1536, in_proj 3352,
// vocab 50288), `rows` tokens: `rows` sequences of one token each (decode) or one
// sequence of `rows` tokens (prefill); and the attention and MLP ops at nemotron-130m's
// shape over `context` positions: decode rows at position context - 1, prefill as prompts
// of up to `context` rows that end there.
std::vector<std::unique_ptr<OpCase>> PerfOpCases(int rows, bool decode, int context = 4096);

}  // namespace coil::testing

#endif  // COIL_TESTS_UNIT_KERNELS_OP_CASES_H_
