// libFuzzer entry point for coil::fuzz::FuzzSafetensorsIndex (tests/fuzz/fuzz_bodies.h).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  coil::fuzz::FuzzSafetensorsIndex(data, size);
  return 0;
}
