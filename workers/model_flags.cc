#include "workers/model_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "engine/memory_budget.h"

ABSL_FLAG(std::string, weights, "auto",
          "matrix weight type: auto (bf16 when the checkpoint stores 16-bit weights), f32 or bf16");
ABSL_FLAG(bool, cuda_graphs, true,
          "with --device cuda: replay decode-only steps as CUDA graphs (false: op by op, for "
          "debugging)");
ABSL_FLAG(coil::StateDtypeFlag, state_dtype, coil::StateDtypeFlag{},
          "the SSM state pool's type: f32, or bf16 (half the state's memory, so twice the "
          "sequences in the same budget, and half its traffic in batched decode; stored "
          "rounded between steps, computed in fp32 within one)");
ABSL_FLAG(bool, fused_mixer, true,
          "run a decode step's conv, scan and gated norm as one fused op (false: its ops in "
          "turn, the same tokens; for measuring the fusion)");
ABSL_FLAG(std::string, max_host_memory, "",
          "the most host memory this process may use, e.g. 8GiB (default: what the machine "
          "and its cgroup allow); a checkpoint whose weights and state do not fit is refused "
          "at start with the sizes");

namespace coil {

bool AbslParseFlag(absl::string_view text, StateDtypeFlag* flag, std::string* error) {
  if (text == "f32") {
    flag->dtype = DType::kF32;
  } else if (text == "bf16") {
    flag->dtype = DType::kBF16;
  } else {
    *error = "expected f32 or bf16";
    return false;
  }
  return true;
}

std::string AbslUnparseFlag(StateDtypeFlag flag) {
  return flag.dtype == DType::kBF16 ? "bf16" : "f32";
}

absl::StatusOr<model::LoadOptions> LoadOptionsFromCommandLine() {
  model::LoadOptions load;
  absl::StatusOr<model::WeightType> weights = model::ParseWeightType(absl::GetFlag(FLAGS_weights));
  if (!weights.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--weights: ", weights.status().message()));
  }
  load.weight_type = *weights;
  load.fused_mixer = absl::GetFlag(FLAGS_fused_mixer);
  return load;
}

RunnerOptions RunnerOptionsFromCommandLine() {
  RunnerOptions run;
  run.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  run.state_dtype = absl::GetFlag(FLAGS_state_dtype).dtype;
  return run;
}

absl::StatusOr<int64_t> MaxHostMemoryFromCommandLine() {
  const std::string text = absl::GetFlag(FLAGS_max_host_memory);
  if (text.empty()) return 0;
  return ParseByteSize(text, "--max-host-memory");
}

}  // namespace coil
