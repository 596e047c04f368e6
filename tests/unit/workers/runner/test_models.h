// Test models: the random weights coil-make-model writes, with the projections scaled up
// so that every mixer matters to the logits.
#ifndef COIL_TESTS_UNIT_WORKERS_RUNNER_TEST_MODELS_H_
#define COIL_TESTS_UNIT_WORKERS_RUNNER_TEST_MODELS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "workers/model/model_writer.h"

namespace coil::testing_reference {

// coil-make-model's realistic scales (weights N(0, 0.02)) leave the mixers' share of the
// logits near 1e-3 of the embedding's, too small for a 1e-5 comparison to notice an error
// inside a mixer (swapping B and C went unseen). The Mamba2 projections are scaled by 16 and
// the attention and MLP projections by 4 (powers of two: exact in every dtype), so that each
// block moves the residual stream by O(1) and attention's softmax is far from uniform.
inline void Amplify(std::vector<model::TensorData>& tensors) {
  for (model::TensorData& t : tensors) {
    const auto has = [&](const char* part) { return t.name.find(part) != std::string::npos; };
    int log2 = 0;
    if (has("in_proj") || has("out_proj") || has("conv1d.weight")) log2 = 4;
    if (has("q_proj") || has("k_proj") || has("v_proj") || has("o_proj") || has("up_proj") ||
        has("down_proj")) {
      log2 = 2;
    }
    if (log2 == 0) continue;
    if (t.dtype == checkpoint::DType::kF32) {
      for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) {
        float v;
        std::memcpy(&v, &t.bytes[i], 4);
        v *= static_cast<float>(1 << log2);
        std::memcpy(&t.bytes[i], &v, 4);
      }
    } else {  // bf16 and f16: add log2 to the exponent field of every non-zero value
      const int shift = t.dtype == checkpoint::DType::kBF16 ? 7 : 10;
      for (size_t i = 0; i + 2 <= t.bytes.size(); i += 2) {
        uint16_t bits;
        std::memcpy(&bits, &t.bytes[i], 2);
        if ((bits & 0x7fff) != 0) bits = static_cast<uint16_t>(bits + (log2 << shift));
        std::memcpy(&t.bytes[i], &bits, 2);
      }
    }
  }
}

}  // namespace coil::testing_reference

#endif  // COIL_TESTS_UNIT_WORKERS_RUNNER_TEST_MODELS_H_
