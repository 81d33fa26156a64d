// DPO and its variants (MATH.md, as TRL computes them), per preference pair.
#pragma once

#include <cmath>

#include "math/common.h"
#include "tirl/tirl.h"

namespace tirl {

// One pair's loss and its derivative with respect to the margin
// delta = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected).
struct DpoPairTerm {
  double loss;
  double dloss_ddelta;
};

// log(sigmoid(x)) and sigmoid(x), sigmoid(-x), from one exp(-|x|): stable for any x.
struct LogSigmoid {
  double log_sigmoid_pos;  // log sigmoid(x)  = min(x, 0) - log1p(exp(-|x|))
  double log_sigmoid_neg;  // log sigmoid(-x) = min(-x, 0) - log1p(exp(-|x|))
  double sigmoid_pos;      // sigmoid(x)
  double sigmoid_neg;      // sigmoid(-x) = 1 - sigmoid(x), without cancellation
};

TIRL_HD inline LogSigmoid log_sigmoid(double x) {
  const float e = expf(-fabsf(static_cast<float>(x)));
  const double softplus_tail = log1pf(e);
  const double small = e / (1.0 + e);  // sigmoid(-|x|)
  const double large = 1.0 / (1.0 + e);  // sigmoid(|x|)
  const bool positive = x >= 0;
  return {fmin(x, 0.0) - softplus_tail, fmin(-x, 0.0) - softplus_tail,
          positive ? large : small, positive ? small : large};
}

TIRL_HD inline DpoPairTerm dpo_pair_term(double delta, double beta, double label_smoothing,
                                         tirl_dpo_variant variant) {
  const double z = beta * delta;
  switch (variant) {
    case TIRL_DPO_HINGE: {
      const double margin = 1.0 - z;
      // relu as PyTorch computes it: NaN passes through, the gradient is 0 unless margin > 0.
      return {margin < 0.0 ? 0.0 : margin, margin <= 0.0 ? 0.0 : -beta};
    }
    case TIRL_DPO_IPO: {
      const double gap = delta - 1.0 / (2.0 * beta);
      return {gap * gap, 2.0 * gap};
    }
    case TIRL_DPO_ROBUST: {
      const LogSigmoid s = log_sigmoid(z);
      const double scale = 1.0 / (1.0 - 2.0 * label_smoothing);
      return {(-(1.0 - label_smoothing) * s.log_sigmoid_pos + label_smoothing * s.log_sigmoid_neg) * scale,
              -beta * ((1.0 - label_smoothing) * s.sigmoid_neg + label_smoothing * s.sigmoid_pos) * scale};
    }
    case TIRL_DPO_SIGMOID:
    default: {
      const LogSigmoid s = log_sigmoid(z);
      return {-(1.0 - label_smoothing) * s.log_sigmoid_pos - label_smoothing * s.log_sigmoid_neg,
              beta * (-(1.0 - label_smoothing) * s.sigmoid_neg + label_smoothing * s.sigmoid_pos)};
    }
  }
}

}  // namespace tirl
