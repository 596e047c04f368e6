// The sampler's random numbers: the Philox draws of kernels/philox.h, which the GPU's
// Gumbel-max kernel computes too, so a token sampled on either side is the same.
#ifndef COIL_WORKERS_PHILOX_H_
#define COIL_WORKERS_PHILOX_H_

#include "kernels/philox.h"

namespace coil {

using philox::Gumbel;
using philox::UniformOpen01;

}  // namespace coil

#endif  // COIL_WORKERS_PHILOX_H_
