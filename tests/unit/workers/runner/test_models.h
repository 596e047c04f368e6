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
// inside a mixer (swapping B and C went unseen). The projections are scaled by 16 (a power
// of two: exact in every dtype) so that each mixer moves the residual stream by O(1).
inline void Amplify(std::vector<model::TensorData>& tensors) {
  for (model::TensorData& t : tensors) {
    const bool scaled = t.name.find("in_proj") != std::string::npos ||
                        t.name.find("out_proj") != std::string::npos ||
                        t.name.find("conv1d.weight") != std::string::npos;
    if (!scaled) continue;
    if (t.dtype == checkpoint::DType::kF32) {
      for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) {
        float v;
        std::memcpy(&v, &t.bytes[i], 4);
        v *= 16.0f;
        std::memcpy(&t.bytes[i], &v, 4);
      }
    } else {  // bf16 and f16: add 4 to the exponent field of every non-zero value
      const int shift = t.dtype == checkpoint::DType::kBF16 ? 7 : 10;
      for (size_t i = 0; i + 2 <= t.bytes.size(); i += 2) {
        uint16_t bits;
        std::memcpy(&bits, &t.bytes[i], 2);
        if ((bits & 0x7fff) != 0) bits = static_cast<uint16_t>(bits + (4 << shift));
        std::memcpy(&t.bytes[i], &bits, 2);
      }
    }
  }
}

}  // namespace coil::testing_reference

#endif  // COIL_TESTS_UNIT_WORKERS_RUNNER_TEST_MODELS_H_
