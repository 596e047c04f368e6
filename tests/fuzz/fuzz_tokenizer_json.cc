// libFuzzer entry point for coil::fuzz::FuzzTokenizerJson (tests/fuzz/fuzz_tokenizer_bodies.h).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_tokenizer_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  coil::fuzz::FuzzTokenizerJson(data, size);
  return 0;
}
