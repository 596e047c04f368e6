// What the host CPU can run, detected once per process; the kernels dispatch on it at run
// time so one binary uses AVX-512 BF16 where it exists and a portable path where it
// does not. COIL_CPU_PORTABLE=1 in the environment reports none of it, so that tests run
// the portable forms on a machine that has AVX-512.
#ifndef COIL_KERNELS_CPU_CPU_FEATURES_H_
#define COIL_KERNELS_CPU_CPU_FEATURES_H_

#include <cstdlib>

namespace coil {

struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512 = false;       // F, BW, VL, DQ
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16

  static const CpuFeatures& Get() {
    static const CpuFeatures features = Detect();
    return features;
  }

 private:
  static CpuFeatures Detect() {
    CpuFeatures f;
    const char* portable = std::getenv("COIL_CPU_PORTABLE");
    if (portable != nullptr && portable[0] != '\0' && portable[0] != '0') return f;
#if defined(__x86_64__)
    __builtin_cpu_init();
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
    return f;
  }
};

}  // namespace coil

#endif  // COIL_KERNELS_CPU_CPU_FEATURES_H_
