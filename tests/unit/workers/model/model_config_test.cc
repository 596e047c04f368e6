// config.json in both formats. Derived sizes are worked out by hand from mamba_ssm's
// Mamba2 (d_inner = expand * d_model, nheads = d_inner / headdim, in_proj rows
// 2 * d_inner + 2 * ngroups * d_state + nheads); refusals must name the setting.
#include "workers/model/model_config.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coil::model {
namespace {

using ::testing::HasSubstr;

// state-spaces/mamba2-130m's config.json, verbatim.
constexpr char kMamba2_130m[] = R"({"d_model": 768, "d_intermediate": 0, "n_layer": 24,
  "vocab_size": 50277, "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [], "attn_cfg": {},
  "rms_norm": true, "residual_in_fp32": true, "fused_add_norm": true,
  "pad_vocab_size_multiple": 16, "tie_embeddings": true})";

// mistralai/Mamba-Codestral-7B-v0.1's config.json (as json.dumps writes it: Infinity).
constexpr char kCodestral[] = R"({"architectures": ["Mamba2ForCausalLM"], "bos_token_id": 0,
  "chunk_size": 256, "conv_kernel": 4, "eos_token_id": 0, "expand": 2, "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.1,
  "layer_norm_epsilon": 1e-05, "model_type": "mamba2", "n_groups": 8,
  "norm_before_gate": true, "num_heads": 128, "num_hidden_layers": 64, "pad_token_id": 0,
  "rescale_prenorm_residual": false, "residual_in_fp32": true, "rms_norm": true,
  "state_size": 128, "tie_word_embeddings": false, "time_step_floor": 0.0001,
  "time_step_init_scheme": "random", "time_step_limit": [0.0, Infinity],
  "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 256,
  "time_step_scale": 1.0, "torch_dtype": "bfloat16", "use_bias": false, "use_cache": true,
  "use_conv_bias": true, "vocab_size": 32768})";

TEST(ModelConfigTest, Mamba2_130mUsesMambaSsmDefaults) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kMamba2_130m);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->format, ConfigFormat::kMambaSsm);
  EXPECT_EQ(config->d_model, 768);
  EXPECT_EQ(config->n_layer, 24);
  EXPECT_EQ(config->d_state, 128);  // Mamba2 defaults
  EXPECT_EQ(config->headdim, 64);
  EXPECT_EQ(config->ngroups, 1);
  EXPECT_EQ(config->d_conv, 4);
  EXPECT_EQ(config->chunk_size, 256);
  EXPECT_EQ(config->d_inner(), 1536);
  EXPECT_EQ(config->nheads(), 24);
  EXPECT_EQ(config->d_in_proj(), 2 * 1536 + 2 * 128 + 24);  // 3352
  EXPECT_EQ(config->conv_dim(), 1536 + 2 * 128);
  EXPECT_EQ(config->padded_vocab_size(), 50288);  // 50277 rounded up to 16
  EXPECT_EQ(config->vocab_size, 50277);
  EXPECT_TRUE(config->tie_embeddings);
  EXPECT_TRUE(config->conv_bias);
  EXPECT_FALSE(config->bias);
  EXPECT_TRUE(std::isinf(config->time_step_max));
}

TEST(ModelConfigTest, CodestralLoadsAndIgnoresNormBeforeGate) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kCodestral);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->format, ConfigFormat::kHuggingFace);
  EXPECT_EQ(config->d_model, 4096);
  EXPECT_EQ(config->nheads(), 128);
  EXPECT_EQ(config->ngroups, 8);
  EXPECT_EQ(config->padded_vocab_size(), 32768);
  EXPECT_FALSE(config->tie_embeddings);
  EXPECT_EQ(config->time_step_min, 0.0);
  EXPECT_TRUE(std::isinf(config->time_step_max));
}

void ExpectRefused(const std::string& json, const std::string& name) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(json);
  ASSERT_FALSE(config.ok()) << json;
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(name)) << json;
}

TEST(ModelConfigTest, UnsupportedSettingsAreRefusedByName) {
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10,
                   "ssm_cfg": {"layer": "Mamba2", "norm_before_gate": true}})",
                "ssm_cfg.norm_before_gate");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10, "ssm_cfg": {}})",
                "ssm_cfg.layer");  // Mamba1
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10,
                   "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [1]})",
                "attn_layer_idx");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10,
                   "ssm_cfg": {"layer": "Mamba2"}, "d_intermediate": 128})",
                "d_intermediate");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10,
                   "ssm_cfg": {"layer": "Mamba2", "D_has_hdim": true}})",
                "ssm_cfg.D_has_hdim");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10,
                   "ssm_cfg": {"layer": "Mamba2", "mystery": 1}})",
                "ssm_cfg.mystery");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10, "rms_norm": false,
                   "ssm_cfg": {"layer": "Mamba2"}})",
                "rms_norm");
  ExpectRefused(R"({"model_type": "mamba", "hidden_size": 64})", "model_type");
  ExpectRefused(R"({"model_type": "mamba2", "hidden_size": 64, "expand": 2, "num_heads": 4,
                   "head_dim": 16, "n_groups": 1})",
                "num_heads");  // 4 * 16 != 128
  ExpectRefused(R"({"model_type": "mamba2", "hidden_size": 64, "expand": 2, "num_heads": 8,
                   "head_dim": 16, "n_groups": 3})",
                "ngroups");  // 8 heads in 3 groups
  ExpectRefused(R"({"d_model": "big"})", "d_model");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2, "vocab_size": 10,
                   "ssm_cfg": {"layer": "Mamba2", "dt_limit": [0.1, NaN]}})",
                "NaN");
  ExpectRefused(R"({"d_model": 64, "n_layer": 2,)", "not well-formed");
  ExpectRefused(std::string(40, '[') + std::string(40, ']'), "nesting");
}

TEST(ModelConfigTest, BothFormatsRoundTrip) {
  absl::StatusOr<ModelConfig> tiny = NamedModelShape("tiny");
  ASSERT_TRUE(tiny.ok());
  ASSERT_TRUE(SetModelConfigField(*tiny, "ngroups", "4").ok());
  ASSERT_TRUE(SetModelConfigField(*tiny, "tie_embeddings", "false").ok());
  tiny->time_step_max = 0.5;
  for (ConfigFormat format : {ConfigFormat::kMambaSsm, ConfigFormat::kHuggingFace}) {
    absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*tiny, format));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->format, format);
    EXPECT_EQ(back->d_model, 64);
    EXPECT_EQ(back->ngroups, 4);
    EXPECT_EQ(back->nheads(), 8);
    EXPECT_EQ(back->d_state, 16);
    EXPECT_EQ(back->chunk_size, 8);
    EXPECT_EQ(back->padded_vocab_size(), 256);
    EXPECT_FALSE(back->tie_embeddings);
    EXPECT_EQ(back->time_step_max, 0.5);
    // Only mamba_ssm keeps the real vocabulary; Hugging Face records the padded one.
    EXPECT_EQ(back->vocab_size, format == ConfigFormat::kMambaSsm ? 250 : 256);
  }
}

// The keys and values nvidia/Nemotron-H-8B-Base-8K's config.json has (generic ones too,
// which must be accepted), with the Mamba2 time-step keys HF writes.
constexpr char kNemotronH8b[] = R"({"architectures": ["NemotronHForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "attention_head_dim": 128,
  "auto_map": {"AutoConfig": "configuration_nemotron_h.NemotronHConfig"}, "bos_token_id": 1,
  "chunk_size": 128, "conv_kernel": 4, "eos_token_id": 2, "expand": 2, "hidden_dropout": 0.0,
  "hidden_size": 4096,
  "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
  "initializer_range": 0.02, "intermediate_size": 21504, "layer_norm_epsilon": 1e-05,
  "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
  "mamba_proj_bias": false, "max_position_embeddings": 8192, "mlp_bias": false,
  "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8,
  "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8,
  "num_logits_to_keep": 1, "pad_token_id": 0, "rescale_prenorm_residual": true,
  "residual_in_fp32": false, "rms_norm_eps": 1e-05, "sliding_window": null,
  "ssm_state_size": 128, "tie_word_embeddings": false, "time_step_floor": 0.0001,
  "time_step_limit": [0.0, Infinity], "time_step_max": 0.1, "time_step_min": 0.001,
  "time_step_rank": 256, "torch_dtype": "bfloat16", "transformers_version": "4.48.0.dev0",
  "use_bias": false, "use_cache": true, "use_conv_bias": true, "use_mamba_kernels": true,
  "vocab_size": 131072})";

TEST(ModelConfigTest, NemotronH8bIsAHybridOfThreeBlockKinds) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kNemotronH8b);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->format, ConfigFormat::kNemotronH);
  EXPECT_EQ(config->n_layer, 52);
  // The pattern counted by hand: 24 M, 4 *, 24 -.
  EXPECT_EQ(config->num_layers(LayerKind::kMamba2), 24);
  EXPECT_EQ(config->num_layers(LayerKind::kAttention), 4);
  EXPECT_EQ(config->num_layers(LayerKind::kMlp), 24);
  EXPECT_EQ(config->layer_kind(0), LayerKind::kMamba2);
  EXPECT_EQ(config->layer_kind(1), LayerKind::kMlp);
  EXPECT_EQ(config->layer_kind(7), LayerKind::kAttention);
  EXPECT_EQ(config->d_inner(), 128 * 64);  // mamba_num_heads * mamba_head_dim
  EXPECT_EQ(config->nheads(), 128);
  EXPECT_EQ(config->ngroups, 8);
  EXPECT_EQ(config->d_in_proj(), 2 * 8192 + 2 * 8 * 128 + 128);
  EXPECT_EQ(config->attention_heads, 32);
  EXPECT_EQ(config->kv_heads, 8);
  EXPECT_EQ(config->attention_head_dim, 128);
  EXPECT_EQ(config->intermediate_size, 21504);
  EXPECT_EQ(config->chunk_size, 128);
  EXPECT_EQ(config->padded_vocab_size(), 131072);
  EXPECT_FALSE(config->tie_embeddings);
  EXPECT_TRUE(std::isinf(config->time_step_max));
  EXPECT_TRUE(config->has_attention());
}

TEST(ModelConfigTest, NemotronHHeadDimFallsBackInTheIssuesOrder) {
  // head_dim, else attention_head_dim, else hidden_size / num_attention_heads.
  const std::string base = R"({"model_type": "nemotron_h", "hidden_size": 64,
    "hybrid_override_pattern": "M*", "mamba_num_heads": 8, "mamba_head_dim": 16,
    "n_groups": 2, "num_attention_heads": 4, "num_key_value_heads": 2)";
  EXPECT_EQ(
      ParseModelConfig(base + R"(, "head_dim": 8, "attention_head_dim": 32})")->attention_head_dim,
      8);
  EXPECT_EQ(ParseModelConfig(base + R"(, "attention_head_dim": 32})")->attention_head_dim, 32);
  EXPECT_EQ(ParseModelConfig(base + "}")->attention_head_dim, 16);  // 64 / 4
  // The newer list form of the blocks, and key spellings with the mamba_ prefix.
  absl::StatusOr<ModelConfig> listed = ParseModelConfig(R"({"model_type": "nemotron_h",
    "hidden_size": 64, "layers_block_type": ["mamba", "attention", "mlp", "mamba"],
    "mamba_num_heads": 8, "mamba_head_dim": 16, "mamba_n_groups": 4, "mamba_d_conv": 3,
    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 32})");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->layer_pattern, "M*-M");
  EXPECT_EQ(listed->ngroups, 4);
  EXPECT_EQ(listed->d_conv, 3);
}

TEST(ModelConfigTest, NemotronHRefusalsNameWhatIsWrong) {
  const auto with = [](const std::string& fields) {
    return R"({"model_type": "nemotron_h", "hidden_size": 64, "mamba_num_heads": 8,
      "mamba_head_dim": 16, "n_groups": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "intermediate_size": 32, )" +
           fields + "}";
  };
  ExpectRefused(with(R"("hybrid_override_pattern": "M*-", "num_hidden_layers": 4)"),
                "num_hidden_layers is 4");  // the pattern has 3 characters
  ExpectRefused(with(R"("hybrid_override_pattern": "M*X-")"), "'X' at layer 2");
  ExpectRefused(with(R"("hybrid_override_pattern": "M*E-")"), "'E' (a mixture-of-experts");
  ExpectRefused(with(R"("hybrid_override_pattern": "*-")"), "no Mamba2 block");
  ExpectRefused(with(R"("num_hidden_layers": 2)"), "hybrid_override_pattern is missing");
  ExpectRefused(with(R"("hybrid_override_pattern": "M*", "num_key_value_heads": 3)"),
                "num_key_value_heads is 3");  // 3 does not divide 4
  ExpectRefused(with(R"("hybrid_override_pattern": "M*", "mlp_hidden_act": "silu")"),
                "mlp_hidden_act");
  ExpectRefused(with(R"("hybrid_override_pattern": "M*", "attention_bias": true)"),
                "attention_bias");
  ExpectRefused(with(R"("hybrid_override_pattern": "M-", "mlp_bias": true)"), "mlp_bias");
  ExpectRefused(with(R"("hybrid_override_pattern": "M", "mamba_proj_bias": true)"),
                "mamba_proj_bias");
  ExpectRefused(with(R"("hybrid_override_pattern": "M*", "sliding_window": 1024)"),
                "sliding_window");
  ExpectRefused(with(R"("hybrid_override_pattern": "M-", "intermediate_size": 0)"),
                "intermediate_size");
  ExpectRefused(with(R"("hybrid_override_pattern": 7)"), "hybrid_override_pattern");
}

TEST(ModelConfigTest, NemotronHRoundTripsAndTheNamedShapesAreValid) {
  for (const char* name : {"nemotron-tiny", "nemotron-130m"}) {
    absl::StatusOr<ModelConfig> shape = NamedModelShape(name);
    ASSERT_TRUE(shape.ok()) << shape.status();
    ASSERT_TRUE(ValidateModelConfig(*shape).ok()) << name;
    absl::StatusOr<ModelConfig> back =
        ParseModelConfig(ModelConfigToJson(*shape, ConfigFormat::kNemotronH));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->format, ConfigFormat::kNemotronH);
    EXPECT_EQ(back->layer_pattern, shape->layer_pattern);
    EXPECT_EQ(back->n_layer, shape->n_layer);
    EXPECT_EQ(back->d_model, shape->d_model);
    EXPECT_EQ(back->nheads(), shape->nheads());
    EXPECT_EQ(back->ngroups, shape->ngroups);
    EXPECT_EQ(back->attention_heads, shape->attention_heads);
    EXPECT_EQ(back->kv_heads, shape->kv_heads);
    EXPECT_EQ(back->attention_head_dim, shape->attention_head_dim);
    EXPECT_EQ(back->intermediate_size, shape->intermediate_size);
    EXPECT_EQ(back->padded_vocab_size(), shape->padded_vocab_size());
    EXPECT_EQ(back->tie_embeddings, shape->tie_embeddings);
  }
  // nemotron-tiny has every block kind, an attention block beside an MLP block, GQA and
  // more than one group.
  const ModelConfig tiny = *NamedModelShape("nemotron-tiny");
  EXPECT_NE(tiny.layer_pattern.find("*-"), std::string::npos);
  EXPECT_NE(tiny.layer_pattern.find("-*"), std::string::npos);
  EXPECT_GT(tiny.attention_heads, tiny.kv_heads);
  EXPECT_GT(tiny.ngroups, 1);
  // --set takes the Hugging Face names; the pattern sets the layer count.
  ModelConfig changed = tiny;
  ASSERT_TRUE(SetModelConfigField(changed, "hybrid_override_pattern", "M*").ok());
  ASSERT_TRUE(SetModelConfigField(changed, "num_key_value_heads", "1").ok());
  EXPECT_EQ(changed.n_layer, 2);
  EXPECT_EQ(changed.kv_heads, 1);
  EXPECT_TRUE(ValidateModelConfig(changed).ok());
}

TEST(ModelConfigTest, VocabPadding) {
  ModelConfig config = *NamedModelShape("tiny");
  EXPECT_EQ(config.padded_vocab_size(), 256);  // 250 -> next multiple of 16
  config.vocab_size = 257;
  config.pad_vocab_size_multiple = 8;
  EXPECT_EQ(config.padded_vocab_size(), 264);
  config.vocab_size = 256;
  EXPECT_EQ(config.padded_vocab_size(), 256);  // already a multiple
}

TEST(ModelConfigTest, SetRefusesUnknownKeysAndBadValues) {
  ModelConfig config = *NamedModelShape("tiny");
  EXPECT_THAT(std::string(SetModelConfigField(config, "n_layers", "3").message()),
              HasSubstr("n_layers"));
  EXPECT_THAT(std::string(SetModelConfigField(config, "d_state", "x").message()),
              HasSubstr("d_state"));
  EXPECT_TRUE(SetModelConfigField(config, "norm_epsilon", "1e-6").ok());
  EXPECT_EQ(config.norm_epsilon, 1e-6);
  EXPECT_FALSE(NamedModelShape("7b").ok());
}

}  // namespace
}  // namespace coil::model
