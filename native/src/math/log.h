// The natural logarithm as a polynomial, for every kernel: branch-free float arithmetic and
// selects, so that a CPU loop calling it vectorises (libm's logf is a call the vectoriser
// cannot widen), and the same formula on the GPU. The companion of math/exp.h.
#pragma once

#include <cstdint>

#include "math/common.h"
#include "math/float_bits.h"

namespace tirl {

// ln of a positive normal float `scaled`, less shift ln 2 (shift 23: a subnormal scaled by
// 2^23): x = 2^e m with m in [sqrt(1/2), sqrt(2)), ln x = e ln 2 + ln(1 + f), f = m - 1, by the
// Cephes logf polynomial (f + f^2 (-1/2 + f P(f))) with ln 2 in two parts. log_any's
// reduction and polynomial, shared with log_normal.
TIRL_HD inline float log_reduced(float scaled, int32_t shift) {
  const uint32_t bits = float_bits(scaled);
  // Exponent and mantissa, the mantissa moved to [sqrt(1/2), sqrt(2)) (0x3f3504f3 is
  // sqrt(1/2)): adding 0x3f800000 - 0x3f3504f3 before the split puts the boundary there.
  const uint32_t shifted = bits + (0x3f800000u - 0x3f3504f3u);
  const int32_t exponent = static_cast<int32_t>(shifted >> 23) - 127 - shift;
  const float m = bits_float((shifted & 0x007fffffu) + 0x3f3504f3u);
  const float f = m - 1.0f;
  const float e = static_cast<float>(exponent);
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const float f2 = f * f;
  float y = f * f2 * p;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * f2;
  return (f + y) + e * 0.693359375f;
}

// ln x for every float x, within 2 ulp of the correctly rounded value (native/test/math_test.cc
// checks every 251st bit pattern against double log): log_reduced, subnormals scaled by 2^23
// first. ln(+-0) = -Inf, ln(x < 0) = NaN, ln(+Inf) = +Inf, NaN in, NaN out.
TIRL_HD inline float log_any(float x) {
  const bool subnormal = x < 1.17549435e-38f;  // also 0 and negatives: handled below
  const float scaled = select(subnormal, x * 8388608.0f, x);
  const float result = log_reduced(scaled, 23 * static_cast<int32_t>(subnormal));
  // +Inf and NaN: exponent bits all ones. x <= 0 (not NaN): -Inf for zeros, NaN below.
  const bool special = (float_bits(scaled) & 0x7f800000u) == 0x7f800000u;
  const float positive = select(special, x + x, result);  // Inf + Inf = Inf, NaN stays NaN
  return select(x == 0.0f, bits_float(0xff800000u),
                select(x < 0.0f, bits_float(0x7fc00000u), positive));
}

// log_any(x) where x is known to be a normal float, +-0 or negative (not subnormal, Inf or
// NaN): its bits without the tests for those (the dppo_kl quotient of a bounded block,
// math/policy_loss.h, which is never one of them).
TIRL_HD inline float log_normal(float x) {
  return select(x == 0.0f, bits_float(0xff800000u),
                select(x < 0.0f, bits_float(0x7fc00000u), log_reduced(x, 0)));
}

}  // namespace tirl
