// libFuzzer target: the safetensors parser on arbitrary bytes. Every tensor it accepts is
// read in full, so AddressSanitizer catches a span that leaves the input.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/touch.h"
#include "workers/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::vector<coil::model::StoredTensor>> tensors =
      coil::model::ParseSafetensors({data, size}, "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  for (const coil::model::StoredTensor& tensor : *tensors) {
    coil::fuzz::Touch(tensor.bytes);
  }
  return 0;
}
