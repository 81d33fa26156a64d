// groupAdvantages' division by 7 (n - 1 for groups of eight) without the divider, for the
// blocked groups of eight in cpu/group_advantages_kernels.inc (AVX2 and AVX-512 paths), in a
// header of its own so that native/test/group_advantages_divide_test.cc checks these very
// functions. Each carries its own target attribute (the same in every file that includes
// it), so it is callable from the kernels' AVX2 and AVX-512 copies alone.
//
// With y = RN(1/7), q = RN(a y), r = a - 7 q (one fused multiply-add) and q' = RN(q + r y),
// q' = RN(a / 7) by Markstein's theorem (P. Markstein, IBM J. Res. Dev. 34(1), 1990; in
// Muller et al., Handbook of Floating-Point Arithmetic, the chapter on the FMA): it asks
// for y within half an ulp of 1/7 (y is RN(1/7)), q within one ulp of a / 7, r exact, and
// no underflow or overflow. Here 1 - 7 y = 2^-54 exactly, so a y = (a / 7)(1 - 2^-54) lies
// below a / 7 by less than half an ulp of it and rounds to one of its two neighbours: q is
// faithful. a and 7 q are then integer multiples of ulp(q) and |r| < 14 ulp(q), so r is
// exact whenever q is normal. Hence q' = RN(a / 7) for every a in [2^-1000, DBL_MAX], and
// for a = +0 (q = r = q' = +0). Other lanes (tiny or subnormal a, NaN, Inf, -0, negative
// numbers) take the division, lane by lane, so every lane gets the bits of a / 7.
#pragma once

#include <cfloat>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace tirl::cpu {

constexpr double kSeventh = 1.0 / 7.0;         // RN(1/7) = (1 - 2^-54) / 7
constexpr double kExactSeventhLow = 0x1p-1000;  // a / 7 normal with room to spare

__attribute__((target("avx2,fma"))) inline __m256d divide_by_7(__m256d a) {
  const __m256d seven = _mm256_set1_pd(7.0), y = _mm256_set1_pd(kSeventh);
  const __m256d q = _mm256_mul_pd(a, y);
  const __m256d r = _mm256_fnmadd_pd(q, seven, a);
  const __m256d quotient = _mm256_fmadd_pd(r, y, q);
  const __m256d in_range =
      _mm256_and_pd(_mm256_cmp_pd(a, _mm256_set1_pd(kExactSeventhLow), _CMP_GE_OQ),
                    _mm256_cmp_pd(a, _mm256_set1_pd(DBL_MAX), _CMP_LE_OQ));
  const __m256d positive_zero =
      _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_castpd_si256(a), _mm256_setzero_si256()));
  const __m256d exact = _mm256_or_pd(in_range, positive_zero);
  if (_mm256_movemask_pd(exact) == 0xF) return quotient;
  return _mm256_blendv_pd(_mm256_div_pd(a, seven), quotient, exact);
}

__attribute__((target("avx512f,avx2,fma"))) inline __m512d divide_by_7(__m512d a) {
  const __m512d seven = _mm512_set1_pd(7.0), y = _mm512_set1_pd(kSeventh);
  const __m512d q = _mm512_mul_pd(a, y);
  const __m512d r = _mm512_fnmadd_pd(q, seven, a);
  const __m512d quotient = _mm512_fmadd_pd(r, y, q);
  const __mmask8 exact =
      (_mm512_cmp_pd_mask(a, _mm512_set1_pd(kExactSeventhLow), _CMP_GE_OQ) &
       _mm512_cmp_pd_mask(a, _mm512_set1_pd(DBL_MAX), _CMP_LE_OQ)) |
      _mm512_testn_epi64_mask(_mm512_castpd_si512(a), _mm512_castpd_si512(a));
  if (exact == 0xFF) return quotient;
  return _mm512_mask_div_pd(quotient, static_cast<__mmask8>(~exact), a, seven);
}

}  // namespace tirl::cpu
#endif
