// The out-of-line elementwise loops of vec_math.h: one copy each, cloned per ISA.
#include "kernels/cpu/vec_math.h"

namespace coil {

COIL_VECTORIZE void NarrowToBf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

}  // namespace coil
