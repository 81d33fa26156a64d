// groupAdvantages's C ABI entry: its defaults, its checks, then its backend.
#include <cmath>
#include <string>

#include "api/dispatch.h"
#include "common/validate.h"

namespace {
constexpr const char* kOp = tirl::op_name::group_advantages;
}

extern "C" tirl_group_advantages_options tirl_group_advantages_options_default(void) {
  tirl_group_advantages_options options;
  options.scale_by_std = 1;
  options.epsilon = 1e-6;
  return options;
}

extern "C" tirl_status tirl_group_advantages(const float* rewards, int64_t num_rewards,
                                             const int32_t* group_ids, int64_t group_size,
                                             const tirl_group_advantages_options* options,
                                             float* advantages, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_rewards, kOp, "num_rewards")) ||
        (s = check_pointer(rewards, num_rewards, kOp, "rewards")) ||
        (s = check_pointer(advantages, num_rewards, kOp, "advantages")) ||
        (s = check_pointer(options, 1, kOp, "options")) || (s = check_device(device, kOp)) ||
        (s = check_value(options->epsilon >= 0.0 && std::isfinite(options->epsilon), kOp,
                         "epsilon", "a finite number >= 0", options->epsilon))) {
      return s;
    }
    // No rewards, no groups: an empty typed array may arrive as a null group_ids.
    if (num_rewards == 0) return ok();
    if (group_ids != nullptr && num_rewards > INT32_MAX) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": Expected at most 2^31 - 1 rewards (num_rewards) with "
                                     "group_ids but received " + std::to_string(num_rewards));
    }
    if (group_ids == nullptr && (group_size < 1 || num_rewards % group_size != 0)) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": Expected a group_size >= 1 that divides num_rewards (" +
                      std::to_string(num_rewards) + ") for group_size but received " +
                      std::to_string(group_size));
    }
    std::vector<int32_t> private_ids;
    if (device.type == TIRL_DEVICE_CPU) use_private_copy(group_ids, num_rewards, private_ids);
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.group_advantages(rewards, num_rewards, group_ids, group_size, options,
                                      advantages, device);
    });
  });
}
