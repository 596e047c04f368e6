// ModelFiles: a model directory opened for reading, config.json parsed and its tensor files
// mapped, checked against each other once, here: every tensor the config needs is present
// with its shape, and none is left unused. Everything that loads a model starts from one.
#ifndef COIL_WORKERS_MODEL_MODEL_FILES_H_
#define COIL_WORKERS_MODEL_MODEL_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/model/model_config.h"

namespace coil::model {

struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
};

// A tensor the config requires, under its canonical name, with its shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<TensorSpec> RequiredTensors(const ModelConfig& config);

// Checks a checkpoint against its config: every required tensor is present with its shape,
// and no tensor is left unused (a tied lm_head.weight is accepted when it holds the
// embedding's values). Names each offending tensor.
absl::Status ValidateCheckpoint(const ModelConfig& config, const checkpoint::Checkpoint& checkpoint);

// LoadModelConfig + checkpoint::OpenCheckpointFiles + ValidateCheckpoint.
absl::StatusOr<ModelFiles> OpenModelFiles(const std::string& model_dir);

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MODEL_FILES_H_
