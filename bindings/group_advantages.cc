#include "common.h"
#include "ops.h"

namespace tirl::binding {
namespace {

struct GroupAdvantagesCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> rewards, advantages;
  ArrayView<int32_t> group_ids;
  int64_t group_size = 0;
  tirl_group_advantages_options options = tirl_group_advantages_options_default();
  OutputRef advantages_ref;

  static GroupAdvantagesCall parse(Options& o) {
    GroupAdvantagesCall c;
    c.rewards = o.array<float>("rewards", true);
    c.group_ids = o.array<int32_t>("groupIds", false);
    const bool has_group_size = o.has("groupSize");
    if (c.group_ids.present == has_group_size) {
      throw Napi::TypeError::New(
          o.env(), std::string(o.op()) +
                       ": Expected exactly one of groupIds (an Int32Array) and groupSize (an "
                       "integer) but received " +
                       (has_group_size ? "both" : "neither"));
    }
    o.require_length(c.group_ids, "groupIds", c.rewards.length, "one per reward: rewards.length");
    if (has_group_size) {
      // An integer (the C call checks that it divides the reward count).
      c.group_size = o.integer("groupSize", 1, 1, int64_t{1} << 53);
    }
    c.options.scale_by_std = o.boolean("scaleByStd", c.options.scale_by_std != 0) ? 1 : 0;
    c.options.epsilon = o.number("epsilon", c.options.epsilon);
    c.advantages = o.output<float>(nullptr, c.rewards.length, c.advantages_ref);
    o.name_as("advantages", "out");
    o.name_as("num_rewards", "rewards.length");
    return c;
  }

  tirl_status run() {
    return tirl_group_advantages(rewards.data, rewards.length,
                                 group_ids.present ? group_ids.data : nullptr, group_size, &options,
                                 advantages.data, device);
  }

  Napi::Value result(Napi::Env) { return advantages_ref.Value(); }
};

}  // namespace

TIRL_BINDING(group_advantages, GroupAdvantagesCall)

}  // namespace tirl::binding
