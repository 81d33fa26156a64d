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

// e^x for any float x, branch-free (so that a loop over it vectorises): the reduction of
// exp_parts on x clamped to [-104, 88.8], and 2^n applied as two factors 2^(n/2) and
// 2^(n - n/2), each a normal float for every n in [-150, 128] (exp_parts' single factor
// covers |n| <= 126 only). Within 2 ulp where the result is normal, one rounding where it
// is subnormal (native/test/math_test.cc); +Inf above 88.7228 (where f32 overflows), 0
// below -104; NaN in, NaN out. Where |x| <= 80 its bits are those of exp_bounded (the two
// factors multiply exactly).
TIRL_HD inline float exp_any(float x) {
  const float clamped = select(x > 88.8f, 88.8f, select(x < -104.0f, -104.0f, x));  // NaN passes
  const ExpParts e = exp_parts(clamped);
  // n from 2^n's exponent bits as exp_parts built them (wrapped past |n| = 127), redone in
  // integers: n = round(x / ln 2), the same rounding.
  const float kRound = 12582912.0f;
  const int32_t n = static_cast<int32_t>(float_bits(clamped * 1.44269504088896341f + kRound) -
                                         float_bits(kRound));
  const int32_t half = n / 2;
  const float low = bits_float(static_cast<uint32_t>(half + 127) << 23);
  const float high = bits_float(static_cast<uint32_t>(n - half + 127) << 23);
  const float value = (((e.q + e.r) + 1.0f) * low) * high;
  return select(x > 88.7228394f, bits_float(0x7f800000u), select(x < -104.0f, 0.0f, value));
}

// The bits of x (a scalar, or a GCC / Clang vector) into `out`, of the same size (uint64_t
// for a double, a vector of as many 64-bit integers for a vector of doubles): what the `_as`
// templates below work on. By reference, not returned: Clang warns that a vector returned
// from a function compiled without the vector's ISA changes the ABI.
template <class T, class U>
TIRL_HD inline void bits_as(const T& x, U& out) {
  static_assert(sizeof(U) == sizeof(T), "bits_as: the two types differ in size");
  std::memcpy(&out, &x, sizeof out);
}

// e^x in double for |x| <= 700, branch-free (so that a loop over it vectorises, which
// libm's exp does not): x = n ln 2 + r with n = round(x / ln 2) (the 1.5 * 2^52 trick) and
// ln 2 in two parts (fdlibm's, whose high part has 32 trailing zero bits, so n ln2_hi is
// exact), |r| <= ln2/2, and e^r = 1 + r P(r) by Taylor's series to r^13 (truncation below
// 2e-16 relative), 2^n from n's bits. Within about 2 ulp of the correctly rounded value
// (native/test/math_test.cc: under 1.2 ulp over [-700, 700]); e^0 = 1 exactly; NaN in, NaN
// out. The formula is written once, as a template on T (a double, or a vector of doubles
// with U its vector of uint64_t, for CPU kernels that walk whole registers of tokens), by
// reference and into `out` (see rollout_k_as in math/rollout_correction.h for why).
template <class T, class U>
TIRL_HD inline void exp_double_bounded_as(const T& x, T& out) {
  const double kRound = 6755399441055744.0;  // 1.5 * 2^52
  const T shifted = x * 1.4426950408889634 + kRound;
  const T n = shifted - kRound;
  const T r = (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  T p = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;  // 1 / 13!, 1 / 12!
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  // 2^n from the low bits of `shifted` (any input gives some bits; for NaN, r is NaN).
  U shifted_bits;
  bits_as(shifted, shifted_bits);
  const U two_to_n_bits = (shifted_bits - (double_bits(kRound) - 1023u)) << 52;
  T two_to_n;
  bits_as(two_to_n_bits, two_to_n);
  out = two_to_n * (1.0 + r * p);
}
TIRL_HD inline double exp_double_bounded(double x) {
  double out;
  exp_double_bounded_as<double, uint64_t>(x, out);
  return out;
}

}  // namespace tirl
