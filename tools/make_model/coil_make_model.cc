// coil-make-model: writes a deterministic random checkpoint of a named shape (Mamba2: tiny,
// 130m; Nemotron-H hybrids: nemotron-tiny, nemotron-130m), in either key layout (a hybrid
// has Hugging Face's only) and file format, for tests, benchmarks and the demo. The same
// flags give the same bytes on every machine.
//
//   coil-make-model --shape tiny --out /tmp/tiny [--layout mamba_ssm|hf]
//       [--format safetensors|pytorch] [--dtype f32|bf16|f16] [--vector_dtype ...]
//       [--seed 0] [--shards 1] [--set ngroups=4 --set tie_embeddings=false]
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/data_files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "tools/make_model/tokenizer_cut.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/checkpoint/dtype.h"
#include "workers/model/model_writer.h"

ABSL_FLAG(std::string, shape, "tiny",
          "model shape: tiny or 130m (Mamba2), nemotron-tiny or nemotron-130m (Nemotron-H: "
          "Mamba2, attention and MLP blocks)");
ABSL_FLAG(std::string, out, "", "output directory (created if missing)");
ABSL_FLAG(std::string, layout, "",
          "mamba_ssm (mamba_ssm config.json and keys) or hf (Hugging Face Mamba2Config, or "
          "NemotronHConfig for a nemotron shape); default: mamba_ssm, hf for a nemotron shape");
ABSL_FLAG(std::string, format, "",
          "safetensors or pytorch (default: pytorch for mamba_ssm, "
          "safetensors for hf)");
ABSL_FLAG(std::string, dtype, "f32", "dtype of matrices and conv weights: f32, bf16 or f16");
ABSL_FLAG(std::string, vector_dtype, "",
          "dtype of 1-D tensors (norms, A_log, D, dt_bias, biases); default --dtype");
ABSL_FLAG(uint64_t, seed, 0, "random seed");
ABSL_FLAG(int, shards, 1, "safetensors files to split the tensors over (with an index)");
ABSL_FLAG(std::vector<std::string>, set, {},
          "key=value config overrides by mamba_ssm name (Nemotron-H fields by their Hugging "
          "Face name), repeatable or comma-separated (e.g. --set ngroups=4 --set "
          "tie_embeddings=false --set num_key_value_heads=1)");

namespace coil::model {
namespace {

using checkpoint::DType;
using checkpoint::FileFormat;
using checkpoint::KeyLayout;

// Abseil keeps only the last occurrence of a flag; --set is meant to repeat.
std::vector<std::string> CollectSetFlags(int argc, char** argv) {
  std::vector<std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    std::string value;
    if (arg.rfind("--set=", 0) == 0) {
      value = arg.substr(6);
    } else if (arg == "--set" && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      values.emplace_back(part);
    }
  }
  return values;
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("--out is required: the model directory");
  COIL_ASSIGN_OR_RETURN(ModelConfig config, NamedModelShape(absl::GetFlag(FLAGS_shape)));
  for (const std::string& entry : overrides) {
    std::vector<std::string> parts = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", entry, ": expected key=value"));
    }
    COIL_RETURN_IF_ERROR(SetModelConfigField(config, parts[0], parts[1]));
  }
  COIL_RETURN_IF_ERROR_CONTEXT(ValidateModelConfig(config), "after --set");

  WriteOptions options;
  const bool hybrid = config.format == ConfigFormat::kNemotronH;
  std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout.empty()) layout = hybrid ? "hf" : "mamba_ssm";
  if (hybrid && layout != "hf") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layout ", layout, ": a nemotron shape has Hugging Face's key layout only; use hf"));
  }
  if (layout == "mamba_ssm") {
    options.layout = KeyLayout::kMambaSsm;
  } else if (layout == "hf") {
    options.layout = KeyLayout::kHuggingFace;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--layout ", layout, " is unknown; use mamba_ssm or hf"));
  }
  std::string format = absl::GetFlag(FLAGS_format);
  if (format.empty()) format = layout == "hf" ? "safetensors" : "pytorch";
  if (format == "safetensors") {
    options.format = FileFormat::kSafetensors;
  } else if (format == "pytorch") {
    options.format = FileFormat::kPytorch;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--format ", format, " is unknown; use safetensors or pytorch"));
  }
  options.shards = absl::GetFlag(FLAGS_shards);
  if (options.shards < 1 || (options.shards > 1 && options.format != FileFormat::kSafetensors)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shards ", options.shards, ": need at least 1, and more than 1 only with safetensors"));
  }
  if (!hybrid) {
    config.format = options.layout == KeyLayout::kHuggingFace ? ConfigFormat::kHuggingFace
                                                              : ConfigFormat::kMambaSsm;
  }
  // The tokenizer is cut to the shape's own vocabulary, whatever the layout records: the
  // same model in either layout gets the same tokenizer, as a downloaded one would.
  const int64_t tokenizer_vocab = config.vocab_size;
  if (config.format != ConfigFormat::kMambaSsm) {
    // A Hugging Face config records only the padded vocabulary.
    config.vocab_size = config.padded_vocab_size();
    config.pad_vocab_size_multiple = 1;
  }
  COIL_ASSIGN_OR_RETURN(DType dtype, checkpoint::ParseDType(absl::GetFlag(FLAGS_dtype)));
  DType vector_dtype = dtype;
  if (!absl::GetFlag(FLAGS_vector_dtype).empty()) {
    COIL_ASSIGN_OR_RETURN(vector_dtype, checkpoint::ParseDType(absl::GetFlag(FLAGS_vector_dtype)));
  }
  std::vector<TensorData> tensors =
      RandomModelTensors(config, dtype, vector_dtype, absl::GetFlag(FLAGS_seed));
  COIL_RETURN_IF_ERROR(WriteModelDirectory(config, tensors, options, out));

  // The tokenizer travels with the model, as in a downloaded model directory, cut to the
  // model's vocabulary when that is smaller (tiny: 250 ids), so text prompts work on it.
  const absl::StatusOr<std::string> tokenizer = FindDataFile("gpt-neox-20b/tokenizer.json");
  if (tokenizer.ok()) {
    COIL_RETURN_IF_ERROR(WriteTokenizerForVocab(
        *tokenizer, tokenizer_vocab, (std::filesystem::path(out) / "tokenizer.json").string()));
  } else {
    COIL_LOG(WARNING) << tokenizer.status().message()
                      << "; the model directory has no tokenizer.json";
  }
  COIL_LOG(INFO) << "wrote " << absl::GetFlag(FLAGS_shape) << " model (" << tensors.size()
                 << " tensors, " << layout << " layout, " << format << ", "
                 << checkpoint::DTypeName(dtype) << ") to " << out;
  return absl::OkStatus();
}

}  // namespace
}  // namespace coil::model

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes a deterministic random checkpoint: coil-make-model --shape tiny --out DIR");
  std::vector<std::string> overrides = coil::model::CollectSetFlags(argc, argv);
  coil::ParseDashedCommandLine(argc, argv);
  absl::Status status = coil::model::Run(overrides);
  if (!status.ok()) {
    COIL_LOG(ERROR) << status.message();
    return 1;
  }
  return 0;
}
