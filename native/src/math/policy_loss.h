// The policy losses of ppoLoss beyond the clipped surrogate (docs/math.md, "Policy losses"),
// one token at a time, each with its derivative with respect to the current log-prob.
// Semantics are verl's verl/trainer/ppo/core_algos.py (commit 1dda039b): which quantities
// are detached, which log-ratios are clamped, the order of the products (so that NaN and
// Inf propagate as in PyTorch: a 0/1 mask that verl multiplies by is multiplied here too).
//
// 'vanilla' and 'gspo' are math/ppo_loss.h. 'geo_mean' is per sequence: the token part is
// here (geo_mean_token), the sequence part in the kernels.
#pragma once

#include <math.h>

#include <cstdint>

#include "math/common.h"
#include "math/exp.h"
#include "math/float_bits.h"
#include "math/log.h"
#include "math/ppo_loss.h"

namespace tirl {

// What one token contributes before the weight and the aggregation's scale.
struct PolicyTerm {
  float loss;
  float dloss_dlogp;
  int32_t clipped;        // counted in clipFraction (verl's pg_clipfrac)
  int32_t clipped_lower;  // counted in clipFractionLower (verl's pg_clipfrac_lower)
  float kl_stat;          // averaged into approxKl (verl's ppo_kl)
  // Set by the kBounded terms where an exponent left [-80, 80] (or is NaN): the value is
  // then not exp_any's, and the caller computes the token again with kBounded false.
  int32_t out_of_range = 0;
};

// exp_any(x), or with kBounded exp_bounded(x), which has exp_any's bits for |x| <= 80
// (math/exp.h) at about half the work, noting in `far` an x outside that range. The CPU
// kernels run a block of tokens bounded first, and again unbounded if any was far.
template <bool kBounded>
TIRL_HD inline float policy_exp(float x, int32_t& far) {
  if constexpr (kBounded) {
    far |= static_cast<int32_t>(!(fabsf(x) <= 80.0f));  // one compare; NaN is far
    return exp_bounded(x);
  } else {
    return exp_any(x);
  }
}

// The per-loss constants, as floats (the kernels run in f32 as verl's do).
struct PolicyConstants {
  float clip_low;      // 1 - ratio_low for the ratio losses; the lower divergence bound for DPPO
  float clip_high;
  float ratio_low;     // 1 - clip_low
  float ratio_high;    // 1 + clip_high
  float clip_ratio_c;  // DPPO's truncation of the (detached) ratio
  float tau_pos;       // SAPO
  float tau_neg;
  float ppo_kl_coef;   // kl_cov
  float dro_beta;      // DRO
};

// The constants from the options (shared by the CPU and CUDA kernels).
inline PolicyConstants policy_constants(const tirl_policy_loss_options& o) {
  return {static_cast<float>(o.ppo.clip_low),     static_cast<float>(o.ppo.clip_high),
          static_cast<float>(1.0 - o.ppo.clip_low), static_cast<float>(1.0 + o.ppo.clip_high),
          static_cast<float>(o.clip_ratio_c),     static_cast<float>(o.tau_pos),
          static_cast<float>(o.tau_neg),          static_cast<float>(o.ppo_kl_coef),
          static_cast<float>(o.dro_beta)};
}

// torch.minimum / torch.maximum: NaN wins.
TIRL_HD inline float nan_min(float a, float b) { return select((a < b) | (a != a), a, b); }

// A float 0/1 from a flag, to multiply by (0 * NaN stays NaN, as in verl's `* valid_mask`).
TIRL_HD inline float as_float(bool flag) { return select(flag, 1.0f, 0.0f); }

// The token ratio of vanilla, DPPO, SAPO and CISPO: exp(clamp(logp - old_logp, -20, 20)).
// token_ratio() (math/ppo_loss.h) gives it with its derivative.

// ---------------------------------------------------------------- DPPO (binary TV / KL)

// pg = -A * sg(min(r, c)) * logp * valid: only logp carries the gradient. `valid` keeps a
// token unless its probability moved past the divergence bound in the advantage's direction.
// The probabilities enter only the trust region's tests: e^logp is e^old_logp times the
// ratio where the ratio's clamp is inactive (an exp fewer; within 5 ulp), e^logp itself
// elsewhere. With kBounded that elsewhere is a far token: the block is computed again
// unbounded, which takes the same product for every other token.
template <bool kBinaryKl, bool kBounded = false>
TIRL_HD inline PolicyTerm dppo_term(float logp, float old_logp, float advantage,
                                    const PolicyConstants& c) {
  const Ratio r = token_ratio(logp, old_logp);
  // torch.clamp(ratio, max=c): NaN passes.
  const float truncated = select(r.ratio > c.clip_ratio_c, c.clip_ratio_c, r.ratio);
  int32_t far = 0;
  const float old_prob = policy_exp<kBounded>(old_logp, far);
  const bool ratio_unclamped = inside(logp - old_logp, -kLogRatioBound, kLogRatioBound);  // not NaN
  float prob;
  if constexpr (kBounded) {
    far |= static_cast<int32_t>(!(fabsf(logp - old_logp) <= kLogRatioBound));  // !ratio_unclamped
    prob = old_prob * r.ratio;
  } else {
    prob = select(ratio_unclamped, old_prob * r.ratio, exp_any(logp));
  }
  bool valid_positive, valid_negative;
  if constexpr (kBinaryKl) {
    // With kBounded the quotient's log is log_normal, log_any's bits without its subnormal
    // and Inf / NaN cases, which a bounded token's quotient a / b never is: q = e^old_logp
    // in [e^-80, e^80] and r in [e^-20, e^20], finite and positive, so a = 1 - q + 1e-8 is
    // finite, and |a| >= 1e-8 (1 - q is 0 or at least 2^-24 where q is near 1); b likewise
    // with p = q r, but -Inf where p overflows (then a / b is +-0: log -Inf either way).
    // Where |b| < 1, p < 2 and so q < 2 e^20: |a / b| < 1e17; where p >= 2, |b| >= p / 2
    // and |a / b| <= 2 (q + 1) / (q r) <= 4 e^20. And |a / b| >= 1e-8 / max(1, e^20) where
    // q <= 1, >= (q - 1) / (4 q e^20) > 6e-17 where q > 1: never subnormal.
    const float quotient = (1.0f - old_prob + 1e-8f) / (1.0f - prob + 1e-8f);
    const float binary_kl = old_prob * (old_logp - logp) +
                            (1.0f - old_prob) * (kBounded ? log_normal(quotient) : log_any(quotient));
    valid_positive = (binary_kl <= c.clip_high) | (prob <= old_prob);
    valid_negative = (binary_kl <= c.clip_low) | (prob >= old_prob);
  } else {
    valid_positive = (prob - old_prob) <= c.clip_high;
    valid_negative = (prob - old_prob) >= -c.clip_low;
  }
  // Bitwise, not ?: (a branch there keeps the CPU loop from vectorising).
  const bool positive = advantage > 0.0f;
  const bool valid = (positive & valid_positive) | (!positive & valid_negative);
  const float v = as_float(valid);
  const float coefficient = -advantage * truncated;
  return {coefficient * logp * v, v * coefficient, static_cast<int32_t>(!valid),
          static_cast<int32_t>((r.ratio > c.clip_ratio_c) & valid),
          -clamped_log_ratio(logp, old_logp), far};
}

// ---------------------------------------------------------------- SAPO

// pg = -A * sigmoid(tau (r - 1)) * 4 / tau, tau = tau_pos for A > 0 else tau_neg; the gate's
// derivative is 4 s (1 - s) dr/dlogp.
template <bool kBounded = false>
TIRL_HD inline PolicyTerm sapo_term(float logp, float old_logp, float advantage,
                                    const PolicyConstants& c) {
  const Ratio r = token_ratio(logp, old_logp);
  const bool positive = advantage > 0.0f;
  const float tau = select(positive, c.tau_pos, c.tau_neg);
  // 4 / tau from the two constants (loop invariants: no division a token).
  const float four_over_tau = select(positive, 4.0f / c.tau_pos, 4.0f / c.tau_neg);
  int32_t far = 0;
  const float e = policy_exp<kBounded>(-(tau * (r.ratio - 1.0f)), far);
  const float s = 1.0f / (1.0f + e);
  // 1 - s without cancellation where s is near 1 (e small): e / (1 + e) = e s, the one
  // division shared.
  const float one_minus_s = select(s < 0.5f, 1.0f - s, e * s);
  const float gate = s * four_over_tau;
  const float dgate_dratio = 4.0f * (s * one_minus_s);  // (4 / tau) s (1 - s) tau
  return {-gate * advantage, -advantage * dgate_dratio * r.dratio_dlogp, 0, 0,
          -clamped_log_ratio(logp, old_logp), far};
}

// ---------------------------------------------------------------- GPG, REINFORCE

// pg = -logp * A (GPG) or -A * logp (REINFORCE; the rollout weights, detached, are the
// op's weights). approxKl is the unclamped -(logp - old_logp) (REINFORCE's; verl's GPG
// reports none).
TIRL_HD inline PolicyTerm log_prob_term(float logp, float old_logp, float advantage) {
  return {-logp * advantage, -advantage, 0, 0, -(logp - old_logp)};
}

// ---------------------------------------------------------------- CISPO

// pg = -sg(clamp(r, 1 - clip_low, 1 + clip_high)) * A * logp.
TIRL_HD inline PolicyTerm cispo_term(float logp, float old_logp, float advantage,
                                     const PolicyConstants& c) {
  const Ratio r = token_ratio(logp, old_logp);
  const float clipped = clamp_keep_nan(r.ratio, c.ratio_low, c.ratio_high);
  const float coefficient = -clipped * advantage;
  // verl's `ratio != clipped_ratio`: true for NaN.
  return {coefficient * logp, coefficient, static_cast<int32_t>(!(r.ratio == clipped)), 0,
          -clamped_log_ratio(logp, old_logp)};
}

// ---------------------------------------------------------------- DRO

// pg = -(logp A - beta/2 (logp - old_logp)^2), no clamp.
TIRL_HD inline PolicyTerm dro_term(float logp, float old_logp, float advantage,
                                   const PolicyConstants& c) {
  const float log_ratio = logp - old_logp;
  return {-(logp * advantage - 0.5f * c.dro_beta * (log_ratio * log_ratio)),
          -(advantage - c.dro_beta * log_ratio), 0, 0, -log_ratio};
}

// ---------------------------------------------------------------- Clip-Cov, KL-Cov

// Clip-Cov and KL-Cov use the unclamped ratio exp(logp - old_logp).
TIRL_HD inline float unclamped_ratio(float logp, float old_logp) { return exp_any(logp - old_logp); }

// Clip-Cov: max(L1, L2) as vanilla without the dual clip and with the unclamped ratio,
// times corr = 0 for the selected tokens (their loss and gradient are 0 unless NaN).
template <bool kBounded = false>
TIRL_HD inline PolicyTerm clip_cov_term(float logp, float old_logp, float advantage, bool selected,
                                        const PolicyConstants& c) {
  int32_t far = 0;
  const float ratio = policy_exp<kBounded>(logp - old_logp, far);  // unclamped_ratio
  const PpoTerm t = ppo_term(advantage, ratio, c.ratio_low, c.ratio_high, 0.0f);
  const float corr = as_float(!selected);
  return {t.loss * corr, t.dloss_dratio * ratio * corr, static_cast<int32_t>(selected), 0,
          -(logp - old_logp), far};
}

// Clip-Cov's random pick: among the candidates, those with the smallest
// pick_key(pick_key_seed(seed), t), t the token's index in the batch. splitmix64 (Steele,
// Lea, Flood 2014) is a bijection of 64-bit words, so no two tokens share a key and the
// chosen set is a uniform random subset that depends on the seed and the data only.
TIRL_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
TIRL_HD inline uint64_t pick_key_seed(uint64_t seed) { return splitmix64(seed); }
TIRL_HD inline uint64_t pick_key(uint64_t seed_key, uint64_t token) {
  return splitmix64(seed_key ^ token);
}

// The chunk of the ordered double sums behind the picks' batch means: tokens
// [c * kPolicyChunkTokens, (c + 1) * kPolicyChunkTokens) summed in token order, then the
// chunks in chunk order, on the CPU and on the GPU alike (so the means, and the picks, agree).
constexpr int64_t kPolicyChunkTokens = 16384;

// How many tokens Clip-Cov / KL-Cov pick of `masked` masked-in ones: max(floor(ratio *
// masked), 1), and for KL-Cov none when nothing is masked in (verl's k_percent_nums).
TIRL_HD inline int64_t pick_count(int64_t masked, double ratio, bool kl_cov) {
  if (kl_cov && masked == 0) return 0;
  const int64_t n = static_cast<int64_t>(ratio * static_cast<double>(masked));
  return n > 1 ? n : 1;
}

// KL-Cov's order as one 64-bit key, smaller first: the larger covariance first (NaN above
// everything, as in torch.topk; -0 and +0 equal), then the earlier token (t < 2^32).
// kl_cov_order is the high 32 bits alone, branch-free (so that a CPU loop over tokens
// vectorises): at most 0xFF800000 (-Inf) for every covariance, so 0xFFFFFFFF can stand for
// "not a candidate".
TIRL_HD inline uint32_t kl_cov_order(float cov) {
  const uint32_t bits = cov == 0.0f ? 0u : float_bits(cov);
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return cov != cov ? 0u : ~ordered;
}
TIRL_HD inline uint64_t kl_cov_rank_key(float cov, uint64_t token) {
  return (static_cast<uint64_t>(kl_cov_order(cov)) << 32) | token;
}

// Whether a token may be picked by Clip-Cov: not already clipped (L2 > L1) and its
// covariance strictly inside (lb, ub).
TIRL_HD inline bool clip_cov_candidate(float logp, float old_logp, float advantage, float cov,
                                       const PolicyConstants& c, float lb, float ub) {
  const float ratio = unclamped_ratio(logp, old_logp);
  const float l1 = -advantage * ratio;
  const float l2 = -advantage * clamp_keep_nan(ratio, c.ratio_low, c.ratio_high);
  return !(l2 > l1) & (cov < ub) & (cov > lb);
}

// KL-Cov: -A r, plus ppo_kl_coef |logp - old_logp| on the selected tokens. approxKl is the
// masked mean of |logp - old_logp| (verl's ppo_kl for kl_cov).
template <bool kBounded = false>
TIRL_HD inline PolicyTerm kl_cov_term(float logp, float old_logp, float advantage, bool selected,
                                      const PolicyConstants& c) {
  const float log_ratio = logp - old_logp;
  int32_t far = 0;
  const float ratio = policy_exp<kBounded>(log_ratio, far);
  const float abs_kl = select(log_ratio < 0.0f, -log_ratio, log_ratio);
  const float sign = select(log_ratio > 0.0f, 1.0f, select(log_ratio < 0.0f, -1.0f, 0.0f));
  const float base = -advantage * ratio;
  return {select(selected, base + c.ppo_kl_coef * abs_kl, base),
          select(selected, -advantage * ratio + c.ppo_kl_coef * sign, -advantage * ratio), 0, 0,
          abs_kl, far};
}

// The token's part of the covariance both pick by: (A - mean A)(logp - mean logp).
TIRL_HD inline float covariance_term(float logp, float advantage, float mean_logp,
                                     float mean_advantage) {
  return (advantage - mean_advantage) * (logp - mean_logp);
}

// ---------------------------------------------------------------- GMPO (geo_mean)

struct GeoMeanToken {
  float log_ratio;     // sgn(A) min(sgn(A) d, sgn(A) clamp(d, -clip_low, clip_high)), d unclamped
  float dlog_ratio;    // its derivative with respect to logp
  int32_t clipped_upper;  // d != clamp(d) and A > 0
  int32_t clipped_lower;  // d != clamp(d) and A < 0
};

// The per-token clipped log-ratio of GMPO. torch.minimum gives each side half the gradient
// at a tie, so the derivative is 1 on the unclipped side (ties included) and 0 past the clip.
TIRL_HD inline GeoMeanToken geo_mean_token(float logp, float old_logp, float advantage,
                                           const PolicyConstants& c) {
  const float d = logp - old_logp;
  // torch.sign: NaN for NaN.
  const float sgn = select(advantage > 0.0f, 1.0f,
                           select(advantage < 0.0f, -1.0f, select(advantage == 0.0f, 0.0f, advantage)));
  const float dc = clamp_keep_nan(d, -c.clip_low, c.clip_high);
  const float a = sgn * d;
  const float b = sgn * dc;
  const float m = nan_min(a, b);
  const float ga = select(a == b, 0.5f, select(a > b, 0.0f, 1.0f));
  const float gb = select(a == b, 0.5f, select(a < b, 0.0f, 1.0f));
  const float gclamp = select(clamp_passes(dc, d), 1.0f, 0.0f);
  const bool clipped = !(d == dc);
  return {sgn * m, sgn * (ga * sgn + gb * sgn * gclamp),
          static_cast<int32_t>(clipped & (advantage > 0.0f)),
          static_cast<int32_t>(clipped & (advantage < 0.0f))};
}

// GMPO's loss of one sequence from its masked sums (Σ l_t, Σ A, Σ log(w + 1e-10), n):
// -Ā exp(Σ l_t / n) w, in double; 0 for an empty sequence.
TIRL_HD inline double geo_mean_sequence_loss(double log_ratio, double advantage, double log_weight,
                                             int64_t masked, bool weighted) {
  const double n = static_cast<double>(masked);
  const double mean_log_ratio = n > 0 ? log_ratio / n : 0.0;
  const double mean_advantage = n > 0 ? advantage / n : 0.0;
  const double weight = weighted ? ::exp(n > 0 ? log_weight / n : 0.0) : 1.0;
  return -mean_advantage * ::exp(mean_log_ratio) * weight;
}

// ---------------------------------------------------------------- bypass mode's IS weights

// verl's rollout_corr_helper SAFETY_BOUND on the log importance ratio.
constexpr float kRolloutLogRatioBound = 20.0f;

// Truncated (TIS, lower == 0) or band-masked (IcePop, lower > 0) importance weight from a
// log-ratio (a token's, or a sequence's sum): exp(clamp(x, -20, 20)), then min(w, upper), or
// w where lower <= w <= upper and 0 elsewhere.
// Branch-free (so that a token loop calling it vectorises); exp_bounded has exp_any's bits
// on the clamped exponent.
TIRL_HD inline float rollout_is_weight(float log_ratio, float lower, float upper) {
  const float w = exp_bounded(clamp_keep_nan(log_ratio, -kRolloutLogRatioBound, kRolloutLogRatioBound));
  const float banded = select((w >= lower) & (w <= upper), w, 0.0f);
  const float truncated = select(w > upper, upper, w);
  return select(lower > 0.0f, banded, truncated);
}

// ---------------------------------------------------------------- one token, by loss

// The losses whose term has an exp_any that policy_exp<true> may stand in for.
constexpr bool has_bounded_term(tirl_policy_loss_kind loss) {
  return loss == TIRL_POLICY_DPPO_TV || loss == TIRL_POLICY_DPPO_KL || loss == TIRL_POLICY_SAPO ||
         loss == TIRL_POLICY_CLIP_COV || loss == TIRL_POLICY_KL_COV;
}

// The token term of each token-local loss (every policy loss but 'vanilla', 'gspo' and
// 'geo_mean'); `selected` is clip_cov's / kl_cov's pick (0 for the others). kBounded: see
// policy_exp.
template <tirl_policy_loss_kind Loss, bool kBounded = false>
TIRL_HD inline PolicyTerm policy_term(float logp, float old_logp, float advantage, float selected,
                                      const PolicyConstants& c) {
  if constexpr (Loss == TIRL_POLICY_DPPO_TV) {
    return dppo_term<false, kBounded>(logp, old_logp, advantage, c);
  } else if constexpr (Loss == TIRL_POLICY_DPPO_KL) {
    return dppo_term<true, kBounded>(logp, old_logp, advantage, c);
  } else if constexpr (Loss == TIRL_POLICY_SAPO) {
    return sapo_term<kBounded>(logp, old_logp, advantage, c);
  } else if constexpr (Loss == TIRL_POLICY_CISPO) {
    return cispo_term(logp, old_logp, advantage, c);
  } else if constexpr (Loss == TIRL_POLICY_DRO) {
    return dro_term(logp, old_logp, advantage, c);
  } else if constexpr (Loss == TIRL_POLICY_CLIP_COV) {
    return clip_cov_term<kBounded>(logp, old_logp, advantage, selected != 0.0f, c);
  } else if constexpr (Loss == TIRL_POLICY_KL_COV) {
    return kl_cov_term<kBounded>(logp, old_logp, advantage, selected != 0.0f, c);
  } else {
    static_assert(Loss == TIRL_POLICY_GPG || Loss == TIRL_POLICY_REINFORCE, "not a token loss");
    return log_prob_term(logp, old_logp, advantage);
  }
}

}  // namespace tirl
