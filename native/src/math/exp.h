// The exponential as a polynomial, for every kernel: branch-free float arithmetic and
// selects, so that a CPU loop over elements vectorises (libm's expf does not without
// -ffast-math, which would break NaN propagation), and the same formula on the GPU.
#pragma once

#include <cstdint>

#include "math/common.h"
#include "math/float_bits.h"

namespace tirl {

// e^x = 2^n (1 + r + q) with r = x - n ln 2 in [-ln2/2, ln2/2] and q = e^r - 1 - r as a
// polynomial (Cephes expf: within 2 ulp), for |x| <= 80; NaN in, NaN out. Kept in parts
// so that e^x - 1 - x can be had without cancellation.
struct ExpParts {
  float two_to_n;
  float r;
  float q;
};

TIRL_HD inline ExpParts exp_parts(float x) {
  // n = round(x / ln 2) by the 1.5 * 2^23 trick: the low bits of `shifted` hold n.
  const float kRound = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // Cody-Waite: x - n ln 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  // 2^n from the bits of `shifted` (defined for any input; for NaN, r is NaN anyway).
  const uint32_t two_to_n = (float_bits(shifted) - float_bits(kRound) + 127u) << 23;
  return {bits_float(two_to_n), r, p * r * r};
}

// e^x for |x| <= 80. The callers clamp their arguments to [-20, 20] first, so no overflow
// or denormal handling is needed.
TIRL_HD inline float exp_bounded(float x) {
  const ExpParts e = exp_parts(x);
  return e.two_to_n * ((e.q + e.r) + 1.0f);
}

struct ExpMinusOne {
  float em1;          // e^y - 1
  float em1_minus_y;  // e^y - 1 - y
};

// e^y - 1 as (2^n - 1) + 2^n (r + q), exact-ish for every y (2^n - 1 is exact); for
// |y| < ln2/2, n = 0 and r = y, so e^y - 1 - y is q itself with no cancellation. Above, the
// value is at least 0.05 and em1 - y loses under 3e-6 relative.
TIRL_HD inline ExpMinusOne exp_minus_one(float y) {
  const ExpParts e = exp_parts(y);
  const float em1 = (e.two_to_n - 1.0f) + e.two_to_n * (e.r + e.q);
  return {em1, select(e.two_to_n == 1.0f, e.q, em1 - y)};
}

// exp(x) for x <= 0 (about 1 ulp). Below -87 (where the result would be subnormal) it is
// 0, so a saturated DPO pair's loss and gradient are exactly 0, as in f32 PyTorch
// (absolute error < 1.2e-38). NaN propagates.
TIRL_HD inline float exp_nonpositive(float x) {
  const bool underflows = x < -87.0f;
  const ExpParts e = exp_parts(underflows ? -87.0f : x);
  return underflows ? 0.0f : ((e.q + e.r) + 1.0f) * e.two_to_n;
}

// e^x for any float x, branch-free (so that a loop over it vectorises): exp_bounded on an
// argument shifted by 64 outside [-80, 80], times 2^(-+64); +Inf above 88.7228 (where f32
// overflows), 0 below -104; NaN in, NaN out.
TIRL_HD inline float exp_any(float x) {
  const bool high = x > 80.0f;
  const bool low = x < -80.0f;
  const float shift = select(high, -64.0f, select(low, 64.0f, 0.0f));
  const float factor = select(high, 1.8446744073709552e19f, select(low, 5.421010862427522e-20f, 1.0f));
  const float shifted = x + shift;
  const float inner = select(shifted > 80.0f, 80.0f, select(shifted < -80.0f, -80.0f, shifted));
  const float e = exp_bounded(inner) * factor;
  return select(x > 88.7228394f, bits_float(0x7f800000u), select(x < -104.0f, 0.0f, e));
}

}  // namespace tirl
