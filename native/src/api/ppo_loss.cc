// ppoLoss's C ABI entry: its defaults, its checks, then its backend.
#include <cfloat>
#include <string>
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"
#include "math/ppo_loss.h"

namespace tirl {
namespace {

constexpr const char* kOp = op_name::ppo_loss;

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
      (s = check(o.kl_estimator >= TIRL_KL_K1 && o.kl_estimator <= TIRL_KL_ABS, "kl_estimator",
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

}  // namespace
}  // namespace tirl

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
    if ((s = check_count(num_tokens, kOp, "num_tokens")) ||
        (s = check_count(num_seqs, kOp, "num_seqs")) ||
        (s = check_pointer(logp, num_tokens, kOp, "logp")) ||
        (s = check_pointer(old_logp, num_tokens, kOp, "old_logp")) ||
        (s = check_pointer(advantages, num_tokens, kOp, "advantages")) ||
        (s = check_pointer(mask, num_tokens, kOp, "mask")) ||
        (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_pointer(result, 1, kOp, "result")) ||
        (s = check_device(device, kOp)) || (s = check_options(*options))) {
      return s;
    }
    const tirl_ppo_options& o = *options;
    std::vector<int32_t> private_offsets;
    if (seq_offsets != nullptr) {
      // On CUDA the offsets are in device memory: the kernel checks them.
      if (device.type == TIRL_DEVICE_CPU) {
        use_private_copy(seq_offsets, num_seqs + 1, private_offsets);
        if ((s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, kOp))) return s;
      } else if ((s = check_offset_range(num_tokens, kOp))) {
        return s;
      }
    } else if (num_seqs != 0 || per_sequence_aggregation(o.aggregation) ||
               o.ratio_level == TIRL_RATIO_SEQUENCE) {
      return missing(kOp, "seq_offsets",
                     num_seqs != 0                            ? "num_seqs > 0"
                     : per_sequence_aggregation(o.aggregation) ? "a seq-mean-* aggregation"
                                                               : "ratio_level TIRL_RATIO_SEQUENCE");
    }
    // Like every array, ref_logp may be NULL when there are no tokens (an empty typed array
    // has no memory).
    if (o.kl_coef > 0 && ref_logp == nullptr && num_tokens > 0) {
      return missing(kOp, "ref_logp", "kl_coef > 0");
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.ppo_loss(logp, old_logp, advantages, mask, num_tokens, seq_offsets,
                              seq_offsets ? num_seqs : 0, ref_logp, weights, options, grad, result,
                              device);
    });
  });
}
