// ppoLoss's C ABI entries, tirl_policy_loss (every policy loss) and tirl_ppo_loss (its
// clipped surrogate, as it always was): defaults, checks, then the backend.
#include <cfloat>
#include <cstring>
#include <string>
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"
#include "math/ppo_loss.h"

namespace tirl {
namespace {

constexpr const char* kOp = op_name::policy_loss;

tirl_status check_options(const tirl_ppo_options& o) {
  const auto check = [](bool valid, const char* name, const char* expected, double value) {
    return check_value(valid, kOp, name, expected, value);
  };
  tirl_status s;
  // Written as `!(valid)` tests so that NaN fails every one of them.
  if ((s = check(o.clip_low >= 0 && o.clip_low < 1, "clip_low", "a number in [0, 1)",
                 o.clip_low)) ||
      (s = check(o.clip_high >= 0 && o.clip_high < 1e30, "clip_high", "a finite number >= 0",
                 o.clip_high)) ||
      (s = check(o.dual_clip == 0 || (o.dual_clip > 1 && o.dual_clip < 1e30), "dual_clip",
                 "a finite number > 1 (or 0 for off)", o.dual_clip)) ||
      (s = check(o.kl_coef >= 0 && o.kl_coef < 1e30, "kl_coef", "a finite number >= 0",
                 o.kl_coef)) ||
      (s = check(o.token_normalizer >= 0 && o.token_normalizer < 1e300, "token_normalizer",
                 "a finite number > 0 (or 0 for the default)", o.token_normalizer)) ||
      (s = check(o.seq_normalizer >= 0 && o.seq_normalizer < 1e300, "seq_normalizer",
                 "a finite number > 0 (or 0 for the default)", o.seq_normalizer)) ||
      (s = check(o.horizon >= 0 && o.horizon < 1e300, "horizon",
                 "a finite number > 0 (or 0 for the default)", o.horizon)) ||
      (s = check(o.dp_size > 0 && o.dp_size <= FLT_MAX, "dp_size",
                 "a number in (0, 3.40282347e+38] (the loss scale is a float32)", o.dp_size)) ||
      (s = check(o.aggregation >= TIRL_AGG_TOKEN_MEAN &&
                     o.aggregation <= TIRL_AGG_SEQ_MEAN_TOKEN_SUM_NORM,
                 "aggregation", "a tirl_aggregation", o.aggregation)) ||
      (s = check(o.kl_estimator >= TIRL_KL_K1 && o.kl_estimator <= TIRL_KL_ABS_PLUS, "kl_estimator",
                 "a tirl_kl_estimator", o.kl_estimator)) ||
      (s = check(o.ratio_level == TIRL_RATIO_TOKEN || o.ratio_level == TIRL_RATIO_SEQUENCE,
                 "ratio_level", "a tirl_ratio_level", o.ratio_level))) {
    return s;
  }
  // The aggregation's scale dp_size / normalizer multiplies every token in f32: it must stay
  // finite (a tiny normalizer made it Inf, and Inf * 0 made the loss NaN).
  const auto scale_fits = [&](double normalizer) {
    return normalizer == 0 || o.dp_size / normalizer <= FLT_MAX;
  };
  const char* fits = "a number >= dp_size / 3.40282347e+38 (the loss scale is a float32)";
  if ((s = check(scale_fits(o.token_normalizer), "token_normalizer", fits, o.token_normalizer)) ||
      (s = check(scale_fits(o.seq_normalizer), "seq_normalizer", fits, o.seq_normalizer)) ||
      (s = check(scale_fits(o.horizon) && (o.seq_normalizer == 0 || o.horizon == 0 ||
                                           o.dp_size / (o.seq_normalizer * o.horizon) <= FLT_MAX),
                 "horizon",
                 "a number >= dp_size / seq_normalizer / 3.40282347e+38 (the loss scale is a "
                 "float32)",
                 o.horizon))) {
    return s;
  }
  return TIRL_OK;
}

bool finite(double x) { return x > -1e300 && x < 1e300; }

// Each loss's own options (struct_size and the shared part are checked before).
tirl_status check_policy_options(const tirl_policy_loss_options& o) {
  const auto check = [](bool valid, const char* name, const char* expected, double value) {
    return check_value(valid, kOp, name, expected, value);
  };
  tirl_status s;
  const tirl_policy_loss_kind loss = o.policy_loss;
  if ((s = check(loss >= TIRL_POLICY_VANILLA && loss <= TIRL_POLICY_BYPASS_MODE, "policy_loss",
                 "a tirl_policy_loss_kind", loss))) {
    return s;
  }
  const bool clipped_surrogate = loss == TIRL_POLICY_VANILLA ||
                                 (loss == TIRL_POLICY_BYPASS_MODE && o.loss_type == TIRL_BYPASS_PPO_CLIP);
  if (loss != TIRL_POLICY_VANILLA && loss != TIRL_POLICY_GSPO &&
      (s = check(o.ppo.ratio_level == TIRL_RATIO_TOKEN, "ratio_level",
                 "TIRL_RATIO_TOKEN (the sequence ratio is policy_loss TIRL_POLICY_GSPO)",
                 o.ppo.ratio_level))) {
    return s;
  }
  if (!clipped_surrogate &&
      (s = check(o.ppo.dual_clip == 0, "dual_clip",
                 "0 (the dual clip is vanilla's and bypass_mode's ppo_clip's)", o.ppo.dual_clip))) {
    return s;
  }
  switch (loss) {
    case TIRL_POLICY_DPPO_TV:
    case TIRL_POLICY_DPPO_KL:
      return check(o.clip_ratio_c > 0 && finite(o.clip_ratio_c), "clip_ratio_c",
                   "a finite number > 0", o.clip_ratio_c);
    case TIRL_POLICY_SAPO:
      if ((s = check(o.tau_pos > 0 && finite(o.tau_pos), "tau_pos", "a finite number > 0",
                     o.tau_pos))) {
        return s;
      }
      return check(o.tau_neg > 0 && finite(o.tau_neg), "tau_neg", "a finite number > 0", o.tau_neg);
    case TIRL_POLICY_CLIP_COV:
      if ((s = check(o.clip_cov_ratio > 0 && o.clip_cov_ratio <= 1, "clip_cov_ratio",
                     "a number in (0, 1]", o.clip_cov_ratio)) ||
          (s = check(finite(o.clip_cov_lb), "clip_cov_lb", "a finite number", o.clip_cov_lb))) {
        return s;
      }
      return check(o.clip_cov_ub > o.clip_cov_lb && finite(o.clip_cov_ub), "clip_cov_ub",
                   "a finite number > clip_cov_lb", o.clip_cov_ub);
    case TIRL_POLICY_KL_COV:
      if ((s = check(o.kl_cov_ratio > 0 && o.kl_cov_ratio <= 1, "kl_cov_ratio",
                     "a number in (0, 1]", o.kl_cov_ratio))) {
        return s;
      }
      return check(o.ppo_kl_coef >= 0 && finite(o.ppo_kl_coef), "ppo_kl_coef",
                   "a finite number >= 0", o.ppo_kl_coef);
    case TIRL_POLICY_DRO:
      return check(o.dro_beta > 0 && finite(o.dro_beta), "dro_beta",
                   "a finite number > 0 (dro needs it)", o.dro_beta);
    case TIRL_POLICY_BYPASS_MODE:
      if ((s = check(o.loss_type == TIRL_BYPASS_PPO_CLIP || o.loss_type == TIRL_BYPASS_REINFORCE,
                     "loss_type", "a tirl_bypass_loss_type", o.loss_type)) ||
          (s = check(o.rollout_is >= TIRL_ROLLOUT_IS_NONE && o.rollout_is <= TIRL_ROLLOUT_IS_SEQUENCE,
                     "rollout_is", "a tirl_rollout_is_level", o.rollout_is)) ||
          (s = check(o.rollout_is_threshold > 0 && finite(o.rollout_is_threshold),
                     "rollout_is_threshold", "a finite number > 0", o.rollout_is_threshold)) ||
          (s = check(o.rollout_is_threshold_lower >= 0 &&
                         o.rollout_is_threshold_lower <= o.rollout_is_threshold,
                     "rollout_is_threshold_lower",
                     "a number in [0, rollout_is_threshold] (0 = truncate)",
                     o.rollout_is_threshold_lower))) {
        return s;
      }
      return check(o.rollout_is_batch_normalize == 0 || o.rollout_is_batch_normalize == 1,
                   "rollout_is_batch_normalize", "0 or 1", o.rollout_is_batch_normalize);
    default: return TIRL_OK;
  }
}

}  // namespace
}  // namespace tirl

extern "C" tirl_policy_loss_options tirl_policy_loss_options_default(void) {
  tirl_policy_loss_options o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.policy_loss = TIRL_POLICY_VANILLA;
  o.ppo = tirl_ppo_options_default();
  o.clip_ratio_c = 3.0;  // verl's ActorConfig default
  o.tau_pos = 1.0;
  o.tau_neg = 1.05;
  o.clip_cov_ratio = 0.0002;
  o.clip_cov_lb = 1.0;
  o.clip_cov_ub = 5.0;
  o.kl_cov_ratio = 0.0002;
  o.ppo_kl_coef = 0.1;  // verl's actor.yaml
  o.dro_beta = 0;
  o.seed = 0;
  o.loss_type = TIRL_BYPASS_PPO_CLIP;
  o.rollout_is = TIRL_ROLLOUT_IS_NONE;
  o.rollout_is_threshold = 2.0;
  o.rollout_is_threshold_lower = 0;
  o.rollout_is_batch_normalize = 0;
  return o;
}

extern "C" tirl_status tirl_policy_loss(const float* logp, const float* old_logp,
                                        const float* advantages, const uint8_t* mask,
                                        int64_t num_tokens, const int32_t* seq_offsets,
                                        int64_t num_seqs, const float* ref_logp,
                                        const float* weights,
                                        const tirl_policy_loss_options* options, float* grad,
                                        tirl_policy_loss_result* result, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_tokens, kOp, "num_tokens")) ||
        (s = check_count(num_seqs, kOp, "num_seqs")) ||
        (s = check_pointer(logp, num_tokens, kOp, "logp")) ||
        (s = check_pointer(old_logp, num_tokens, kOp, "old_logp")) ||
        (s = check_pointer(advantages, num_tokens, kOp, "advantages")) ||
        (s = check_pointer(mask, num_tokens, kOp, "mask")) ||
        (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_pointer(result, 1, kOp, "result")) ||
        (s = check_value(options->struct_size == sizeof(tirl_policy_loss_options), kOp,
                         "options->struct_size",
                         "sizeof(tirl_policy_loss_options) (start from "
                         "tirl_policy_loss_options_default())",
                         options->struct_size)) ||
        (s = check_value(result->struct_size == sizeof(tirl_policy_loss_result), kOp,
                         "result->struct_size", "sizeof(tirl_policy_loss_result)",
                         result->struct_size)) ||
        (s = check_device(device, kOp)) || (s = check_options(options->ppo)) ||
        (s = check_policy_options(*options))) {
      return s;
    }
    // KL-Cov's pick orders tokens by a key holding the token index in 32 bits.
    if ((s = check_value(options->policy_loss != TIRL_POLICY_KL_COV || num_tokens <= INT64_C(0xFFFFFFFF),
                         kOp, "num_tokens", "at most 2^32 - 1 with policy_loss TIRL_POLICY_KL_COV",
                         num_tokens))) {
      return s;
    }
    // The backends see 'gspo' and bypass_mode's 'ppo_clip' as 'vanilla'.
    tirl_policy_loss_options o = *options;
    const bool bypass = o.policy_loss == TIRL_POLICY_BYPASS_MODE;
    if (o.policy_loss == TIRL_POLICY_GSPO) {
      o.policy_loss = TIRL_POLICY_VANILLA;
      o.ppo.ratio_level = TIRL_RATIO_SEQUENCE;
    } else if (bypass && o.loss_type == TIRL_BYPASS_PPO_CLIP) {
      o.policy_loss = TIRL_POLICY_VANILLA;
    }
    if (bypass && weights != nullptr) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": Expected no weights with policy_loss "
                                     "TIRL_POLICY_BYPASS_MODE (it computes its own) but received "
                                     "an array");
    }
    const bool needs_sequences = per_sequence_aggregation(o.ppo.aggregation) ||
                                 o.ppo.ratio_level == TIRL_RATIO_SEQUENCE ||
                                 o.policy_loss == TIRL_POLICY_GEO_MEAN ||
                                 (o.policy_loss == TIRL_POLICY_BYPASS_MODE &&
                                  o.rollout_is == TIRL_ROLLOUT_IS_SEQUENCE);
    std::vector<int32_t> private_offsets;
    if (seq_offsets != nullptr) {
      // On CUDA the offsets are in device memory: the kernel checks them.
      if (device.type == TIRL_DEVICE_CPU) {
        use_private_copy(seq_offsets, num_seqs + 1, private_offsets);
        if ((s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, kOp))) return s;
      } else if ((s = check_offset_range(num_tokens, kOp))) {
        return s;
      }
    } else if (num_seqs != 0 || needs_sequences) {
      return missing(kOp, "seq_offsets",
                     num_seqs != 0                                   ? "num_seqs > 0"
                     : per_sequence_aggregation(o.ppo.aggregation)   ? "a seq-mean-* aggregation"
                     : o.ppo.ratio_level == TIRL_RATIO_SEQUENCE      ? "ratio_level TIRL_RATIO_SEQUENCE"
                     : o.policy_loss == TIRL_POLICY_GEO_MEAN         ? "policy_loss TIRL_POLICY_GEO_MEAN"
                                                                     : "rollout_is TIRL_ROLLOUT_IS_SEQUENCE");
    }
    // Like every array, ref_logp may be NULL when there are no tokens (an empty typed array
    // has no memory).
    if (o.ppo.kl_coef > 0 && ref_logp == nullptr && num_tokens > 0) {
      return missing(kOp, "ref_logp", "kl_coef > 0");
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.policy_loss(logp, old_logp, advantages, mask, num_tokens, seq_offsets,
                                 seq_offsets ? num_seqs : 0, ref_logp, weights, &o, grad, result,
                                 device);
    });
  });
}

extern "C" tirl_ppo_options tirl_ppo_options_default(void) {
  tirl_ppo_options o;
  o.clip_low = 0.2;
  o.clip_high = 0.2;
  o.dual_clip = 0;
  o.aggregation = TIRL_AGG_TOKEN_MEAN;
  o.token_normalizer = 0;
  o.seq_normalizer = 0;
  o.horizon = 0;
  o.dp_size = 1;
  o.kl_coef = 0;
  o.kl_estimator = TIRL_KL_K3;
  o.ratio_level = TIRL_RATIO_TOKEN;
  return o;
}

extern "C" tirl_status tirl_ppo_loss(const float* logp, const float* old_logp,
                                     const float* advantages, const uint8_t* mask,
                                     int64_t num_tokens, const int32_t* seq_offsets,
                                     int64_t num_seqs, const float* ref_logp,
                                     const float* weights, const tirl_ppo_options* options,
                                     float* grad, tirl_ppo_result* result, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_pointer(result, 1, kOp, "result"))) {
      return s;
    }
    // tirl_policy_loss with policy_loss 'vanilla' (GSPO through ratio_level).
    tirl_policy_loss_options policy = tirl_policy_loss_options_default();
    policy.ppo = *options;
    tirl_policy_loss_result full;
    std::memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    s = tirl_policy_loss(logp, old_logp, advantages, mask, num_tokens, seq_offsets, num_seqs,
                         ref_logp, weights, &policy, grad, &full, device);
    if (s == TIRL_OK) *result = full.ppo;
    return s;
  });
}
