// Compiles the kernels file named by TIRL_SIMD_KERNELS once per SIMD path, each copy in its
// own namespace (simd_baseline, simd_avx2, simd_avx512); TIRL_SIMD_SELECT (common/simd.h)
// picks one at run time. Included once per op's .cc, inside its namespace, after every
// header the kernels need (common/simd.h among them):
// a header first expanded under a `#pragma GCC target` would give its inline functions
// AVX code that the linker may then pick for every caller. The kernels file itself
// includes nothing. Functions it calls from those headers are inlined into it and so
// compiled for its path.
//
//   #define TIRL_SIMD_KERNELS "cpu/<op>_kernels.inc"
//   #include "common/simd_kernels.h"
//
// A kernels file may hold code for one path only under `#if TIRL_SIMD_AVX2` (true in the
// avx2 and avx512 copies) or `#if TIRL_SIMD_AVX512`: in C++ `#pragma GCC target` does not
// define __AVX2__ and friends. Intrinsics from <immintrin.h> (included by the .cc) compile
// inside those copies.
#ifndef TIRL_SIMD_KERNELS
#error "define TIRL_SIMD_KERNELS to the kernels file before including common/simd_kernels.h"
#endif

#define TIRL_SIMD_AVX2 0
#define TIRL_SIMD_AVX512 0
namespace simd_baseline {
#include TIRL_SIMD_KERNELS
}  // namespace simd_baseline
#undef TIRL_SIMD_AVX2
#undef TIRL_SIMD_AVX512

#if TIRL_SIMD_X86
// Clang has no `#pragma GCC target`: it gives every function of the region the target
// attribute instead.
#define TIRL_SIMD_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define TIRL_SIMD_TARGET_BEGIN(features) \
  TIRL_SIMD_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define TIRL_SIMD_TARGET_END TIRL_SIMD_PRAGMA(clang attribute pop)
#else
#define TIRL_SIMD_TARGET_BEGIN(features) \
  TIRL_SIMD_PRAGMA(GCC push_options) TIRL_SIMD_PRAGMA(GCC target(features))
#define TIRL_SIMD_TARGET_END TIRL_SIMD_PRAGMA(GCC pop_options)
#endif

TIRL_SIMD_TARGET_BEGIN("avx2,fma,f16c,bmi,bmi2,popcnt")
#define TIRL_SIMD_AVX2 1
#define TIRL_SIMD_AVX512 0
namespace simd_avx2 {
#include TIRL_SIMD_KERNELS
}  // namespace simd_avx2
#undef TIRL_SIMD_AVX2
#undef TIRL_SIMD_AVX512
TIRL_SIMD_TARGET_END

#if defined(__clang__)
TIRL_SIMD_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt")
#else
TIRL_SIMD_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt,prefer-vector-width=512")
#endif
#define TIRL_SIMD_AVX2 1
#define TIRL_SIMD_AVX512 1
namespace simd_avx512 {
#include TIRL_SIMD_KERNELS
}  // namespace simd_avx512
#undef TIRL_SIMD_AVX2
#undef TIRL_SIMD_AVX512
TIRL_SIMD_TARGET_END
#undef TIRL_SIMD_TARGET_BEGIN
#undef TIRL_SIMD_TARGET_END
#undef TIRL_SIMD_PRAGMA
#endif

#undef TIRL_SIMD_KERNELS
