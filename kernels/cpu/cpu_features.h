// What the host CPU can run, detected once per process; the kernels dispatch on it at run
// time so one binary uses AMX or AVX-512 BF16 where they exist and a portable path where
// they do not. COIL_MAX_CPU_ISA (amx, avx512_bf16, avx512, avx2 or portable) caps what is used,
// to compare the paths on one machine (tests run the fast kernels at each cap);
// COIL_CPU_PORTABLE=1 is the same as COIL_MAX_CPU_ISA=portable.
#ifndef COIL_KERNELS_CPU_CPU_FEATURES_H_
#define COIL_KERNELS_CPU_CPU_FEATURES_H_

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace coil {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2, FMA and F16C (vcvtph2ps)
  bool avx512 = false;       // F, BW, VL, DQ
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16
  // AMX tiles with bf16 products (tdpbf16ps), and the kernel's permission to use them.
  bool amx_bf16 = false;

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
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.amx_bf16 = f.avx512_bf16 && DetectAmx();
    const char* cap = std::getenv("COIL_MAX_CPU_ISA");
    if (cap != nullptr && *cap != '\0' && std::strcmp(cap, "amx") != 0) {
      f.amx_bf16 = false;
      if (std::strcmp(cap, "avx512_bf16") != 0) f.avx512_bf16 = false;
      if (std::strcmp(cap, "avx512_bf16") != 0 && std::strcmp(cap, "avx512") != 0) {
        f.avx512 = false;
        if (std::strcmp(cap, "avx2") != 0) f.avx2_fma = false;
      }
    }
#endif
    return f;
  }

#if defined(__x86_64__)
  // CPUID.1:ECX bit 29 (GCC 12's __builtin_cpu_supports has no "f16c").
  static bool HasF16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  }

  // CPUID.7.0:EDX bit 22 (AMX-BF16) and 24 (AMX-TILE), the OS saving the tile state
  // (XCR0 bits 17 and 18), and Linux granting this process the tile data
  // (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16 and newer).
  static bool DetectAmx() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if ((edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0) return false;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & (1u << 27)) == 0) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
#endif
};

}  // namespace coil

#endif  // COIL_KERNELS_CPU_CPU_FEATURES_H_
