// The model-loading flags of every program that loads a model (coil-serve, coil-run,
// model_bench), defined once: --weights, --cuda-graphs, --fused-mixer, --state-dtype,
// --max-host-memory. A program links coil_model_flags and reads them with
// LoadOptionsFromCommandLine(), RunnerOptionsFromCommandLine() and
// MaxHostMemoryFromCommandLine().
#ifndef COIL_WORKERS_MODEL_FLAGS_H_
#define COIL_WORKERS_MODEL_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"
#include "workers/model/model.h"
#include "workers/model_runner.h"

namespace coil {

// --state-dtype's value: the SSM state pool's type, f32 or bf16 (anything else fails the
// command line with that list).
struct StateDtypeFlag {
  DType dtype = DType::kF32;
};
bool AbslParseFlag(absl::string_view text, StateDtypeFlag* flag, std::string* error);
std::string AbslUnparseFlag(StateDtypeFlag flag);

}  // namespace coil

ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(coil::StateDtypeFlag, state_dtype);
ABSL_DECLARE_FLAG(bool, cuda_graphs);
ABSL_DECLARE_FLAG(bool, fused_mixer);
ABSL_DECLARE_FLAG(std::string, max_host_memory);

namespace coil {

// The parsed flags (progress left unset); INVALID_ARGUMENT naming a wrong --weights.
absl::StatusOr<model::LoadOptions> LoadOptionsFromCommandLine();
// --cuda-graphs, --state-dtype.
RunnerOptions RunnerOptionsFromCommandLine();
// --max-host-memory in bytes (0 when not given: no cap beyond what the host reports);
// INVALID_ARGUMENT for a size ParseByteSize does not read.
absl::StatusOr<int64_t> MaxHostMemoryFromCommandLine();

}  // namespace coil

#endif  // COIL_WORKERS_MODEL_FLAGS_H_
