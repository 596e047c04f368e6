#include "workers/model/model_config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "workers/checkpoint/json_text.h"

namespace coil::model {
namespace {

using Json = nlohmann::json;

// A JSON object being read field by field. `prefix` names the object in errors
// ("ssm_cfg.d_state"); `seen` records the fields read so unknown ones can be refused.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string prefix)
      : object_(object), prefix_(std::move(prefix)) {}

  std::string Path(const std::string& key) const { return prefix_ + key; }

  bool Has(const std::string& key) {
    seen_.insert(key);
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  absl::Status Int(const std::string& key, int64_t& value) {
    COIL_RETURN_IF_ERROR(Typed(key, value, &Json::is_number_integer, "an integer"));
    if (Has(key) && object_[key].is_number_unsigned() &&
        object_[key].get<uint64_t>() > (1ull << 40)) {
      return absl::InvalidArgumentError(absl::StrCat("config field ", Path(key), " is ",
                                                     object_[key].dump(), "; the limit is 2^40"));
    }
    return absl::OkStatus();
  }
  absl::Status Bool(const std::string& key, bool& value) {
    return Typed(key, value, &Json::is_boolean, "true or false");
  }
  absl::Status Double(const std::string& key, double& value) {
    return Typed(key, value, &Json::is_number, "a number");
  }

  // A two-number list [min, max] (dt_limit, time_step_limit).
  absl::Status Range(const std::string& key, double& low, double& high) {
    if (!Has(key)) return absl::OkStatus();
    const Json& field = object_[key];
    if (!field.is_array() || field.size() != 2 || !field[0].is_number() || !field[1].is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field ", Path(key), " is ", field.dump(), "; expected [min, max]"));
    }
    low = field[0].get<double>();
    high = field[1].get<double>();
    if (high >= checkpoint::kJsonInfinity) high = std::numeric_limits<double>::infinity();
    if (std::isnan(low) || std::isnan(high) || low < 0 || high < low) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field ", Path(key), " is ", field.dump(), "; need 0 <= min <= max"));
    }
    return absl::OkStatus();
  }

  // Refuses a setting unless it has the one value coil implements.
  absl::Status RequireBool(const std::string& key, bool supported, const std::string& why) {
    bool value = supported;
    COIL_RETURN_IF_ERROR(Bool(key, value));
    if (value != supported) {
      return absl::UnimplementedError(
          absl::StrCat("config field ", Path(key), " is ", value ? "true" : "false", ": ", why,
                       "; coil supports only ", supported ? "true" : "false"));
    }
    return absl::OkStatus();
  }

  void Ignore(std::initializer_list<const char*> keys) {
    for (const char* key : keys) seen_.insert(key);
  }

  // Every field of the object must have been read or ignored.
  absl::Status RefuseUnknown(const std::string& what) const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (!seen_.count(it.key())) {
        std::vector<std::string> known(seen_.begin(), seen_.end());
        return absl::UnimplementedError(
            absl::StrCat("config field ", Path(it.key()), " is not supported by coil in ", what,
                         "; supported fields: ", absl::StrJoin(known, ", ")));
      }
    }
    return absl::OkStatus();
  }

 private:
  // Reads `key` into `value` when present, after `is_type` accepts it.
  template <typename T>
  absl::Status Typed(const std::string& key, T& value, bool (Json::*is_type)() const noexcept,
                     const char* expected) {
    if (!Has(key)) return absl::OkStatus();
    const Json& field = object_[key];
    if (!(field.*is_type)()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field ", Path(key), " is ", field.dump(), "; expected ", expected));
    }
    value = field.get<T>();
    return absl::OkStatus();
  }

  const Json& object_;
  std::string prefix_;
  std::set<std::string> seen_;
};

absl::StatusOr<ModelConfig> ParseMambaSsm(const Json& root) {
  ModelConfig config;
  config.format = ConfigFormat::kMambaSsm;
  config.pad_vocab_size_multiple = 8;  // mamba_ssm's MambaConfig defaults
  config.d_model = 2560;
  config.n_layer = 64;
  config.vocab_size = 50277;
  FieldReader top(root, "");
  COIL_RETURN_IF_ERROR(top.Int("d_model", config.d_model));
  COIL_RETURN_IF_ERROR(top.Int("n_layer", config.n_layer));
  COIL_RETURN_IF_ERROR(top.Int("vocab_size", config.vocab_size));
  COIL_RETURN_IF_ERROR(top.Int("pad_vocab_size_multiple", config.pad_vocab_size_multiple));
  COIL_RETURN_IF_ERROR(top.Bool("rms_norm", config.rms_norm));
  COIL_RETURN_IF_ERROR(top.Bool("residual_in_fp32", config.residual_in_fp32));
  COIL_RETURN_IF_ERROR(top.Bool("fused_add_norm", config.fused_add_norm));
  COIL_RETURN_IF_ERROR(top.Bool("tie_embeddings", config.tie_embeddings));
  COIL_RETURN_IF_ERROR(top.Double("norm_epsilon", config.norm_epsilon));
  int64_t d_intermediate = 0;
  COIL_RETURN_IF_ERROR(top.Int("d_intermediate", d_intermediate));
  if (d_intermediate != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "config field d_intermediate is ", d_intermediate,
        ": MLP blocks after the mixer are not supported; coil supports d_intermediate 0"));
  }
  if (top.Has("attn_layer_idx")) {
    const Json& attn = root["attn_layer_idx"];
    if (!attn.is_array() || !attn.empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "config field attn_layer_idx is ", attn.dump(),
          ": attention layers are not supported yet; coil supports Mamba2 layers only"));
    }
  }
  top.Ignore({"attn_cfg", "ssm_cfg"});  // ssm_cfg is read below
  COIL_RETURN_IF_ERROR(top.RefuseUnknown("a mamba_ssm config"));
  if (!config.rms_norm) {
    return absl::UnimplementedError(
        "config field rms_norm is false: LayerNorm blocks are not supported; coil supports "
        "RMSNorm (rms_norm true)");
  }

  Json empty = Json::object();
  const Json* ssm = &empty;
  if (root.contains("ssm_cfg") && !root["ssm_cfg"].is_null()) {
    ssm = &root["ssm_cfg"];
    if (!ssm->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field ssm_cfg is ", ssm->dump(), "; expected an object"));
    }
  }
  FieldReader cfg(*ssm, "ssm_cfg.");
  std::string layer = "Mamba1";
  if (cfg.Has("layer")) {
    const Json& value = (*ssm)["layer"];
    layer = value.is_string() ? value.get<std::string>() : value.dump();
  }
  if (layer != "Mamba2") {
    return absl::UnimplementedError(absl::StrCat(
        "config field ssm_cfg.layer is ", layer,
        " (absent means Mamba1): coil supports Mamba2 layers only (ssm_cfg.layer \"Mamba2\")"));
  }
  COIL_RETURN_IF_ERROR(cfg.Int("d_state", config.d_state));
  COIL_RETURN_IF_ERROR(cfg.Int("d_conv", config.d_conv));
  COIL_RETURN_IF_ERROR(cfg.Int("expand", config.expand));
  COIL_RETURN_IF_ERROR(cfg.Int("headdim", config.headdim));
  COIL_RETURN_IF_ERROR(cfg.Int("ngroups", config.ngroups));
  COIL_RETURN_IF_ERROR(cfg.Int("chunk_size", config.chunk_size));
  COIL_RETURN_IF_ERROR(cfg.Bool("bias", config.bias));
  COIL_RETURN_IF_ERROR(cfg.Bool("conv_bias", config.conv_bias));
  COIL_RETURN_IF_ERROR(cfg.Range("dt_limit", config.time_step_min, config.time_step_max));
  COIL_RETURN_IF_ERROR(cfg.RequireBool("rmsnorm", true, "an ungated output norm"));
  COIL_RETURN_IF_ERROR(cfg.RequireBool("norm_before_gate", false, "normalising before the gate"));
  COIL_RETURN_IF_ERROR(cfg.RequireBool("D_has_hdim", false, "a per-channel D"));
  COIL_RETURN_IF_ERROR(cfg.RequireBool("learnable_init_states", false, "a learned initial state"));
  if (cfg.Has("d_ssm")) {
    int64_t d_ssm = 0;
    COIL_RETURN_IF_ERROR(cfg.Int("d_ssm", d_ssm));
    if (d_ssm != config.d_inner()) {
      return absl::UnimplementedError(
          absl::StrCat("config field ssm_cfg.d_ssm is ", d_ssm,
                       ": a partial SSM is not "
                       "supported; coil supports d_ssm absent or equal to expand * d_model (",
                       config.d_inner(), ")"));
    }
  }
  if (cfg.Has("activation")) {
    const Json& value = (*ssm)["activation"];
    if (value != "silu" && value != "swish") {
      return absl::UnimplementedError(absl::StrCat("config field ssm_cfg.activation is ",
                                                   value.dump(), "; coil supports \"silu\""));
    }
  }
  // Initialisation-only settings: they do not change the forward pass.
  cfg.Ignore({"A_init_range", "dt_min", "dt_max", "dt_init_floor", "conv_init", "use_mem_eff_path",
              "sequence_parallel"});
  COIL_RETURN_IF_ERROR(cfg.RefuseUnknown("a mamba_ssm config"));
  COIL_RETURN_IF_ERROR(ValidateModelConfig(config));
  return config;
}

absl::StatusOr<ModelConfig> ParseHuggingFace(const Json& root) {
  ModelConfig config;
  config.format = ConfigFormat::kHuggingFace;
  // Hugging Face Mamba2Config defaults.
  config.vocab_size = 32768;
  config.d_model = 4096;
  config.n_layer = 64;
  config.d_state = 128;
  config.headdim = 64;
  config.ngroups = 8;
  config.tie_embeddings = false;
  int64_t num_heads = 128;
  FieldReader top(root, "");
  COIL_RETURN_IF_ERROR(top.Int("vocab_size", config.vocab_size));
  COIL_RETURN_IF_ERROR(top.Int("hidden_size", config.d_model));
  COIL_RETURN_IF_ERROR(top.Int("num_hidden_layers", config.n_layer));
  COIL_RETURN_IF_ERROR(top.Int("state_size", config.d_state));
  COIL_RETURN_IF_ERROR(top.Int("head_dim", config.headdim));
  COIL_RETURN_IF_ERROR(top.Int("num_heads", num_heads));
  COIL_RETURN_IF_ERROR(top.Int("n_groups", config.ngroups));
  COIL_RETURN_IF_ERROR(top.Int("expand", config.expand));
  COIL_RETURN_IF_ERROR(top.Int("conv_kernel", config.d_conv));
  COIL_RETURN_IF_ERROR(top.Int("chunk_size", config.chunk_size));
  COIL_RETURN_IF_ERROR(top.Bool("use_conv_bias", config.conv_bias));
  COIL_RETURN_IF_ERROR(top.Bool("use_bias", config.bias));
  COIL_RETURN_IF_ERROR(top.Double("layer_norm_epsilon", config.norm_epsilon));
  COIL_RETURN_IF_ERROR(top.Bool("tie_word_embeddings", config.tie_embeddings));
  COIL_RETURN_IF_ERROR(top.Bool("residual_in_fp32", config.residual_in_fp32));
  COIL_RETURN_IF_ERROR(top.Range("time_step_limit", config.time_step_min, config.time_step_max));
  COIL_RETURN_IF_ERROR(top.RequireBool("rms_norm", true, "LayerNorm blocks"));
  if (top.Has("hidden_act")) {
    const Json& value = root["hidden_act"];
    if (value != "silu" && value != "swish") {
      return absl::UnimplementedError(
          absl::StrCat("config field hidden_act is ", value.dump(), "; coil supports \"silu\""));
    }
  }
  // norm_before_gate is ignored, as Hugging Face's Mamba2 code ignores it (it always
  // gates before normalising): Mamba-Codestral sets it to true.
  config.pad_vocab_size_multiple = 1;  // vocab_size is already padded in this format
  if (config.d_model > 0 && config.expand > 0 && num_heads * config.headdim != config.d_inner()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config fields num_heads (", num_heads, ") * head_dim (", config.headdim,
        ") must equal expand * hidden_size (", config.d_inner(), "); fix config.json"));
  }
  COIL_RETURN_IF_ERROR(ValidateModelConfig(config));
  return config;
}

// The block kind of one hybrid_override_pattern character; `layer` names it in errors.
absl::StatusOr<LayerKind> PatternKind(char c, int64_t layer) {
  switch (c) {
    case 'M':
      return LayerKind::kMamba2;
    case '*':
      return LayerKind::kAttention;
    case '-':
      return LayerKind::kMlp;
    case 'E':
      return absl::UnimplementedError(absl::StrCat(
          "config field hybrid_override_pattern has 'E' (a mixture-of-experts block) at layer ",
          layer, "; coil supports M (Mamba2), * (attention) and - (MLP) blocks"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "config field hybrid_override_pattern has '", std::string(1, c), "' at layer ", layer,
          "; each character must be M (Mamba2), * (attention) or - (MLP)"));
  }
}

// layers_block_type, the list newer Hugging Face configs write in place of the pattern, as
// the pattern's characters ("mamba" or "linear_attention" M, "attention" or
// "full_attention" *, "mlp" -, "moe" E).
absl::StatusOr<std::string> PatternFromBlockTypes(const Json& list) {
  if (!list.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field layers_block_type is ", list.dump(), "; expected a list of block types"));
  }
  std::string pattern;
  for (const Json& entry : list) {
    const std::string type = entry.is_string() ? entry.get<std::string>() : entry.dump();
    if (type == "mamba" || type == "linear_attention") {
      pattern += 'M';
    } else if (type == "attention" || type == "full_attention") {
      pattern += '*';
    } else if (type == "mlp") {
      pattern += '-';
    } else if (type == "moe") {
      pattern += 'E';
    } else {
      return absl::InvalidArgumentError(absl::StrCat("config field layers_block_type has '", type,
                                                     "' at layer ", pattern.size(),
                                                     "; expected mamba, attention, mlp or moe"));
    }
  }
  return pattern;
}

// Reads the first of `keys` present (Hugging Face renamed some NemotronH keys; both
// spellings appear in published configs).
absl::Status FirstInt(FieldReader& reader, std::initializer_list<const char*> keys,
                      int64_t& value) {
  for (const char* key : keys) {
    if (reader.Has(key)) return reader.Int(key, value);
  }
  return absl::OkStatus();
}

// A string field that must hold one of the values coil implements.
absl::Status RequireString(FieldReader& reader, const Json& root, const char* key,
                           std::initializer_list<const char*> supported, const char* what) {
  if (!reader.Has(key)) return absl::OkStatus();
  const Json& value = root[key];
  for (const char* ok : supported) {
    if (value == ok) return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat("config field ", key, " is ", value.dump(),
                                               "; coil supports \"", *supported.begin(), "\" (",
                                               what, ")"));
}

// Hugging Face's NemotronHConfig (model_type nemotron_h). Like the Mamba2 dialect it carries
// many generic keys (token ids, dropout, initialisation), which are ignored; every key that
// changes the forward pass is read, and refused by name when coil does not implement it.
absl::StatusOr<ModelConfig> ParseNemotronH(const Json& root) {
  ModelConfig config;
  config.format = ConfigFormat::kNemotronH;
  // NemotronHConfig's defaults.
  config.vocab_size = 131072;
  config.d_model = 4096;
  config.tie_embeddings = false;
  config.d_state = 128;
  config.headdim = 64;
  config.mamba_heads = 128;
  config.ngroups = 8;
  config.d_conv = 4;
  config.chunk_size = 128;
  config.attention_heads = 32;
  config.kv_heads = 8;
  config.intermediate_size = 21504;
  config.residual_in_fp32 = false;
  config.pad_vocab_size_multiple = 1;  // vocab_size is the embedding's row count
  FieldReader top(root, "");
  COIL_RETURN_IF_ERROR(top.Int("vocab_size", config.vocab_size));
  COIL_RETURN_IF_ERROR(top.Int("hidden_size", config.d_model));
  COIL_RETURN_IF_ERROR(top.Bool("tie_word_embeddings", config.tie_embeddings));
  COIL_RETURN_IF_ERROR(top.Double("layer_norm_epsilon", config.norm_epsilon));
  COIL_RETURN_IF_ERROR(top.Bool("residual_in_fp32", config.residual_in_fp32));
  // Blocks: the pattern string, or the list newer configs write.
  if (top.Has("hybrid_override_pattern")) {
    const Json& value = root["hybrid_override_pattern"];
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("config field hybrid_override_pattern is ",
                                                     value.dump(),
                                                     "; expected a string such as \"M-M*-\""));
    }
    config.layer_pattern = value.get<std::string>();
  } else if (top.Has("layers_block_type")) {
    COIL_ASSIGN_OR_RETURN(config.layer_pattern, PatternFromBlockTypes(root["layers_block_type"]));
  } else {
    return absl::InvalidArgumentError(
        "config field hybrid_override_pattern is missing: a nemotron_h config must say which "
        "block each layer is (M Mamba2, * attention, - MLP)");
  }
  config.n_layer = static_cast<int64_t>(config.layer_pattern.size());
  if (top.Has("num_hidden_layers")) {
    int64_t layers = 0;
    COIL_RETURN_IF_ERROR(top.Int("num_hidden_layers", layers));
    if (layers != config.n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field hybrid_override_pattern has ", config.n_layer,
          " characters but num_hidden_layers is ", layers, "; give one character per layer"));
    }
  }
  // Mamba2 blocks (older configs spell some keys with a mamba_ prefix).
  COIL_RETURN_IF_ERROR(top.Int("mamba_num_heads", config.mamba_heads));
  COIL_RETURN_IF_ERROR(top.Int("mamba_head_dim", config.headdim));
  COIL_RETURN_IF_ERROR(top.Int("ssm_state_size", config.d_state));
  COIL_RETURN_IF_ERROR(FirstInt(top, {"n_groups", "mamba_n_groups"}, config.ngroups));
  COIL_RETURN_IF_ERROR(FirstInt(top, {"conv_kernel", "mamba_d_conv"}, config.d_conv));
  COIL_RETURN_IF_ERROR(FirstInt(top, {"chunk_size", "mamba_chunk_size"}, config.chunk_size));
  COIL_RETURN_IF_ERROR(FirstInt(top, {"expand", "mamba_expand"}, config.expand));
  for (const char* key : {"use_conv_bias", "mamba_conv_bias"}) {
    if (top.Has(key)) {
      COIL_RETURN_IF_ERROR(top.Bool(key, config.conv_bias));
      break;
    }
  }
  for (const char* key : {"time_step_limit", "mamba_dt_limit"}) {
    if (top.Has(key)) {
      COIL_RETURN_IF_ERROR(top.Range(key, config.time_step_min, config.time_step_max));
      break;
    }
  }
  COIL_RETURN_IF_ERROR(top.RequireBool("use_bias", false, "projection biases"));
  COIL_RETURN_IF_ERROR(top.RequireBool("mamba_proj_bias", false, "Mamba2 projection biases"));
  COIL_RETURN_IF_ERROR(RequireString(top, root, "mamba_hidden_act", {"silu", "swish"},
                                     "the Mamba2 conv's activation"));
  // Attention blocks.
  COIL_RETURN_IF_ERROR(top.Int("num_attention_heads", config.attention_heads));
  config.kv_heads = config.attention_heads;  // absent or null: multi-head attention
  COIL_RETURN_IF_ERROR(top.Int("num_key_value_heads", config.kv_heads));
  if (top.Has("head_dim")) {
    COIL_RETURN_IF_ERROR(top.Int("head_dim", config.attention_head_dim));
  } else if (top.Has("attention_head_dim")) {
    COIL_RETURN_IF_ERROR(top.Int("attention_head_dim", config.attention_head_dim));
  } else if (config.attention_heads > 0) {
    config.attention_head_dim = config.d_model / config.attention_heads;
  }
  COIL_RETURN_IF_ERROR(top.RequireBool("attention_bias", false, "q/k/v/o projection biases"));
  if (top.Has("sliding_window")) {
    return absl::UnimplementedError(
        absl::StrCat("config field sliding_window is ", root["sliding_window"].dump(),
                     "; coil supports full causal attention (sliding_window null)"));
  }
  // MLP blocks.
  COIL_RETURN_IF_ERROR(top.Int("intermediate_size", config.intermediate_size));
  COIL_RETURN_IF_ERROR(RequireString(top, root, "mlp_hidden_act", {"relu2"}, "the squared ReLU"));
  COIL_RETURN_IF_ERROR(top.RequireBool("mlp_bias", false, "MLP projection biases"));
  // Unknown keys are accepted, as Hugging Face accepts them: published configs carry token
  // ids, dropout and initialisation settings, and (num_nextn_predict_layers) extra layers for
  // training-time multi-token prediction that the model's own logits never go through.
  COIL_RETURN_IF_ERROR(ValidateModelConfig(config));
  return config;
}

}  // namespace

const char* ConfigFormatName(ConfigFormat format) {
  switch (format) {
    case ConfigFormat::kMambaSsm:
      return "mamba_ssm";
    case ConfigFormat::kHuggingFace:
      return "hf";
    case ConfigFormat::kNemotronH:
      return "nemotron_h";
  }
  return "?";
}

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kMamba2: return "mamba2";
    case LayerKind::kAttention:
      return "attention";
    case LayerKind::kMlp:
      return "mlp";
  }
  return "?";
}

LayerKind ModelConfig::layer_kind(int64_t layer) const {
  if (layer_pattern.empty()) return LayerKind::kMamba2;
  switch (layer_pattern[static_cast<size_t>(layer)]) {
    case '*':
      return LayerKind::kAttention;
    case '-':
      return LayerKind::kMlp;
    default:
      return LayerKind::kMamba2;  // 'M'; anything else is refused by validation
  }
}

int64_t ModelConfig::num_layers(LayerKind kind) const {
  int64_t count = 0;
  for (int64_t l = 0; l < n_layer; ++l) count += layer_kind(l) == kind ? 1 : 0;
  return count;
}

int64_t ModelConfig::padded_vocab_size() const {
  int64_t multiple = pad_vocab_size_multiple > 0 ? pad_vocab_size_multiple : 1;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

namespace {

// The blocks of a hybrid: one valid pattern character per layer, and the sizes of every
// block kind the pattern holds.
absl::Status ValidateHybrid(const ModelConfig& config) {
  if (static_cast<int64_t>(config.layer_pattern.size()) != config.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field hybrid_override_pattern has ", config.layer_pattern.size(),
        " characters but there are ", config.n_layer, " layers; give one character per layer"));
  }
  for (int64_t l = 0; l < config.n_layer; ++l) {
    COIL_RETURN_IF_ERROR(PatternKind(config.layer_pattern[static_cast<size_t>(l)], l).status());
  }
  struct Limit {
    const char* name;
    int64_t value;
    int64_t max;
    bool needed;
  };
  const bool mamba = config.num_layers(LayerKind::kMamba2) > 0;
  const bool attention = config.has_attention();
  if (!mamba) {
    return absl::UnimplementedError(
        absl::StrCat("config field hybrid_override_pattern is \"", config.layer_pattern,
                     "\", which has no Mamba2 block (M); coil serves hybrids with at least one"));
  }
  const Limit limits[] = {
      {"mamba_num_heads", config.mamba_heads, 1 << 16, mamba},
      {"num_attention_heads", config.attention_heads, 1 << 12, attention},
      {"num_key_value_heads", config.kv_heads, 1 << 12, attention},
      {"head_dim", config.attention_head_dim, 1024, attention},
      {"intermediate_size", config.intermediate_size, 1 << 20,
       config.num_layers(LayerKind::kMlp) > 0},
  };
  for (const Limit& limit : limits) {
    if (limit.needed && (limit.value < 1 || limit.value > limit.max)) {
      return absl::InvalidArgumentError(absl::StrCat("config field ", limit.name, " is ",
                                                     limit.value, "; it must be in [1, ", limit.max,
                                                     "]"));
    }
  }
  if (attention && config.attention_heads % config.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field num_key_value_heads is ", config.kv_heads,
                     ", which does not divide num_attention_heads (", config.attention_heads,
                     "); each KV head must serve the same number of query heads"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& config) {
  struct Limit {
    const char* name;
    int64_t value;
    int64_t max;
  };
  const Limit limits[] = {
      {"d_model", config.d_model, 1 << 16},
      {"n_layer", config.n_layer, 1024},
      {"vocab_size", config.vocab_size, 1 << 24},
      {"pad_vocab_size_multiple", config.pad_vocab_size_multiple, 1 << 16},
      {"d_state", config.d_state, 1024},
      {"headdim", config.headdim, 1024},
      {"ngroups", config.ngroups, 1024},
      {"expand", config.expand, 16},
      {"d_conv", config.d_conv, 16},
      {"chunk_size", config.chunk_size, 1 << 16},
  };
  for (const Limit& limit : limits) {
    if (limit.value < 1 || limit.value > limit.max) {
      return absl::InvalidArgumentError(absl::StrCat("config field ", limit.name, " is ",
                                                     limit.value, "; it must be in [1, ", limit.max,
                                                     "]"));
    }
  }
  if (config.d_inner() % config.headdim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expand * d_model (", config.d_inner(), ") is not a multiple of headdim (",
                     config.headdim, "); pick a headdim that divides it"));
  }
  if (config.nheads() % config.ngroups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the number of heads (", config.nheads(), ") is not a multiple of ngroups (",
                     config.ngroups, "); pick ngroups that divides it"));
  }
  if (!(config.norm_epsilon > 0) || !std::isfinite(config.norm_epsilon)) {
    return absl::InvalidArgumentError(absl::StrCat("config field norm_epsilon is ",
                                                   config.norm_epsilon, "; it must be positive"));
  }
  if (config.layer_pattern.empty()) return absl::OkStatus();
  return ValidateHybrid(config);
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  COIL_ASSIGN_OR_RETURN(Json root, checkpoint::ParseJsonText(json_text, "config.json"));
  if (!root.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object; expected {...}");
  }
  auto model_type = root.find("model_type");
  if (model_type == root.end()) return ParseMambaSsm(root);
  if (*model_type == "nemotron_h") return ParseNemotronH(root);
  if (*model_type != "mamba2") {
    return absl::UnimplementedError(absl::StrCat(
        "config field model_type is ", model_type->dump(),
        "; coil supports \"mamba2\" and \"nemotron_h\" (Hugging Face) or a mamba_ssm config "
        "without model_type"));
  }
  return ParseHuggingFace(root);
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, "; is ", model_dir,
                                            " a model directory with a config.json?"));
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (text.str().size() > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", text.str().size(), " bytes; the limit is 1 MiB"));
  }
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text.str());
  if (!config.ok()) return Annotate(config.status(), path);
  return config;
}

std::string ModelConfigToJson(const ModelConfig& config, ConfigFormat format) {
  Json root = Json::object();
  bool finite_limit = std::isfinite(config.time_step_max);
  Json limit =
      Json::array({config.time_step_min,
                   finite_limit ? config.time_step_max : checkpoint::kJsonInfinity});
  if (format == ConfigFormat::kMambaSsm) {
    root["d_model"] = config.d_model;
    root["d_intermediate"] = 0;
    root["n_layer"] = config.n_layer;
    root["vocab_size"] = config.vocab_size;
    Json ssm = Json::object();
    ssm["layer"] = "Mamba2";
    ssm["d_state"] = config.d_state;
    ssm["d_conv"] = config.d_conv;
    ssm["expand"] = config.expand;
    ssm["headdim"] = config.headdim;
    ssm["ngroups"] = config.ngroups;
    ssm["chunk_size"] = config.chunk_size;
    ssm["bias"] = config.bias;
    ssm["conv_bias"] = config.conv_bias;
    if (finite_limit || config.time_step_min != 0) ssm["dt_limit"] = limit;
    root["ssm_cfg"] = ssm;
    root["attn_layer_idx"] = Json::array();
    root["attn_cfg"] = Json::object();
    root["rms_norm"] = config.rms_norm;
    root["residual_in_fp32"] = config.residual_in_fp32;
    root["fused_add_norm"] = config.fused_add_norm;
    root["pad_vocab_size_multiple"] = config.pad_vocab_size_multiple;
    root["tie_embeddings"] = config.tie_embeddings;
    root["norm_epsilon"] = config.norm_epsilon;
  } else if (format == ConfigFormat::kNemotronH) {
    // The keys published NemotronH checkpoints write (NemotronHForCausalLM).
    root["architectures"] = Json::array({"NemotronHForCausalLM"});
    root["model_type"] = "nemotron_h";
    root["vocab_size"] = config.padded_vocab_size();
    root["hidden_size"] = config.d_model;
    root["num_hidden_layers"] = config.n_layer;
    root["hybrid_override_pattern"] = config.layer_pattern;
    root["tie_word_embeddings"] = config.tie_embeddings;
    root["layer_norm_epsilon"] = config.norm_epsilon;
    root["residual_in_fp32"] = config.residual_in_fp32;
    root["mamba_num_heads"] = config.nheads();
    root["mamba_head_dim"] = config.headdim;
    root["ssm_state_size"] = config.d_state;
    root["n_groups"] = config.ngroups;
    root["conv_kernel"] = config.d_conv;
    root["expand"] = config.expand;
    root["chunk_size"] = config.chunk_size;
    root["use_conv_bias"] = config.conv_bias;
    root["use_bias"] = config.bias;
    root["mamba_proj_bias"] = config.bias;
    root["mamba_hidden_act"] = "silu";
    if (finite_limit || config.time_step_min != 0) root["time_step_limit"] = limit;
    root["num_attention_heads"] = config.attention_heads;
    root["num_key_value_heads"] = config.kv_heads;
    root["head_dim"] = config.attention_head_dim;
    root["attention_bias"] = false;
    root["intermediate_size"] = config.intermediate_size;
    root["mlp_hidden_act"] = "relu2";
    root["mlp_bias"] = false;
  } else {
    root["architectures"] = Json::array({"Mamba2ForCausalLM"});
    root["model_type"] = "mamba2";
    root["vocab_size"] = config.padded_vocab_size();
    root["hidden_size"] = config.d_model;
    root["num_hidden_layers"] = config.n_layer;
    root["state_size"] = config.d_state;
    root["head_dim"] = config.headdim;
    root["num_heads"] = config.nheads();
    root["n_groups"] = config.ngroups;
    root["expand"] = config.expand;
    root["conv_kernel"] = config.d_conv;
    root["chunk_size"] = config.chunk_size;
    root["use_conv_bias"] = config.conv_bias;
    root["use_bias"] = config.bias;
    root["layer_norm_epsilon"] = config.norm_epsilon;
    root["rms_norm"] = config.rms_norm;
    root["norm_before_gate"] = false;
    root["residual_in_fp32"] = config.residual_in_fp32;
    root["tie_word_embeddings"] = config.tie_embeddings;
    root["hidden_act"] = "silu";
    if (finite_limit || config.time_step_min != 0) root["time_step_limit"] = limit;
  }
  return root.dump(2) + "\n";
}

absl::Status SetModelConfigField(ModelConfig& config, absl::string_view key,
                                 absl::string_view value) {
  std::pair<const char*, int64_t*> ints[] = {
      {"d_model", &config.d_model},
      {"n_layer", &config.n_layer},
      {"vocab_size", &config.vocab_size},
      {"pad_vocab_size_multiple", &config.pad_vocab_size_multiple},
      {"d_state", &config.d_state},
      {"headdim", &config.headdim},
      {"ngroups", &config.ngroups},
      {"expand", &config.expand},
      {"d_conv", &config.d_conv},
      {"chunk_size", &config.chunk_size},
  };
  // Nemotron-H's fields, by their Hugging Face names.
  std::pair<const char*, int64_t*> hybrid_ints[] = {
      {"mamba_num_heads", &config.mamba_heads},
      {"num_attention_heads", &config.attention_heads},
      {"num_key_value_heads", &config.kv_heads},
      {"attention_head_dim", &config.attention_head_dim},
      {"intermediate_size", &config.intermediate_size},
  };
  if (key == "hybrid_override_pattern") {
    config.layer_pattern = std::string(value);
    config.n_layer = static_cast<int64_t>(value.size());
    return absl::OkStatus();
  }
  for (auto& [name, field] : hybrid_ints) {
    if (key != name) continue;
    if (!absl::SimpleAtoi(value, field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", key, "=", value, ": expected an integer"));
    }
    return absl::OkStatus();
  }
  std::pair<const char*, bool*> bools[] = {
      {"bias", &config.bias},
      {"conv_bias", &config.conv_bias},
      {"rms_norm", &config.rms_norm},
      {"residual_in_fp32", &config.residual_in_fp32},
      {"fused_add_norm", &config.fused_add_norm},
      {"tie_embeddings", &config.tie_embeddings},
  };
  for (auto& [name, field] : ints) {
    if (key != name) continue;
    if (!absl::SimpleAtoi(value, field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", key, "=", value, ": expected an integer"));
    }
    return absl::OkStatus();
  }
  for (auto& [name, field] : bools) {
    if (key != name) continue;
    if (!absl::SimpleAtob(value, field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", key, "=", value, ": expected true or false"));
    }
    return absl::OkStatus();
  }
  if (key == "norm_epsilon") {
    if (!absl::SimpleAtod(value, &config.norm_epsilon)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", key, "=", value, ": expected a number"));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (auto& entry : ints) names.push_back(entry.first);
  for (auto& entry : bools) names.push_back(entry.first);
  names.push_back("norm_epsilon");
  names.push_back("hybrid_override_pattern");
  for (auto& entry : hybrid_ints) names.push_back(entry.first);
  return absl::InvalidArgumentError(
      absl::StrCat("--set ", key, ": unknown config field; known: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<ModelConfig> NamedModelShape(absl::string_view name) {
  struct Shape {
    const char* name;
    int64_t d_model, n_layer, vocab_size, pad_vocab_size_multiple, d_state, headdim, ngroups,
        chunk_size;
  };
  // 130m: state-spaces/mamba2-130m's config.json plus mamba_ssm's Mamba2 defaults.
  constexpr Shape kShapes[] = {
      {"tiny", 64, 2, 250, 16, 16, 16, 2, 8},
      {"130m", 768, 24, 50277, 16, 128, 64, 1, 256},
  };
  for (const Shape& shape : kShapes) {
    if (name != shape.name) continue;
    ModelConfig config;
    config.d_model = shape.d_model;
    config.n_layer = shape.n_layer;
    config.vocab_size = shape.vocab_size;
    config.pad_vocab_size_multiple = shape.pad_vocab_size_multiple;
    config.d_state = shape.d_state;
    config.headdim = shape.headdim;
    config.ngroups = shape.ngroups;
    config.chunk_size = shape.chunk_size;
    config.expand = 2;
    config.d_conv = 4;
    config.tie_embeddings = true;
    return config;
  }
  struct Hybrid {
    const char* name;
    const char* pattern;
    int64_t d_model, vocab_size, mamba_heads, headdim, ngroups, d_state, chunk_size,
        attention_heads, kv_heads, attention_head_dim, intermediate_size;
    bool tie_embeddings;
  };
  // nemotron-130m: Nemotron-H's block mix at the 130m width (about 125M parameters beside
  // the 38.6M of the tied embedding); nemotron-tiny: every block kind at test size.
  constexpr Hybrid kHybrids[] = {
      {"nemotron-tiny", "M*-M-*", 64, 256, 8, 16, 2, 16, 8, 4, 2, 16, 128, false},
      {"nemotron-130m", "M-M-M*-M-M-M*-M-M-M*-M-M-M*-", 768, 50288, 24, 64, 8, 128, 128, 12, 4, 64,
       3072, true},
  };
  for (const Hybrid& shape : kHybrids) {
    if (name != shape.name) continue;
    ModelConfig config;
    config.format = ConfigFormat::kNemotronH;
    config.layer_pattern = shape.pattern;
    config.n_layer = static_cast<int64_t>(config.layer_pattern.size());
    config.d_model = shape.d_model;
    config.vocab_size = shape.vocab_size;
    config.pad_vocab_size_multiple = 1;
    config.mamba_heads = shape.mamba_heads;
    config.headdim = shape.headdim;
    config.ngroups = shape.ngroups;
    config.d_state = shape.d_state;
    config.chunk_size = shape.chunk_size;
    config.d_conv = 4;
    config.expand = 2;
    config.attention_heads = shape.attention_heads;
    config.kv_heads = shape.kv_heads;
    config.attention_head_dim = shape.attention_head_dim;
    config.intermediate_size = shape.intermediate_size;
    config.tie_embeddings = shape.tie_embeddings;
    config.residual_in_fp32 = false;
    return config;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model shape '", name, "' is unknown; use tiny, 130m, nemotron-tiny or nemotron-130m"));
}

}  // namespace coil::model
