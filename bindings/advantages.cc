#include <cstring>

#include "common.h"
#include "ops.h"

namespace tirl::binding {
namespace {

constexpr const char* kEstimators[] = {"grpo",
                                       "grpo_passk",
                                       "gdpo",
                                       "rloo",
                                       "reinforce_plus_plus",
                                       "reinforce_plus_plus_baseline",
                                       "remax",
                                       "opo",
                                       "gpg",
                                       "gae",
                                       "optimal_token_baseline",
                                       "tir_optimal_token_baseline"};

// The options only some estimators read, and which: giving one to another estimator is a
// TypeError naming both (a typo or a wrong estimator would otherwise change nothing).
struct EstimatorOption {
  const char* name;
  bool (*reads)(tirl_advantage_estimator);
};
bool grouped(tirl_advantage_estimator e) {
  return e != TIRL_ADV_REINFORCE_PLUS_PLUS && e != TIRL_ADV_REMAX && e != TIRL_ADV_GAE;
}
bool token_baseline(tirl_advantage_estimator e) {
  return e == TIRL_ADV_OPTIMAL_TOKEN_BASELINE || e == TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE;
}
bool normalised(tirl_advantage_estimator e) {
  return e == TIRL_ADV_GRPO || e == TIRL_ADV_GRPO_PASSK || e == TIRL_ADV_GDPO;
}
constexpr EstimatorOption kEstimatorOptions[] = {
    {"groupIds", grouped},
    {"groupSize", grouped},
    {"normAdvByStdInGrpo", normalised},
    {"epsilon", [](tirl_advantage_estimator e) { return normalised(e) || token_baseline(e); }},
    {"rewardWeights", [](tirl_advantage_estimator e) { return e == TIRL_ADV_GDPO; }},
    {"gamma",
     [](tirl_advantage_estimator e) { return e == TIRL_ADV_GAE || e == TIRL_ADV_REINFORCE_PLUS_PLUS; }},
    {"lam", [](tirl_advantage_estimator e) { return e == TIRL_ADV_GAE; }},
    {"values", [](tirl_advantage_estimator e) { return e == TIRL_ADV_GAE; }},
    {"rewardBaselines", [](tirl_advantage_estimator e) { return e == TIRL_ADV_REMAX; }},
    {"fNorm", [](tirl_advantage_estimator e) { return e == TIRL_ADV_GPG; }},
    {"oldLogp", token_baseline},
    {"sumPiSquared", token_baseline},
    {"rolloutIsWeights", token_baseline},
    {"handleZeroTail", token_baseline},
};

struct AdvantagesCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> rewards, token_rewards, values, reward_baselines, old_logp, sum_pi_squared,
      rollout_is_weights, reward_weights, advantages, returns;
  ArrayView<uint8_t> mask;
  ArrayView<int32_t> seq_offsets, group_ids;
  tirl_advantages_options options = tirl_advantages_options_default();
  int64_t num_seqs = 0;
  OutputRef advantages_ref, returns_ref;

  static AdvantagesCall parse(Options& o) {
    AdvantagesCall c;
    tirl_advantages_options& p = c.options;
    p.estimator = static_cast<tirl_advantage_estimator>(o.choice(
        "estimator",
        {kEstimators[0], kEstimators[1], kEstimators[2], kEstimators[3], kEstimators[4],
         kEstimators[5], kEstimators[6], kEstimators[7], kEstimators[8], kEstimators[9],
         kEstimators[10], kEstimators[11]},
        p.estimator));
    const std::string unread = std::string("not read by estimator '") + kEstimators[p.estimator] + "'";
    for (const EstimatorOption& option : kEstimatorOptions) {
      if (!option.reads(p.estimator)) o.refuse(option.name, unread);
    }
    c.mask = o.array<uint8_t>("mask", true);
    const int64_t n = c.mask.length;
    const std::string per_token = "one per token: mask.length";
    c.seq_offsets = o.array<int32_t>("seqOffsets", true);
    if (c.seq_offsets.length < 1) {
      o.range_error(std::string(o.op()) +
                    ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
    }
    c.num_seqs = c.seq_offsets.length - 1;
    const int64_t b = c.num_seqs;

    c.rewards = o.array<float>("rewards", false);
    c.token_rewards = o.array<float>("tokenRewards", false);
    if (c.rewards.present == c.token_rewards.present) {
      throw Napi::TypeError::New(
          o.env(), std::string(o.op()) +
                       ": Expected exactly one of rewards (a Float32Array, one per sequence) and "
                       "tokenRewards (a Float32Array, one per token) but received " +
                       (c.rewards.present ? "both" : "neither"));
    }
    o.require_length(c.token_rewards, "tokenRewards", n, per_token);
    if (p.estimator == TIRL_ADV_GDPO && c.rewards.present && b > 0) {
      // K reward components, key-major: rewards[k * B + i].
      if (c.rewards.length == 0 || c.rewards.length % b != 0) {
        o.range_error(std::string(o.op()) +
                      ": Expected rewards to have length K * B (K reward components of B = " +
                      std::to_string(b) + " sequences) but received length " +
                      std::to_string(c.rewards.length));
      }
      p.num_reward_keys = c.rewards.length / b;
    } else {
      o.require_length(c.rewards, "rewards", b, "one per sequence: seqOffsets.length - 1");
    }
    c.reward_weights = o.array<float>("rewardWeights", false);
    // With no sequences the rewards cannot tell K: the weights do.
    if (p.estimator == TIRL_ADV_GDPO && b == 0 && c.reward_weights.length > 0) {
      p.num_reward_keys = c.reward_weights.length;
    }
    o.require_length(c.reward_weights, "rewardWeights", p.num_reward_keys,
                     "one per reward component: rewards.length / B");

    c.group_ids = o.array<int32_t>("groupIds", false);
    o.require_length(c.group_ids, "groupIds", b, "one per sequence: seqOffsets.length - 1");
    if (o.has("groupSize")) {
      if (c.group_ids.present) {
        throw Napi::TypeError::New(o.env(), std::string(o.op()) +
                                                ": Expected one of groupIds and groupSize but received both");
      }
      p.group_size = o.integer("groupSize", 0, 1, int64_t{1} << 53);
    }
    c.values = o.array<float>("values", false);
    o.require_length(c.values, "values", n, per_token);
    c.reward_baselines = o.array<float>("rewardBaselines", false);
    o.require_length(c.reward_baselines, "rewardBaselines", b, "one per sequence: seqOffsets.length - 1");
    c.old_logp = o.array<float>("oldLogp", false);
    o.require_length(c.old_logp, "oldLogp", n, per_token);
    c.sum_pi_squared = o.array<float>("sumPiSquared", false);
    o.require_length(c.sum_pi_squared, "sumPiSquared", n, per_token);
    c.rollout_is_weights = o.array<float>("rolloutIsWeights", false);
    o.require_length(c.rollout_is_weights, "rolloutIsWeights", n, per_token);

    p.norm_adv_by_std = o.boolean("normAdvByStdInGrpo", p.norm_adv_by_std != 0) ? 1 : 0;
    p.handle_zero_tail = o.boolean("handleZeroTail", p.handle_zero_tail != 0) ? 1 : 0;
    // epsilon's C default (-1) stands for "the estimator's"; JavaScript says it by leaving it out.
    if (o.has("epsilon")) p.epsilon = o.number("epsilon", p.epsilon);
    p.gamma = o.number("gamma", p.gamma);
    p.lam = o.number("lam", p.lam);
    p.f_norm = o.number("fNorm", p.f_norm);
    // The core names what is missing (values, rewardBaselines, ...) and checks the ranges.

    c.advantages = o.output<float>("advantages", n, c.advantages_ref);
    if (o.boolean("withReturns", false)) c.returns = o.output<float>("returns", n, c.returns_ref);
    o.name_as("norm_adv_by_std", "normAdvByStdInGrpo");
    o.name_as("num_tokens", "mask.length");
    o.name_as("num_seqs", "seqOffsets.length - 1");
    o.name_as("num_reward_keys", "rewards.length / B");
    // Not name_as the outputs: "advantages" is also the op's name, which starts every message.
    return c;
  }

  static const float* data(const ArrayView<float>& view) { return view.present ? view.data : nullptr; }

  tirl_status run() {
    tirl_advantages_inputs in;
    std::memset(&in, 0, sizeof in);
    in.rewards = data(rewards);
    in.token_rewards = data(token_rewards);
    in.mask = mask.data;
    in.seq_offsets = seq_offsets.data;
    in.group_ids = group_ids.present ? group_ids.data : nullptr;
    in.values = data(values);
    in.reward_baselines = data(reward_baselines);
    in.old_logp = data(old_logp);
    in.sum_pi_squared = data(sum_pi_squared);
    in.rollout_is_weights = data(rollout_is_weights);
    in.reward_weights = data(reward_weights);
    return tirl_advantages(&in, mask.length, num_seqs, &options, advantages.data,
                           returns.present ? returns.data : nullptr, device);
  }

  Napi::Value result(Napi::Env env) {
    ResultObject r(env);
    r.add("advantages", advantages_ref.Value());
    if (returns.present) r.add("returns", returns_ref.Value());
    return r.done();
  }
};

}  // namespace

TIRL_BINDING(advantages, AdvantagesCall)

}  // namespace tirl::binding
