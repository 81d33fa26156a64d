// DPO and its variants (MATH.md, as TRL computes them), per preference pair.
//
// Everything here is branch-free f32 arithmetic (exp and log1p as polynomials) so that a
// CPU loop over pairs vectorizes; TRL computes these in f32 too.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/common.h"
#include "math/exp.h"
#include "math/float_bits.h"
#include "tirl/tirl.h"

namespace tirl {

// log(1 + e) for e in [0, 1] as e q(e), q a polynomial of degree 8 (a least-squares fit
// of log1p(e) / e at 4,000 Chebyshev nodes of [0, 1], the coefficients rounded to f32):
// within 2e-7 relative over [0, 1] with or without fused multiply-adds (checked in f32
// against log1p in double at 2M points and at tiny e), as the series it replaced was.
// Exact for tiny e (q(0) = 1, no 1 + e rounding), no range reduction and no division (the
// series 2 atanh(e / (2 + e)) took one: the divider was dpoLoss's costliest unit on the
// CPU), so it is short and branch-free.
TIRL_HD inline float log1p_unit(float e) {
  float q = 0.005253457929939032f;
  q = q * e - 0.02958850748836994f;
  q = q * e + 0.07836166769266129f;
  q = q * e - 0.13674770295619965f;
  q = q * e + 0.19111430644989014f;
  q = q * e - 0.24844369292259216f;
  q = q * e + 0.33319270610809326f;
  q = q * e - 0.49999502301216125f;
  q = q * e + 1.0f;
  return e * q;
}

// Per-call constants of the loss. The sigmoid and robust variants share one form: with
// z = beta delta and the stable log-sigmoid log sigmoid(+-z) = min(+-z, 0) - t,
// t = log1p(exp(-|z|)), and ls = label_smoothing,
//   sigmoid  -(1-ls) log sigmoid(z) - ls log sigmoid(-z)
//              = t - (1-ls) min(z, 0) + ls max(z, 0),         d/dz = ls - sigmoid(-z)
//   robust   (-(1-ls) log sigmoid(z) + ls log sigmoid(-z)) / (1-2ls)
//              = t - ((1-ls) min(z, 0) + ls max(z, 0)) / (1-2ls), d/dz = -ls/(1-2ls) - sigmoid(-z)
// (using min(-z, 0) = -max(z, 0) and sigmoid(z) = 1 - sigmoid(-z)), so each pair needs one
// exp, one log1p and one division (the sigmoid's).
struct DpoParams {
  float beta;
  float ipo_target;       // 1 / (2 beta)
  float min_coefficient;  // of min(z, 0), subtracted
  float max_coefficient;  // of max(z, 0), added
  float dz_offset;        // d loss / dz = dz_offset - sigmoid(-z)
};

TIRL_HD inline DpoParams dpo_params(double beta, double label_smoothing, tirl_dpo_variant variant) {
  const double ls = label_smoothing;
  const double robust_scale = 1.0 / (1.0 - 2.0 * ls);
  const bool robust = variant == TIRL_DPO_ROBUST;
  return {static_cast<float>(beta), static_cast<float>(0.5 / beta),
          static_cast<float>(robust ? (1.0 - ls) * robust_scale : 1.0 - ls),
          static_cast<float>(robust ? -ls * robust_scale : ls),
          static_cast<float>(robust ? -ls * robust_scale : ls)};
}

// One pair's loss and its derivative with respect to the margin
// delta = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected).
struct DpoPairTerm {
  float loss;
  float dloss_ddelta;
};

template <tirl_dpo_variant kVariant>
TIRL_HD inline DpoPairTerm dpo_pair_term(float delta, const DpoParams& p) {
  if (kVariant == TIRL_DPO_HINGE) {
    const float margin = 1.0f - p.beta * delta;
    // relu as PyTorch computes it: NaN passes through; the gradient is 0 unless margin > 0
    // (so 0 at the kink, and -beta for a NaN margin, as PyTorch's threshold backward).
    return {margin < 0.0f ? 0.0f : margin, margin <= 0.0f ? 0.0f : -p.beta};
  }
  if (kVariant == TIRL_DPO_IPO) {
    const float gap = delta - p.ipo_target;
    return {gap * gap, 2.0f * gap};
  }
  // sigmoid (cDPO when label_smoothing > 0) and robust; see DpoParams.
  const float z = p.beta * delta;
  const float e = exp_nonpositive(-fabsf(z));
  const float inverse = 1.0f / (1.0f + e);  // sigmoid(|z|)
  // sigmoid(-z): e / (1 + e) when z >= 0, without the cancellation of 1 - sigmoid(z).
  const float sigmoid_neg = z >= 0.0f ? e * inverse : inverse;
  const float min_z = z < 0.0f ? z : 0.0f;
  const float max_z = z > 0.0f ? z : 0.0f;  // not z - min_z: -Inf - -Inf would be NaN
  return {log1p_unit(e) - p.min_coefficient * min_z + p.max_coefficient * max_z,
          p.beta * (p.dz_offset - sigmoid_neg)};
}

}  // namespace tirl
