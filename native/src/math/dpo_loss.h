// DPO and its variants (MATH.md, as TRL computes them), per preference pair.
//
// Everything here is branch-free f32 arithmetic (exp and log1p as polynomials) so that a
// CPU loop over pairs vectorizes; TRL computes these in f32 too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "math/common.h"
#include "tirl/tirl.h"

namespace tirl {

// exp(x) for x <= 0 (Cody-Waite reduction, Cephes polynomial; about 1 ulp). Below -87
// the result is about 1.6e-38 instead of a subnormal: it only ever meets 1 + e. NaN
// propagates.
TIRL_HD inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float rounding = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = (x * 1.44269504f + rounding) - rounding;
  n = n == n ? n : 0.0f;  // NaN: keep the integer conversion defined; the polynomial carries it
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t scale_bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

// log(1 + e) for e in [0, 1] as 2 atanh(s), s = e / (2 + e) in [0, 1/3]: the odd series
// 2 s (1 + s^2/3 + s^4/5 + ...) to s^12/13 (truncation below 2e-8, relative). Exact for
// tiny e (no 1 + e rounding) and no range reduction, so it is short and branch-free.
TIRL_HD inline float log1p_unit(float e) {
  const float s = e / (2.0f + e);
  const float w = s * s;
  float p = 1.0f / 13.0f;
  p = p * w + 1.0f / 11.0f;
  p = p * w + 1.0f / 9.0f;
  p = p * w + 1.0f / 7.0f;
  p = p * w + 1.0f / 5.0f;
  p = p * w + 1.0f / 3.0f;
  p = p * w + 1.0f;
  return 2.0f * s * p;
}

// log sigmoid(+-x) = min(+-x, 0) - log1p(exp(-|x|)) and sigmoid(+-x), from one exp.
struct LogSigmoid {
  float log_sigmoid_pos;
  float log_sigmoid_neg;
  float sigmoid_pos;
  float sigmoid_neg;
};

TIRL_HD inline LogSigmoid log_sigmoid(float x) {
  const float e = exp_nonpositive(-fabsf(x));
  const float u = 1.0f + e;
  const float inverse_u = 1.0f / u;  // sigmoid(|x|)
  const float tail = log1p_unit(e);
  const bool positive = x >= 0.0f;
  const float small = e * inverse_u;  // sigmoid(-|x|), without the cancellation of 1 - sigmoid
  return {(x < 0.0f ? x : 0.0f) - tail, (-x < 0.0f ? -x : 0.0f) - tail,
          positive ? inverse_u : small, positive ? small : inverse_u};
}

// Per-call constants of the loss.
struct DpoParams {
  float beta;
  float label_smoothing;
  float robust_scale;  // 1 / (1 - 2 label_smoothing)
  float ipo_target;    // 1 / (2 beta)
};

TIRL_HD inline DpoParams dpo_params(double beta, double label_smoothing) {
  return {static_cast<float>(beta), static_cast<float>(label_smoothing),
          static_cast<float>(1.0 / (1.0 - 2.0 * label_smoothing)), static_cast<float>(0.5 / beta)};
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
  const LogSigmoid s = log_sigmoid(p.beta * delta);
  const float ls = p.label_smoothing;
  if (kVariant == TIRL_DPO_ROBUST) {
    return {(-(1.0f - ls) * s.log_sigmoid_pos + ls * s.log_sigmoid_neg) * p.robust_scale,
            -p.beta * ((1.0f - ls) * s.sigmoid_neg + ls * s.sigmoid_pos) * p.robust_scale};
  }
  // sigmoid (cDPO when label_smoothing > 0)
  return {-(1.0f - ls) * s.log_sigmoid_pos - ls * s.log_sigmoid_neg,
          p.beta * (ls * s.sigmoid_pos - (1.0f - ls) * s.sigmoid_neg)};
}

}  // namespace tirl
