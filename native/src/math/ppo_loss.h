// PPO clipped surrogate and KL-to-reference terms (MATH.md, ppoLoss), one token at a time,
// each with its derivative with respect to the current log-prob. Semantics are verl's
// core_algos.py in PyTorch: clamps let NaN through (torch.clamp) and pass the gradient only
// inside their bounds, bounds included; where a clamp is active the gradient is 0.
//
// Everything here is branch-free float arithmetic and selects, so that a loop over tokens
// vectorises; exp is a polynomial for the same reason (libm's expf does not vectorise
// without -ffast-math, which would break NaN propagation).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "math/common.h"
#include "math/exp.h"
#include "math/float_bits.h"
#include "tirl/tirl.h"

namespace tirl {

// verl's bounds: the token log-ratio is clamped to [-20, 20], GSPO's sequence log-ratio at
// 10 from above, the k3 estimate to [-10, 10] (its log-ratio to [-20, 20] too).
constexpr float kLogRatioBound = 20.0f;
constexpr float kSequenceLogRatioMax = 10.0f;
constexpr float kK3Bound = 10.0f;

// Where torch.clamp passes the gradient: inside [lo, hi], bounds included; not for NaN.
TIRL_HD inline bool inside(float x, float lo, float hi) { return (x >= lo) & (x <= hi); }

// torch.clamp: NaN passes through (both comparisons are false).
TIRL_HD inline float clamp_keep_nan(float x, float lo, float hi) {
  return select(x < lo, lo, select(x > hi, hi, x));
}

// inside(x, lo, hi) given clamp_keep_nan(x, lo, hi): the clamp leaves x as it is exactly
// when x is inside (NaN is not: NaN != NaN); one compare where inside() takes two.
TIRL_HD inline bool clamp_passes(float clamped, float x) { return clamped == x; }

// ---------------------------------------------------------------- importance ratio

// A token's importance ratio r and dr/dlogp.
struct Ratio {
  float ratio;
  float dratio_dlogp;
};

// The clamped token log-ratio d = clamp(logp - old_logp, -20, 20) (approxKl is its
// masked mean, negated).
TIRL_HD inline float clamped_log_ratio(float logp, float old_logp) {
  return clamp_keep_nan(logp - old_logp, -kLogRatioBound, kLogRatioBound);
}

// r = exp(d); dr/dlogp = r inside the clamp, 0 where it is active.
TIRL_HD inline Ratio token_ratio(float logp, float old_logp) {
  const float log_ratio = logp - old_logp;
  const float clamped = clamp_keep_nan(log_ratio, -kLogRatioBound, kLogRatioBound);
  const float ratio = exp_bounded(clamped);
  return {ratio, select(clamp_passes(clamped, log_ratio), ratio, 0.0f)};
}

// GSPO: every token of sequence i has the value s_i = exp(min(log s_i, 10)), with
// log s_i = the masked mean of (logp - old_logp) over the sequence, held constant
// (stop-gradient) except for the token's own logp, so dr_t/dlogp_t = s_i (0 where the
// clamp is active). Computed once per sequence.
TIRL_HD inline Ratio sequence_level_ratio(double masked_log_ratio_sum, int64_t masked_tokens) {
  const float log_ratio = static_cast<float>(
      masked_log_ratio_sum / static_cast<double>(masked_tokens > 1 ? masked_tokens : 1));
  const float ratio = ::expf(log_ratio > kSequenceLogRatioMax ? kSequenceLogRatioMax : log_ratio);
  return {ratio, log_ratio <= kSequenceLogRatioMax ? ratio : 0.0f};
}

// ---------------------------------------------------------------- clipped surrogate

struct PpoTerm {
  float loss;           // L
  float dloss_dratio;   // dL/dr
  // 0/1 flags as 32-bit integers: bool members would be bytes, and mixing lane widths
  // keeps the token loop from vectorising.
  int32_t clipped;       // L2 > L1
  int32_t dual_clipped;  // the dual clip is active: A < 0 and Lc > -A * dual_clip
};

// L1 = -A r, L2 = -A clamp(r, ratio_low, ratio_high), Lc = max(L1, L2), and with the dual
// clip (dual_clip > 0) L = min(Lc, -A dual_clip) for A < 0. Where L1 >= L2 the gradient is
// L1's (at a tie both are -A, as torch.maximum gives); at Lc == -A dual_clip it is Lc's.
TIRL_HD inline PpoTerm ppo_term(float advantage, float ratio, float ratio_low, float ratio_high,
                                float dual_clip) {
  const float loss_unclipped = -advantage * ratio;
  const float clamped = clamp_keep_nan(ratio, ratio_low, ratio_high);
  const float loss_clipped = -advantage * clamped;
  // max(L1, L2) as torch.maximum: NaN wins. L2 is NaN only when L1 is, and "not less"
  // picks L1 then (GSPO's ratio 0 times an infinite advantage is such a NaN).
  const bool take_unclipped = !(loss_unclipped < loss_clipped);
  const float loss_max = select(take_unclipped, loss_unclipped, loss_clipped);
  const bool ratio_passes = take_unclipped | clamp_passes(clamped, ratio);
  const float dual_bound = -advantage * dual_clip;
  const bool dual_clipped = (dual_clip > 0.0f) & (advantage < 0.0f) & (loss_max > dual_bound);
  return {select(dual_clipped, dual_bound, loss_max),
          select(ratio_passes & !dual_clipped, -advantage, 0.0f),
          static_cast<int32_t>(loss_clipped > loss_unclipped),
          static_cast<int32_t>(dual_clipped)};
}

// ---------------------------------------------------------------- KL to the reference

struct KlTerm {
  float value;
  float dvalue_dlogp;
};

// The estimators of KL(policy || reference) at one token, x = logp - ref_logp:
// k1 = x; k2 = x^2 / 2; abs = |x|; k3 = e^(-x') + x' - 1 with x' = clamp(x, -20, 20),
// clamped to [-10, 10] (verl's low_var_kl).
// The '+' forms (verl's kl_penalty with a '+' suffix) are straight-through: the value of
// k1, k3 or abs, the gradient of k2 (x, unclamped).
template <tirl_kl_estimator Estimator>
TIRL_HD inline KlTerm kl_term(float logp, float ref_logp) {
  const float x = logp - ref_logp;
  if constexpr (Estimator == TIRL_KL_K1_PLUS || Estimator == TIRL_KL_K3_PLUS ||
                Estimator == TIRL_KL_ABS_PLUS) {
    constexpr tirl_kl_estimator kBase = Estimator == TIRL_KL_K1_PLUS   ? TIRL_KL_K1
                                        : Estimator == TIRL_KL_K3_PLUS ? TIRL_KL_K3
                                                                       : TIRL_KL_ABS;
    // verl's k2 - sg(k2) + sg(base): the k2 - k2 is 0, but NaN where k2 overflows (as in
    // PyTorch).
    const float k2 = 0.5f * x * x;
    return {kl_term<kBase>(logp, ref_logp).value + (k2 - k2), x};
  } else if constexpr (Estimator == TIRL_KL_K1) {
    return {x, 1.0f};
  } else if constexpr (Estimator == TIRL_KL_K2) {
    return {0.5f * x * x, x};
  } else if constexpr (Estimator == TIRL_KL_ABS) {
    return {select(x < 0.0f, -x, x), select(x > 0.0f, 1.0f, select(x < 0.0f, -1.0f, 0.0f))};
  } else {
    static_assert(Estimator == TIRL_KL_K3, "unknown KL estimator");
    // With y = -x': k3 = e^y - 1 - y, dk3/dlogp = -(e^y - 1).
    const float clamped = clamp_keep_nan(x, -kLogRatioBound, kLogRatioBound);
    const ExpMinusOne e = exp_minus_one(-clamped);
    const float k3 = clamp_keep_nan(e.em1_minus_y, -kK3Bound, kK3Bound);
    const bool passes = clamp_passes(clamped, x) & clamp_passes(k3, e.em1_minus_y);
    return {k3, select(passes, -e.em1, 0.0f)};
  }
}

// ---------------------------------------------------------------- one token, all terms

// What one token adds to the loss, its gradient, and the statistics. Masked-out tokens
// give all zeros whatever their inputs (NaN included): a select, not a product.
struct PpoToken {
  float grad;           // dLoss/dlogp = scale (w dL/dlogp + kl_coef dK/dlogp)
  float pg_loss;        // scale w L
  float kl_loss;        // scale K
  float neg_log_ratio;  // -d, for approxKl
  int32_t clipped;       // 1 where L2 > L1
  int32_t dual_clipped;  // 1 where the dual clip is active
  int32_t non_finite;    // 1 where an input is Inf or NaN
  int32_t masked;        // 1 where the token is masked in
};

struct PpoConstants {
  float ratio_low;   // 1 - clip_low
  float ratio_high;  // 1 + clip_high
  float dual_clip;   // 0 = off
  float kl_coef;
};

TIRL_HD inline PpoConstants ppo_constants(const tirl_ppo_options& o) {
  return {static_cast<float>(1.0 - o.clip_low), static_cast<float>(1.0 + o.clip_high),
          static_cast<float>(o.dual_clip), static_cast<float>(o.kl_coef)};
}

// ---------------------------------------------------------------- aggregation (per call)

// The seq-mean-* aggregations: a factor per sequence (else one factor for every token).
TIRL_HD inline bool per_sequence_aggregation(tirl_aggregation a) {
  return a == TIRL_AGG_SEQ_MEAN_TOKEN_SUM || a == TIRL_AGG_SEQ_MEAN_TOKEN_MEAN ||
         a == TIRL_AGG_SEQ_MEAN_TOKEN_SUM_NORM;
}

// What the aggregations divide by (MATH.md's table): the options' normalisers or, where
// one is 0, its default from the batch: the masked tokens, the sequences with a masked
// token, the longest sequence in tokens.
struct PpoNormalizers {
  double tokens;
  double seqs;
  double horizon;
};

TIRL_HD inline PpoNormalizers ppo_normalizers(const tirl_ppo_options& o, double masked_tokens,
                                              double non_empty_seqs, double longest_seq) {
  return {o.token_normalizer > 0 ? o.token_normalizer : masked_tokens,
          o.seq_normalizer > 0 ? o.seq_normalizer : non_empty_seqs,
          o.horizon > 0 ? o.horizon : longest_seq};
}

// dp_size / normaliser; a zero normaliser (nothing to average over) gives factor 0, hence
// loss 0 and gradient 0.
TIRL_HD inline double aggregation_factor(double dp_size, double normaliser) {
  return normaliser > 0 ? dp_size / normaliser : 0.0;
}

// The aggregation's factor for the tokens of a sequence with `seq_masked` masked tokens
// (any value for the token-level aggregations, whose factor is the batch's).
TIRL_HD inline double aggregation_scale(const tirl_ppo_options& o, const PpoNormalizers& n,
                                        int64_t seq_masked) {
  switch (o.aggregation) {
    case TIRL_AGG_TOKEN_MEAN: return aggregation_factor(o.dp_size, n.tokens);
    case TIRL_AGG_TOKEN_SUM: return o.dp_size;
    case TIRL_AGG_SEQ_MEAN_TOKEN_SUM: return aggregation_factor(o.dp_size, n.seqs);
    case TIRL_AGG_SEQ_MEAN_TOKEN_MEAN:
      return aggregation_factor(o.dp_size, n.seqs * static_cast<double>(seq_masked));
    case TIRL_AGG_SEQ_MEAN_TOKEN_SUM_NORM: return aggregation_factor(o.dp_size, n.seqs * n.horizon);
  }
  return 0.0;
}

// x * 0 is +-0 for a finite x and NaN for Inf or NaN; one comparison tests a sum of them
// all. A product, not x - x: the sum of products contracts to fused multiply-adds (one
// instruction a term) on the FMA paths. Added to a value (GSPO's ratio) it changes no bit.
TIRL_HD inline float finite_probe(float x) { return x * 0.0f; }

// One token. `mask` is the loss mask widened to a float (nonzero = in), so that the
// token loop is all 32-bit lanes. `scale` is the aggregation's factor for this token's
// sequence; with
// kSequenceRatio the ratio comes from sequence_level_ratio() of its sequence, else from the
// token itself; the Kl and kWeights flags say whether ref_logp and weight are inputs;
// kDualClip whether c.dual_clip is on (a constant 0 otherwise, so its work folds away).
template <bool kKl, tirl_kl_estimator Estimator, bool kWeights, bool kSequenceRatio,
          bool kDualClip>
TIRL_HD inline PpoToken ppo_token(float logp, float old_logp, float advantage, float mask,
                                  float ref_logp, float weight, float scale,
                                  Ratio sequence_ratio_value, const PpoConstants& c) {
  // GSPO's token ratio is exp(log s_i + logp - stop_gradient(logp)) (verl): the added
  // logp - logp is 0, but NaN for an infinite logp, as in PyTorch.
  const Ratio ratio = kSequenceRatio ? Ratio{sequence_ratio_value.ratio + finite_probe(logp),
                                             sequence_ratio_value.dratio_dlogp + finite_probe(logp)}
                                     : token_ratio(logp, old_logp);
  const PpoTerm term = ppo_term(advantage, ratio.ratio, c.ratio_low, c.ratio_high,
                                kDualClip && !kSequenceRatio ? c.dual_clip : 0.0f);
  float pg = term.loss;
  float dpg = term.dloss_dratio * ratio.dratio_dlogp;
  float probe = finite_probe(logp) + finite_probe(old_logp) + finite_probe(advantage);
  if constexpr (kWeights) {
    pg *= weight;
    dpg *= weight;
    probe += finite_probe(weight);
  }
  float kl = 0.0f;
  float grad = dpg;
  if constexpr (kKl) {
    const KlTerm k = kl_term<Estimator>(logp, ref_logp);
    kl = k.value;
    grad += c.kl_coef * k.dvalue_dlogp;
    probe += finite_probe(ref_logp);
  }
  const bool in = mask != 0.0f;
  return {select(in, scale * grad, 0.0f),
          select(in, scale * pg, 0.0f),
          select(in, scale * kl, 0.0f),
          select(in, -clamped_log_ratio(logp, old_logp), 0.0f),
          term.clipped & static_cast<int32_t>(in),
          term.dual_clipped & static_cast<int32_t>(in),
          static_cast<int32_t>(in & !(probe == 0.0f)),
          static_cast<int32_t>(in)};
}

// The op's result from the sums of a pass over the tokens, whichever device made them:
// the statistics are masked means over the masked-in tokens (0 when there are none).
inline void fill_ppo_result(double pg_loss, double kl_loss, bool kl, double kl_coef,
                            double clipped, double dual_clipped, double neg_log_ratio,
                            int64_t non_finite, int64_t masked, tirl_ppo_result* result) {
  auto masked_mean = [&](double sum) { return masked > 0 ? sum / static_cast<double>(masked) : 0.0; };
  result->pg_loss = pg_loss;
  result->kl_loss = kl ? kl_loss : 0.0;
  result->loss = result->pg_loss + kl_coef * result->kl_loss;
  result->clip_fraction = masked_mean(clipped);
  result->clip_fraction_lower = masked_mean(dual_clipped);
  result->approx_kl = masked_mean(neg_log_ratio);
  result->non_finite = non_finite;
  result->masked_tokens = masked;
}

}  // namespace tirl
