// ModelConfig: the shape and options of a model, read from its config.json: a Mamba2 model
// in either format (mamba_ssm's MambaConfig or Hugging Face's Mamba2Config), or a hybrid
// Nemotron-H (Hugging Face's NemotronHConfig: Mamba2, attention and MLP blocks in the order
// hybrid_override_pattern gives). A parsed config is always consistent (nheads * headdim ==
// d_inner, ngroups divides nheads, the KV heads divide the attention heads, one pattern
// character per layer, positive sizes) and only holds settings coil implements: anything
// else is refused by name.
#ifndef COIL_WORKERS_MODEL_MODEL_CONFIG_H_
#define COIL_WORKERS_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil::model {

// Which config.json dialect (and, by convention, which tensor key layout) a model uses.
// Nemotron-H keys its tensors as Hugging Face does (backbone.embeddings.weight, ...).
enum class ConfigFormat { kMambaSsm, kHuggingFace, kNemotronH };

const char* ConfigFormatName(ConfigFormat format);

// The kind of one block's mixer, and its character in hybrid_override_pattern.
enum class LayerKind {
  kMamba2,     // 'M'
  kAttention,  // '*': causal grouped-query attention, no positional encoding
  kMlp,        // '-': down(relu(up(x))^2)
};
const char* LayerKindName(LayerKind kind);

struct ModelConfig {
  ConfigFormat format = ConfigFormat::kMambaSsm;
  int64_t d_model = 0;
  int64_t n_layer = 0;
  // The tokenizer's vocabulary; ids at or above it are never sampled. In a Hugging Face
  // config only the padded size is known, so both are equal there.
  int64_t vocab_size = 0;
  int64_t pad_vocab_size_multiple = 1;
  int64_t d_state = 128;
  int64_t headdim = 64;
  int64_t ngroups = 1;
  int64_t expand = 2;
  int64_t d_conv = 4;
  int64_t chunk_size = 256;
  bool bias = false;      // in_proj / out_proj bias
  bool conv_bias = true;  // conv1d bias
  bool rms_norm = true;
  bool residual_in_fp32 = true;
  bool fused_add_norm = true;
  bool tie_embeddings = true;
  double norm_epsilon = 1e-5;
  double time_step_min = 0.0;  // dt clamp (mamba_ssm dt_limit, HF time_step_limit)
  double time_step_max = std::numeric_limits<double>::infinity();
  // Nemotron-H only (all 0 or empty for a Mamba2 model):
  // one character per layer, 'M' Mamba2, '*' attention, '-' MLP; empty: every layer Mamba2.
  std::string layer_pattern;
  int64_t mamba_heads = 0;         // mamba_num_heads; 0: expand * d_model / headdim
  int64_t attention_heads = 0;     // num_attention_heads
  int64_t kv_heads = 0;            // num_key_value_heads (divides attention_heads)
  int64_t attention_head_dim = 0;  // head_dim / attention_head_dim
  int64_t intermediate_size = 0;   // the MLP's

  LayerKind layer_kind(int64_t layer) const;
  // Blocks of `kind` among the n_layer.
  int64_t num_layers(LayerKind kind) const;
  // Whether the model has attention layers (and so needs KV pages).
  bool has_attention() const { return num_layers(LayerKind::kAttention) > 0; }

  int64_t d_inner() const { return mamba_heads > 0 ? mamba_heads * headdim : expand * d_model; }
  int64_t nheads() const { return d_inner() / headdim; }
  // vocab_size rounded up to pad_vocab_size_multiple: the embedding's row count.
  int64_t padded_vocab_size() const;
  // x, B and C channels: what conv1d convolves.
  int64_t conv_dim() const { return d_inner() + 2 * ngroups * d_state; }
  // z, x, B, C, dt: in_proj's output features.
  int64_t d_in_proj() const { return 2 * d_inner() + 2 * ngroups * d_state + nheads(); }
};

// Parses config.json text in any format (a Hugging Face config has model_type: mamba2 or
// nemotron_h). Every error names the field, the value and what is supported.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);

// Reads and parses `<model_dir>/config.json`.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// Checks the invariants in the header comment; the parsers call it.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Writes `config` as config.json text in `format` (the inverse of ParseModelConfig).
std::string ModelConfigToJson(const ModelConfig& config, ConfigFormat format);

// Overrides one field by its mamba_ssm name (d_model, n_layer, vocab_size,
// pad_vocab_size_multiple, d_state, headdim, ngroups, expand, d_conv, chunk_size, bias,
// conv_bias, rms_norm, residual_in_fp32, fused_add_norm, tie_embeddings, norm_epsilon) or,
// for the Nemotron-H fields, by its Hugging Face name (hybrid_override_pattern, which also
// sets n_layer; mamba_num_heads, num_attention_heads, num_key_value_heads,
// attention_head_dim, intermediate_size), as `coil-make-model --set key=value` does. Does
// not validate the result.
absl::Status SetModelConfigField(ModelConfig& config, absl::string_view key,
                                 absl::string_view value);

// Named shapes: "tiny" (d_model 64, 2 layers, d_state 16, headdim 16, 8 heads, 2 groups,
// chunk 8, vocab 250 padded to 256, tied) and "130m" (state-spaces/mamba2-130m); the
// Nemotron-H hybrids "nemotron-tiny" (d_model 64, pattern M*-M-*: every block kind, an
// attention block next to an MLP block on both sides; 8 Mamba heads of 16 in 2 groups,
// d_state 16, chunk 8; 4 query heads over 2 KV heads of 16; MLP 128; vocab 256, untied) and
// "nemotron-130m" (d_model 768, pattern M-M-M*- four times: 28 layers; 24 Mamba heads of 64
// in 8 groups, d_state 128, chunk 128; 12 query heads over 4 KV heads of 64; MLP 3072; the
// GPT-NeoX vocabulary padded to 50288, tied).
absl::StatusOr<ModelConfig> NamedModelShape(absl::string_view name);

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MODEL_CONFIG_H_
