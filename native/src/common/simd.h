// Run-time choice of the instruction set the hot loops run with.
//
// Prebuilds target the x86-64 baseline (SSE2); each op's hot loops are compiled from one
// source (`cpu/<op>_kernels.inc`) once per path below and the path is picked once per
// process: the widest the CPU supports, or TIRL_SIMD=baseline|avx2|avx512 (clamped to what
// the CPU supports; for tests and benchmarks).
//
// FMA: the avx2 and avx512 paths may contract a * b + c into one fused multiply-add (GCC's
// default for C++), the baseline cannot. So results may differ across paths by rounding
// (a few ulp of f32 in the per-element values; sums in double agree to ~1e-7 relative), but
// never run to run nor across thread counts: within a process one path runs every chunk,
// and chunking depends only on sizes. test/simd.test.ts compares the paths with a tolerance.
#pragma once

namespace tirl {

enum class SimdPath { baseline, avx2, avx512 };

// The path every kernel runs with in this process (decided on first use).
SimdPath simd_path();

// "sse2" (the x86-64 baseline), "avx2" (AVX2 + FMA), "avx512" (AVX-512 F/BW/VL/DQ), or the
// baseline's name on other architectures.
const char* simd_path_name(SimdPath path);

// Asks for the cache line holding `address` in L2 (prefetcht1 on x86: a hint, never a
// fault, whatever the address). For the loops whose streams the hardware's prefetcher does
// not keep ahead of (many at once, backwards, or read in bursts between stretches of
// arithmetic): they fetch the lines they reach some microseconds later while they compute.
inline void prefetch_to_l2(const void* address) { __builtin_prefetch(address, 0, 2); }

}  // namespace tirl

#if defined(__x86_64__) && defined(__GNUC__)
#define TIRL_SIMD_X86 1
#else
#define TIRL_SIMD_X86 0
#endif

// TIRL_SIMD_SELECT(function) names the compilation of `function` (from a kernels file
// included by common/simd_kernels.h) for the path that runs, as a function pointer:
//   TIRL_SIMD_SELECT(run_chunk<true, float>)(args...)
#if TIRL_SIMD_X86
#define TIRL_SIMD_SELECT(...)                                               \
  (::tirl::simd_path() == ::tirl::SimdPath::avx512 ? &simd_avx512::__VA_ARGS__ \
   : ::tirl::simd_path() == ::tirl::SimdPath::avx2 ? &simd_avx2::__VA_ARGS__   \
                                                   : &simd_baseline::__VA_ARGS__)
#else
#define TIRL_SIMD_SELECT(...) (&simd_baseline::__VA_ARGS__)
#endif
