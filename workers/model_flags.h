// The model-loading flags of every program that loads a model (coil-serve, coil-run,
// model_bench), defined once: --weights, --cuda-graphs, --fused-mixer. A program links
// coil_model_flags and reads them with LoadOptionsFromCommandLine().
#ifndef COIL_WORKERS_MODEL_FLAGS_H_
#define COIL_WORKERS_MODEL_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "workers/model/model.h"
#include "workers/model_runner.h"

ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(bool, cuda_graphs);
ABSL_DECLARE_FLAG(bool, fused_mixer);

namespace coil {

// The parsed flags (progress left unset); INVALID_ARGUMENT naming a wrong --weights.
absl::StatusOr<model::LoadOptions> LoadOptionsFromCommandLine();
// --cuda-graphs.
RunnerOptions RunnerOptionsFromCommandLine();

}  // namespace coil

#endif  // COIL_WORKERS_MODEL_FLAGS_H_
