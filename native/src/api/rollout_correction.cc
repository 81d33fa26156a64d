// rolloutCorrection's C ABI entry: its defaults, its checks, then its backend.
#include <string>
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"
#include "math/rollout_correction.h"

namespace tirl {
namespace {

constexpr const char* kOp = op_name::rollout_correction;

// The enum names of the rejection options: the index in the message of a per-option bound.
const char* const kOptionEnums[kRolloutOptions] = {
    "TIRL_ROLLOUT_RS_TOKEN_K1",    "TIRL_ROLLOUT_RS_TOKEN_K2",    "TIRL_ROLLOUT_RS_TOKEN_K3",
    "TIRL_ROLLOUT_RS_SEQ_SUM_K1",  "TIRL_ROLLOUT_RS_SEQ_SUM_K2",  "TIRL_ROLLOUT_RS_SEQ_SUM_K3",
    "TIRL_ROLLOUT_RS_SEQ_MEAN_K1", "TIRL_ROLLOUT_RS_SEQ_MEAN_K2", "TIRL_ROLLOUT_RS_SEQ_MEAN_K3",
    "TIRL_ROLLOUT_RS_SEQ_MAX_K2",  "TIRL_ROLLOUT_RS_SEQ_MAX_K3"};

// Written as `!(valid)` tests so that NaN fails every one of them.
tirl_status check_options(const tirl_rollout_correction_options& o) {
  const auto check = [](bool valid, const char* name, const char* expected, double value) {
    return check_value(valid, kOp, name, expected, value);
  };
  tirl_status s;
  if ((s = check(o.rollout_is >= TIRL_ROLLOUT_IS_NONE && o.rollout_is <= TIRL_ROLLOUT_IS_SEQUENCE,
                 "rollout_is", "a tirl_rollout_is_level", o.rollout_is)) ||
      (s = check(o.rollout_is_threshold > 0 && o.rollout_is_threshold < 1e300,
                 "rollout_is_threshold", "a finite number > 0", o.rollout_is_threshold)) ||
      (s = check(o.rollout_is_threshold_lower == 0 ||
                     (o.rollout_is_threshold_lower > 0 &&
                      o.rollout_is_threshold_lower <= o.rollout_is_threshold),
                 "rollout_is_threshold_lower",
                 "a number in (0, rollout_is_threshold] (or 0 for TIS)",
                 o.rollout_is_threshold_lower)) ||
      (s = check(o.rollout_is_batch_normalize == 0 || o.rollout_is_batch_normalize == 1,
                 "rollout_is_batch_normalize", "0 or 1", o.rollout_is_batch_normalize)) ||
      (s = check(o.rollout_rs < (1u << kRolloutOptions), "rollout_rs",
                 "a set of tirl_rollout_rs_option bits (below 1 << 11)", o.rollout_rs))) {
    return s;
  }
  for (int option = 0; option < kRolloutOptions; ++option) {
    if ((o.rollout_rs & (1u << option)) == 0) continue;
    const std::string upper_name = std::string("rollout_rs_threshold[") + kOptionEnums[option] + "]";
    const std::string lower_name =
        std::string("rollout_rs_threshold_lower[") + kOptionEnums[option] + "]";
    const double upper = o.rollout_rs_threshold[option];
    const double lower = o.rollout_rs_threshold_lower[option];
    const bool k1 = rollout_rs_estimator(option) == 1;
    // k1 bounds are ratios whose logs must be finite; k2 / k3 bounds only need to be finite.
    if ((s = check(upper > 0 && upper < 1e300 && (!k1 || upper >= 1e-300), upper_name.c_str(),
                   k1 ? "a number in [1e-300, 1e300)" : "a finite number > 0", upper))) {
      return s;
    }
    if (k1 && lower == 0) {
      // verl: the default lower bound 1 / upper must not exceed upper.
      if ((s = check(upper >= 1, upper_name.c_str(),
                     "a number >= 1 (the lower bound defaults to 1 / upper)", upper))) {
        return s;
      }
    } else if (k1) {
      if ((s = check(lower >= 1e-300 && lower <= upper, lower_name.c_str(),
                     "a number in [1e-300, upper] (or 0 for 1 / upper)", lower))) {
        return s;
      }
    } else if ((s = check(lower == 0, lower_name.c_str(),
                          "0 (only k1 options take a lower bound)", lower))) {
      return s;
    }
  }
  return TIRL_OK;
}

}  // namespace
}  // namespace tirl

extern "C" tirl_rollout_correction_options tirl_rollout_correction_options_default(void) {
  tirl_rollout_correction_options o{};
  o.rollout_is = TIRL_ROLLOUT_IS_SEQUENCE;
  o.rollout_is_threshold = 2.0;
  o.rollout_is_threshold_lower = 0;
  o.rollout_is_batch_normalize = 0;
  o.rollout_rs = 0;
  for (int i = 0; i < TIRL_ROLLOUT_RS_COUNT; ++i) {
    o.rollout_rs_threshold[i] = 0;
    o.rollout_rs_threshold_lower[i] = 0;
  }
  return o;
}

extern "C" tirl_status tirl_rollout_correction(const float* logp, const float* rollout_logp,
                                               const uint8_t* mask, int64_t num_tokens,
                                               const int32_t* seq_offsets, int64_t num_seqs,
                                               const tirl_rollout_correction_options* options,
                                               float* weights, uint8_t* mask_out,
                                               tirl_rollout_correction_result* result,
                                               tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_tokens, kOp, "num_tokens")) ||
        (s = check_count(num_seqs, kOp, "num_seqs")) ||
        (s = check_pointer(logp, num_tokens, kOp, "logp")) ||
        (s = check_pointer(rollout_logp, num_tokens, kOp, "rollout_logp")) ||
        (s = check_pointer(mask, num_tokens, kOp, "mask")) ||
        (s = check_pointer(seq_offsets, 1, kOp, "seq_offsets")) ||
        (s = check_pointer(weights, num_tokens, kOp, "weights")) ||
        (s = check_pointer(mask_out, num_tokens, kOp, "mask_out")) ||
        (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_pointer(result, 1, kOp, "result")) || (s = check_device(device, kOp))) {
      return s;
    }
    // A private copy: the caller may change its options while the kernel runs.
    const tirl_rollout_correction_options o = *options;
    if ((s = check_options(o))) return s;
    std::vector<int32_t> private_offsets;
    if (device.type == TIRL_DEVICE_CUDA) {
      // seq_offsets are in device memory: the CUDA kernel checks them.
      if ((s = check_offset_range(num_tokens, kOp))) return s;
    } else {
      use_private_copy(seq_offsets, num_seqs + 1, private_offsets);
      if ((s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, kOp))) return s;
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.rollout_correction(logp, rollout_logp, mask, num_tokens, seq_offsets,
                                        num_seqs, &o, weights, mask_out, result, device);
    });
  });
}
