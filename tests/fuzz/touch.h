// Reads every byte of a span the parsers handed out, so AddressSanitizer reports a span
// that leaves the fuzzer's input. The asm keeps the compiler from dropping the reads.
#ifndef COIL_TESTS_FUZZ_TOUCH_H_
#define COIL_TESTS_FUZZ_TOUCH_H_

#include <cstdint>

#include "absl/types/span.h"

namespace coil::fuzz {

inline void Touch(absl::Span<const uint8_t> bytes) {
  uint8_t sum = 0;
  for (uint8_t byte : bytes) sum ^= byte;
  asm volatile("" : : "r"(sum));
}

}  // namespace coil::fuzz

#endif  // COIL_TESTS_FUZZ_TOUCH_H_
