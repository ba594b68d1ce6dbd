// What the host CPU can run, for code that picks an instruction set at run
// time (the reference GEMM, the seeded weight generator). Each caller keeps
// a portable path with the same results.

#ifndef TILEC_KERNELS_HOST_CPU_H_
#define TILEC_KERNELS_HOST_CPU_H_

namespace tilec::kernels {

// The code paths of such a caller: the fastest the host runs, else at most
// AVX2, else the portable loop. Tests pick a slower one where the host has
// a faster, to check that every path gives the same bits.
enum class SimdPath { kFastest, kAvx2, kPortable };

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// Whether the host has AVX2 (asked once).
inline bool HostHasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

// A helper inlined into an AVX2 loop and compiled for AVX2 itself, so its
// vectors stay YMM registers and are never passed in memory.
#define TILEC_AVX2_INLINE __attribute__((always_inline, target("avx2"))) inline

// Whether the host has AVX-512F (asked once).
inline bool HostHasAvx512f() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

// Whether it has AVX-512F and AVX-512DQ (64-bit integer products), asked
// once.
inline bool HostHasAvx512dq() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 &&
           __builtin_cpu_supports("avx512dq") != 0;
  }();
  return has;
}
#endif

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_HOST_CPU_H_
