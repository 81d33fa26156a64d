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
#ifndef TIRL_SIMD_KERNELS
#error "define TIRL_SIMD_KERNELS to the kernels file before including common/simd_kernels.h"
#endif

namespace simd_baseline {
#include TIRL_SIMD_KERNELS
}  // namespace simd_baseline

#if TIRL_SIMD_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,popcnt")
namespace simd_avx2 {
#include TIRL_SIMD_KERNELS
}  // namespace simd_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt,prefer-vector-width=512")
namespace simd_avx512 {
#include TIRL_SIMD_KERNELS
}  // namespace simd_avx512
#pragma GCC pop_options
#endif

#undef TIRL_SIMD_KERNELS
