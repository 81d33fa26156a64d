// advantages's C ABI entry: its defaults, its checks (every estimator's inputs and options),
// then its backend.
#include <cmath>
#include <string>
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"
#include "math/advantages.h"

namespace tirl {
namespace {

constexpr const char* kOp = op_name::advantages;

const char* estimator_name(tirl_advantage_estimator e) {
  switch (e) {
    case TIRL_ADV_GRPO: return "grpo";
    case TIRL_ADV_GRPO_PASSK: return "grpo_passk";
    case TIRL_ADV_GDPO: return "gdpo";
    case TIRL_ADV_RLOO: return "rloo";
    case TIRL_ADV_REINFORCE_PLUS_PLUS: return "reinforce_plus_plus";
    case TIRL_ADV_REINFORCE_PLUS_PLUS_BASELINE: return "reinforce_plus_plus_baseline";
    case TIRL_ADV_REMAX: return "remax";
    case TIRL_ADV_OPO: return "opo";
    case TIRL_ADV_GPG: return "gpg";
    case TIRL_ADV_GAE: return "gae";
    case TIRL_ADV_OPTIMAL_TOKEN_BASELINE: return "optimal_token_baseline";
    case TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE: return "tir_optimal_token_baseline";
  }
  return nullptr;
}

tirl_status invalid(const std::string& message) {
  return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": " + message);
}

// An array the estimator reads (`needed`, then of `count` elements) or must not be given.
tirl_status check_input(const void* pointer, bool needed, int64_t count, const char* name,
                        const char* estimator) {
  if (needed && pointer == nullptr && count > 0) {
    return missing(kOp, name, (std::string("estimator '") + estimator + "'").c_str());
  }
  if (!needed && pointer != nullptr) {
    return invalid(std::string("Expected NULL for ") + name + " (estimator '" + estimator +
                   "' does not read it) but received a pointer");
  }
  return TIRL_OK;
}

tirl_status check_options(const tirl_advantages_options& o, const char** name) {
  *name = estimator_name(o.estimator);
  tirl_status s;
  if ((s = check_value(*name != nullptr, kOp, "estimator", "an estimator in [0, 11]",
                       static_cast<int>(o.estimator))) ||
      (s = check_value(o.epsilon == -1.0 || (o.epsilon >= 0.0 && std::isfinite(o.epsilon)), kOp,
                       "epsilon", "-1 (the default) or a finite number >= 0", o.epsilon)) ||
      (s = check_value(o.gamma >= 0.0 && o.gamma <= 1.0, kOp, "gamma", "a number in [0, 1]", o.gamma)) ||
      (s = check_value(o.lam >= 0.0 && o.lam <= 1.0, kOp, "lam", "a number in [0, 1]", o.lam)) ||
      (s = check_value(o.f_norm > 0.0 && std::isfinite(o.f_norm), kOp, "f_norm",
                       "a finite number > 0", o.f_norm)) ||
      (s = check_value(o.norm_adv_by_std == 0 || o.norm_adv_by_std == 1, kOp, "norm_adv_by_std",
                       "0 or 1", o.norm_adv_by_std)) ||
      (s = check_value(o.handle_zero_tail == 0 || o.handle_zero_tail == 1, kOp, "handle_zero_tail",
                       "0 or 1", o.handle_zero_tail)) ||
      (s = check_value(o.group_size >= 0, kOp, "group_size", "an integer >= 0",
                       static_cast<double>(o.group_size)))) {
    return s;
  }
  if (o.estimator == TIRL_ADV_GDPO) {
    return check_value(o.num_reward_keys >= 1 && o.num_reward_keys <= INT32_MAX, kOp,
                       "num_reward_keys", "an integer in [1, 2^31 - 1]",
                       static_cast<double>(o.num_reward_keys));
  }
  return check_value(o.num_reward_keys == 1, kOp, "num_reward_keys", "1 (only gdpo reads several)",
                     static_cast<double>(o.num_reward_keys));
}

// Everything but the offsets' contents, which the CPU checks below and CUDA on the device.
tirl_status check_call(const tirl_advantages_inputs& in, int64_t num_tokens, int64_t num_seqs,
                       const tirl_advantages_options& o, const float* advantages) {
  tirl_status s;
  const char* name = nullptr;
  if ((s = check_count(num_tokens, kOp, "num_tokens")) || (s = check_count(num_seqs, kOp, "num_seqs")) ||
      (s = check_options(o, &name)) || (s = check_offset_range(num_tokens, kOp))) {
    return s;
  }
  const tirl_advantage_estimator e = o.estimator;
  if (num_seqs >= INT32_MAX) {
    return invalid("Expected at most 2^31 - 2 sequences for num_seqs but received " +
                   std::to_string(num_seqs));
  }
  if (in.rewards != nullptr && in.token_rewards != nullptr) {
    return invalid("Expected one of rewards and token_rewards but received both");
  }
  if (in.rewards == nullptr && in.token_rewards == nullptr && num_tokens > 0) {
    return missing(kOp, "rewards or token_rewards", "tokens");
  }
  if (o.num_reward_keys > 1 && in.rewards == nullptr && num_seqs > 0) {
    return missing(kOp, "rewards", "num_reward_keys > 1");
  }
  if (in.rewards != nullptr && num_seqs > INT64_MAX / 4 / o.num_reward_keys) {
    return invalid("Expected num_seqs * num_reward_keys <= 2^61 - 1 but received " +
                   std::to_string(num_seqs) + " * " + std::to_string(o.num_reward_keys));
  }
  const bool token_baseline = advantages::is_token_baseline(e);
  if ((s = check_pointer(in.mask, num_tokens, kOp, "mask")) ||
      (s = check_pointer(in.seq_offsets, num_seqs + 1, kOp, "seq_offsets")) ||
      (s = check_pointer(advantages, num_tokens, kOp, "advantages")) ||
      (s = check_input(in.values, e == TIRL_ADV_GAE, num_tokens, "values", name)) ||
      (s = check_input(in.reward_baselines, e == TIRL_ADV_REMAX, num_seqs, "reward_baselines", name)) ||
      (s = check_input(in.old_logp, token_baseline, num_tokens, "old_logp", name)) ||
      (s = check_input(in.sum_pi_squared, token_baseline, num_tokens, "sum_pi_squared", name)) ||
      (!token_baseline && (s = check_input(in.rollout_is_weights, false, 0, "rollout_is_weights", name))) ||
      (e != TIRL_ADV_GDPO && (s = check_input(in.reward_weights, false, 0, "reward_weights", name)))) {
    return s;
  }
  if (!advantages::is_grouped(e)) {
    if ((s = check_input(in.group_ids, false, 0, "group_ids", name))) return s;
    return check_value(o.group_size == 0, kOp, "group_size",
                       (std::string("0 (estimator '") + name + "' has no groups)").c_str(),
                       static_cast<double>(o.group_size));
  }
  if (num_seqs == 0) return TIRL_OK;
  if (in.group_ids != nullptr && o.group_size != 0) {
    return invalid("Expected one of group_ids and group_size but received both");
  }
  if (in.group_ids == nullptr && o.group_size == 0) {
    return invalid(std::string("Expected group_ids or group_size for estimator '") + name +
                   "' (it needs groups) but received neither");
  }
  if (in.group_ids == nullptr && num_seqs % o.group_size != 0) {
    return invalid("Expected a group_size that divides num_seqs (" + std::to_string(num_seqs) +
                   ") for group_size but received " + std::to_string(o.group_size));
  }
  return TIRL_OK;
}

}  // namespace
}  // namespace tirl

extern "C" tirl_advantages_options tirl_advantages_options_default(void) {
  tirl_advantages_options o;
  o.estimator = TIRL_ADV_GRPO;
  o.norm_adv_by_std = 1;
  o.epsilon = -1.0;
  o.gamma = 1.0;
  o.lam = 1.0;
  o.f_norm = 1.0;
  o.handle_zero_tail = 1;
  o.num_reward_keys = 1;
  o.group_size = 0;
  return o;
}

extern "C" tirl_status tirl_advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens,
                                       int64_t num_seqs, const tirl_advantages_options* options,
                                       float* advantages, float* returns, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_pointer(inputs, 1, kOp, "inputs")) || (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_device(device, kOp)) ||
        (s = check_call(*inputs, num_tokens, num_seqs, *options, advantages))) {
      return s;
    }
    // On CPU the index arrays are used from private copies, the offsets checked here.
    tirl_advantages_inputs in = *inputs;
    std::vector<int32_t> private_offsets, private_ids;
    if (device.type == TIRL_DEVICE_CPU) {
      use_private_copy(in.seq_offsets, num_seqs + 1, private_offsets);
      if ((s = check_seq_offsets(in.seq_offsets, num_seqs, num_tokens, kOp))) return s;
      use_private_copy(in.group_ids, num_seqs, private_ids);
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.advantages(&in, num_tokens, num_seqs, options, advantages, returns, device);
    });
  });
}
