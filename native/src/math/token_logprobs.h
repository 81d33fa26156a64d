// Log-probabilities and entropy from logits (MATH.md, tokenLogprobs), by an online softmax.
//
// A row of logits x (one token, V entries) at temperature T is summarised by
//   max     = max_v x_v
//   sum     = sum_v exp(d_v)          with d_v = (x_v - max) / T  (so d_v <= 0)
//   weighted = sum_v exp(d_v) * d_v   (the entropy accumulator)
// from which lse = max/T + log(sum), lp = (x_label - max)/T - log(sum) and
// H = lse - sum_v p_v z_v = log(sum) - weighted / sum. Blocks of a row are summarised
// separately (relative to their own max) and merged; the merge rescales by exp((m - m')/T),
// so the row is read once and no probability is ever stored.
//
// Per entry the kernels work in base 2: exp(d) = 2^(d log2 e), with log2 e folded into the
// 1/T factor they multiply by anyway, which spares the exp its own range reduction.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "math/common.h"
#include "math/float_bits.h"

namespace tirl {

constexpr double kLog2E = 1.4426950408889634;  // log2(e)
constexpr double kLn2 = 0.6931471805599453;    // ln(2)

// Below this, exp2_of_nonpositive() returns exactly 0 (the clamp to it makes 2^n's biased
// exponent 0, i.e. a factor of +0; 2^-127 is below the smallest normal float).
constexpr float kExp2MinArg = -127.0f;

// 2^r for |r| <= 1/2 by a degree-5 minimax polynomial (relative error 1.8e-7 evaluated in
// float, checked on 2M points), for a float or a vector of floats F (the result in `p`):
// the part of exp2_of_nonpositive_as (below) that the CPU kernels' AVX-512 copy shares.
template <class F>
TIRL_HD inline void exp2_fraction_as(const F& r, F& p) {
  p = F{} + 1.323952107e-3f;
  p = p * r + 9.671656415e-3f;
  p = p * r + 5.550820380e-2f;
  p = p * r + 2.402223945e-1f;
  p = p * r + 6.931468844e-1f;
  p = p * r + 1.0f;
}

// Arguments at or above this have a normal 2^y (2^-125.5 > 2^-126, the smallest normal
// float, whatever the rounding of n = round(y)): the AVX-512 exp of the CPU kernels returns
// exactly 0 below it, where a subnormal result would cost a microcode assist per vector.
constexpr float kExp2MinNormalArg = -125.5f;

// 2^y in float without branches or library calls, so that a loop of it vectorises, for
// the arguments this op has: y <= 0 (a scaled logit minus its row's max, a log-probability),
// -inf, or NaN; valid up to y = 127. y = n + r with n = round(y), |r| <= 1/2; 2^r by a
// degree-5 minimax polynomial (relative error 1.8e-7 evaluated in float, checked on 2M
// points: the row's sum of them is carried in double, so one term less than Cephes' exp2f
// costs nothing the f32 results can show), n into the exponent bits. Down to results of
// 1.2e-38, the smallest normal float; below, results are subnormal or flushed to 0
// (absolute error < 1e-38); 2^-inf = 0 exactly; NaN stays NaN.
//
// Written once for a float and for a vector of floats (the CPU kernels' GCC vector types):
// F is the float type and U the unsigned 32-bit integer type of the same shape. The result
// goes to an out-parameter: a vector passed or returned by value draws GCC's ABI warning
// outside the AVX copies. (Everything it calls is inlined into those copies, so it calls
// nothing but builtins.) Clamped = true: the caller has already made the argument
// lowest > y ? lowest : y with lowest = kExp2MinArg (GCC compiles this select on vectors
// to a compare and a blend, where x86's maxps is the same thing in one instruction).
template <class F, class U, bool Clamped = false>
TIRL_HD inline void exp2_of_nonpositive_as(const F& argument, F& out) {
  static_assert(sizeof(F) == sizeof(U), "F and U must have the same shape");
  // One clamp (false for NaN, which passes through to the polynomial).
  const F lowest = F{} + kExp2MinArg;
  const F y = Clamped ? argument : lowest > argument ? lowest : argument;
  // n = round(y) by the 1.5 * 2^23 trick, with 127 added to the magic number: the low
  // mantissa bits of `shifted` hold n + 127 (in [0, 254] after the clamp), so shifting
  // them up by 23 makes the bits of 2^n (the magic's own bits shift out of the word).
  constexpr float kRoundMagic = 12582912.0f + 127.0f;
  const F shifted = y + kRoundMagic;
  const F n = shifted - kRoundMagic;
  const F r = y - n;  // exact
  F p;
  exp2_fraction_as(r, p);
  U bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = bits << 23;
  F two_to_n;
  std::memcpy(&two_to_n, &bits, sizeof two_to_n);
  out = p * two_to_n;
}

TIRL_HD inline float exp2_of_nonpositive(float y) {
  float out;
  exp2_of_nonpositive_as<float, uint32_t>(y, out);
  return out;
}

// Summary of a row, or of a block of it, for the online softmax (see the top of the file).
// An empty summary has max = -inf and sum = weighted = 0.
struct SoftmaxStats {
  float max;
  double sum;
  double weighted;
};

TIRL_HD inline SoftmaxStats empty_softmax_stats() { return {-INFINITY, 0.0, 0.0}; }

// The value a block subtracts from its logits before exp(): its max, except when the max
// is -inf (all entries -inf: then exp(x - 0) = 0 gives the empty summary, where x - max
// would be NaN).
TIRL_HD inline float softmax_shift(float max) { return max == -INFINITY ? 0.0f : max; }

// One entry's share of `weighted`, in base 2: e * y with y = d log2 e and e = 2^y (the
// caller multiplies the block's total by ln 2). A -inf logit has e = 0 and must add 0 (the
// limit of p log p), not 0 * -inf = NaN; below kExp2MinArg e is 0 anyway.
TIRL_HD inline float entropy_term(float e, float y) {
  return e * (y < kExp2MinArg ? 0.0f : y);
}

// Merges two summaries (associative and commutative up to rounding); the result is
// relative to the larger max. With a' = (m_small - m_large) / T <= 0 and f = exp(a'):
// sum += f * sum', weighted += f * (weighted' + a' * sum') since d shifts by a'.
TIRL_HD inline SoftmaxStats merge_softmax_stats(SoftmaxStats a, SoftmaxStats b,
                                                double inv_temperature) {
  if (b.max > a.max) {
    const SoftmaxStats t = a;
    a = b;
    b = t;
  }
  if (b.sum == 0.0) return a;  // b holds only -inf logits (or nothing)
  const double shift =
      (static_cast<double>(b.max) - static_cast<double>(a.max)) * inv_temperature;
  const double factor = ::exp(shift);
  a.sum += factor * b.sum;
  a.weighted += factor * (b.weighted + shift * b.sum);
  return a;
}

// log p(label) = (x_label - max) / T - log(sum), in double from the summary.
TIRL_HD inline double token_logprob(float label_logit, const SoftmaxStats& s,
                                    double inv_temperature) {
  return (static_cast<double>(label_logit) - static_cast<double>(s.max)) * inv_temperature -
         ::log(s.sum);
}

// H = -sum_v p_v log p_v = log(sum) - weighted / sum.
TIRL_HD inline double token_entropy(const SoftmaxStats& s) {
  return ::log(s.sum) - s.weighted / s.sum;
}

// dLoss/dlogit_v for v != label (MATH.md): dz_v = -p_v * (g_lp + g_H * (log p_v + H)) and
// dlogit_v = dz_v / T, written per row as -p_v * (a + b * log2 p_v) with the constants
// a = (g_lp + g_H * H) / T and b = g_H ln 2 / T.
struct LogitGradCoefficients {
  float a;
  float b;
};

TIRL_HD inline LogitGradCoefficients logit_grad_coefficients(double grad_logp, double grad_entropy,
                                                             double entropy,
                                                             double inv_temperature) {
  return {static_cast<float>((grad_logp + grad_entropy * entropy) * inv_temperature),
          static_cast<float>(grad_entropy * kLn2 * inv_temperature)};
}

// From p_v and log2 p_v; where p_v is 0 (a -inf logit, or one far below the row's max) the
// result is 0, not 0 * inf; but NaN when a gradient coefficient is NaN or Inf, as for the
// rest of the row (a NaN gradient poisons its whole row, as in PyTorch).
TIRL_HD inline float logit_grad_from_probability(float p, float log2_p, LogitGradCoefficients c) {
  const float dz = -p * (c.a + c.b * log2_p);
  const float zero_or_nan = (c.a - c.a) + (c.b - c.b);
  return log2_p < kExp2MinArg ? zero_or_nan : dz;
}

// From log2 p_v alone.
TIRL_HD inline float logit_grad(float log2_p, LogitGradCoefficients c) {
  return logit_grad_from_probability(exp2_of_nonpositive(log2_p), log2_p, c);
}

// dLoss/dlogit at the label, in double: g_lp * (1 - p) - g_H * p * (log p + H), with
// 1 - p = -expm1(log p) so that a near-certain label keeps its small gradient.
TIRL_HD inline double label_logit_grad(double log_p, double grad_logp, double grad_entropy,
                                       double entropy, double inv_temperature) {
  // p = 0 adds 0 (times grad_entropy, so that a NaN gradient still poisons the row).
  const double entropy_part =
      log_p == -INFINITY ? 0.0 * grad_entropy : grad_entropy * ::exp(log_p) * (log_p + entropy);
  return (grad_logp * -::expm1(log_p) - entropy_part) * inv_temperature;
}

}  // namespace tirl
