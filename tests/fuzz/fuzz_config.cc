// libFuzzer target: config.json parsing on arbitrary text. An accepted config must survive
// a round trip through ModelConfigToJson in both formats with the same shape (the
// invariant the writer and the parser share), and RequiredTensors must be computable.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "workers/model/checkpoint.h"
#include "workers/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<coil::model::ModelConfig> config = coil::model::ParseModelConfig(text);
  if (!config.ok()) return 0;
  (void)coil::model::RequiredTensors(*config);
  for (coil::model::ConfigFormat format :
       {coil::model::ConfigFormat::kMambaSsm, coil::model::ConfigFormat::kHuggingFace}) {
    absl::StatusOr<coil::model::ModelConfig> back =
        coil::model::ParseModelConfig(coil::model::ModelConfigToJson(*config, format));
    if (!back.ok() || back->d_model != config->d_model || back->n_layer != config->n_layer ||
        back->nheads() != config->nheads() || back->ngroups != config->ngroups ||
        back->padded_vocab_size() != config->padded_vocab_size() ||
        back->tie_embeddings != config->tie_embeddings || back->bias != config->bias ||
        back->conv_bias != config->conv_bias) {
      std::abort();  // the writer produced a config the parser reads differently
    }
  }
  return 0;
}
