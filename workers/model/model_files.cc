#include "workers/model/model_files.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace coil::model {

std::vector<TensorSpec> RequiredTensors(const ModelConfig& config) {
  const int64_t d = config.d_model;
  const int64_t vocab = config.padded_vocab_size();
  std::vector<TensorSpec> specs;
  specs.push_back({"embedding.weight", {vocab, d}});
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    std::string prefix = absl::StrCat("layers.", layer, ".");
    std::string mixer = prefix + "mixer.";
    specs.push_back({prefix + "norm.weight", {d}});
    if (config.layer_kind(layer) == LayerKind::kAttention) {
      const int64_t q = config.attention_heads * config.attention_head_dim;
      const int64_t kv = config.kv_heads * config.attention_head_dim;
      specs.push_back({mixer + "q_proj.weight", {q, d}});
      specs.push_back({mixer + "k_proj.weight", {kv, d}});
      specs.push_back({mixer + "v_proj.weight", {kv, d}});
      specs.push_back({mixer + "o_proj.weight", {d, q}});
      continue;
    }
    if (config.layer_kind(layer) == LayerKind::kMlp) {
      specs.push_back({mixer + "up_proj.weight", {config.intermediate_size, d}});
      specs.push_back({mixer + "down_proj.weight", {d, config.intermediate_size}});
      continue;
    }
    specs.push_back({mixer + "in_proj.weight", {config.d_in_proj(), d}});
    if (config.bias) specs.push_back({mixer + "in_proj.bias", {config.d_in_proj()}});
    specs.push_back({mixer + "conv1d.weight", {config.conv_dim(), 1, config.d_conv}});
    if (config.conv_bias) specs.push_back({mixer + "conv1d.bias", {config.conv_dim()}});
    specs.push_back({mixer + "dt_bias", {config.nheads()}});
    specs.push_back({mixer + "A_log", {config.nheads()}});
    specs.push_back({mixer + "D", {config.nheads()}});
    specs.push_back({mixer + "norm.weight", {config.d_inner()}});
    specs.push_back({mixer + "out_proj.weight", {d, config.d_inner()}});
    if (config.bias) specs.push_back({mixer + "out_proj.bias", {d}});
  }
  specs.push_back({"norm_f.weight", {d}});
  if (!config.tie_embeddings) specs.push_back({"lm_head.weight", {vocab, d}});
  return specs;
}

absl::Status ValidateCheckpoint(const ModelConfig& config, const checkpoint::Checkpoint& stored) {
  std::vector<std::string> problems;
  std::set<std::string> required;
  for (const TensorSpec& spec : RequiredTensors(config)) {
    required.insert(spec.name);
    absl::StatusOr<checkpoint::TensorInfo> info = stored.Info(spec.name);
    if (!info.ok()) {
      problems.push_back(absl::StrCat("missing tensor ", spec.name));
    } else if (info->shape != spec.shape) {
      problems.push_back(absl::StrCat("tensor ", stored.Describe(spec.name), " has shape [",
                                      absl::StrJoin(info->shape, ", "), "]; the config needs [",
                                      absl::StrJoin(spec.shape, ", "), "]"));
    }
  }
  for (const std::string& name : stored.TensorNames()) {
    if (required.count(name)) continue;
    if (name == "lm_head.weight" && config.tie_embeddings && stored.Has("embedding.weight")) {
      // mamba_ssm's state dict keeps the tied head as a second name for the embedding's
      // storage; accept it when it holds exactly the embedding.
      auto head = stored.StoredBytes(name);
      auto embedding = stored.StoredBytes("embedding.weight");
      if (head->size() == embedding->size() &&
          (head->data() == embedding->data() ||
           std::memcmp(head->data(), embedding->data(), head->size()) == 0) &&
          stored.Info(name)->dtype == stored.Info("embedding.weight")->dtype) {
        continue;
      }
      problems.push_back(absl::StrCat(
          "tensor ", stored.Describe(name),
          " differs from the embedding but tie_embeddings is true; set tie_embeddings to "
          "false or drop lm_head.weight"));
      continue;
    }
    problems.push_back(absl::StrCat("unused tensor ", stored.Describe(name),
                                    " (the config does not need it)"));
  }
  if (problems.empty()) return absl::OkStatus();
  size_t shown = std::min<size_t>(problems.size(), 5);
  std::string more =
      problems.size() > shown ? absl::StrCat("; and ", problems.size() - shown, " more") : "";
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint does not match its config: ",
                   absl::StrJoin(problems.begin(), problems.begin() + shown, "; "), more));
}

absl::StatusOr<ModelFiles> OpenModelFiles(const std::string& model_dir) {
  ModelFiles files;
  COIL_ASSIGN_OR_RETURN(files.config, LoadModelConfig(model_dir));
  COIL_ASSIGN_OR_RETURN(files.checkpoint, checkpoint::OpenCheckpointFiles(model_dir));
  COIL_RETURN_IF_ERROR_CONTEXT(ValidateCheckpoint(files.config, *files.checkpoint), model_dir);
  return files;
}

}  // namespace coil::model
