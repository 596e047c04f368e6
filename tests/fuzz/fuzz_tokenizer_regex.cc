// libFuzzer entry point for coil::fuzz::FuzzTokenizerRegex (tests/fuzz/fuzz_tokenizer_bodies.h).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_tokenizer_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  coil::fuzz::FuzzTokenizerRegex(data, size);
  return 0;
}
