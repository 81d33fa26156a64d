// dpoLoss's C ABI entry: its defaults, its checks, then its backend.
#include <cfloat>
#include <string>

#include "api/dispatch.h"
#include "common/validate.h"

namespace {
constexpr const char* kOp = tirl::op_name::dpo_loss;
}

extern "C" tirl_dpo_options tirl_dpo_options_default(void) {
  tirl_dpo_options options;
  options.beta = 0.1;
  options.label_smoothing = 0.0;
  options.variant = TIRL_DPO_SIGMOID;
  return options;
}

extern "C" tirl_status tirl_dpo_loss(const float* policy_chosen, const float* policy_rejected,
                                     const float* ref_chosen, const float* ref_rejected,
                                     int64_t num_pairs, const tirl_dpo_options* options,
                                     float* grad_chosen, float* grad_rejected,
                                     float* chosen_rewards, float* rejected_rewards,
                                     tirl_dpo_result* result, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_pairs, kOp, "num_pairs")) ||
        (s = check_pointer(policy_chosen, num_pairs, kOp, "policy_chosen")) ||
        (s = check_pointer(policy_rejected, num_pairs, kOp, "policy_rejected")) ||
        (s = check_pointer(ref_chosen, num_pairs, kOp, "ref_chosen")) ||
        (s = check_pointer(ref_rejected, num_pairs, kOp, "ref_rejected")) ||
        (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_pointer(result, 1, kOp, "result")) || (s = check_device(device, kOp))) {
      return s;
    }
    const tirl_dpo_options& o = *options;
    // The per-pair math is f32: a beta that is no normal f32 would become 0 or Inf there.
    if ((s = check_value(o.beta >= FLT_MIN && o.beta <= FLT_MAX, kOp, "beta",
                         "a number in [1.17549435e-38, 3.40282347e+38] (a positive normal "
                         "float32)",
                         o.beta)) ||
        (s = check_value(o.label_smoothing >= 0.0 && o.label_smoothing < 0.5, kOp,
                         "label_smoothing", "a number in [0, 0.5)", o.label_smoothing)) ||
        (s = check_value(o.variant >= TIRL_DPO_SIGMOID && o.variant <= TIRL_DPO_ROBUST, kOp,
                         "variant", "a tirl_dpo_variant", o.variant))) {
      return s;
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, num_pairs,
                              options, grad_chosen, grad_rejected, chosen_rewards,
                              rejected_rewards, result, device);
    });
  });
}
