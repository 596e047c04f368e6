// The merge rule of the GPU argmax, shared by the kernel and its host test: a candidate is
// a (value, index) pair, larger values win and, among equal values, the lower index. It is
// a total order on real candidates, so any reduction tree gives the answer of a scan from
// the left. NaN and -inf never become candidates (a scan keeps v only when v > best).
#ifndef COIL_KERNELS_CUDA_ARGMAX_PAIR_H_
#define COIL_KERNELS_CUDA_ARGMAX_PAIR_H_

#include <cstdint>

#if defined(__CUDACC__)
#define COIL_HOST_DEVICE __host__ __device__
#else
#define COIL_HOST_DEVICE
#endif

namespace coil::cuda {

struct ArgmaxPair {
  float value;    // -inf while there is no candidate
  int32_t index;  // -1 while there is no candidate
};

// Commutative and associative over candidates: the same bits whichever order merges them.
COIL_HOST_DEVICE inline ArgmaxPair BetterOf(ArgmaxPair a, ArgmaxPair b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// Folds element `index` with value `v` into `best`; `v` must come at a higher index than
// every element folded before (a left-to-right scan), so a strict > keeps the lowest index.
COIL_HOST_DEVICE inline void ScanStep(ArgmaxPair& best, float v, int32_t index) {
  if (v > best.value) {
    best.value = v;
    best.index = index;
  }
}

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_ARGMAX_PAIR_H_
