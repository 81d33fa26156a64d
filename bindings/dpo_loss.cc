#include "common.h"
#include "ops.h"

namespace tirl::binding {
namespace {

struct DpoLossCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> policy_chosen, policy_rejected, ref_chosen, ref_rejected;
  ArrayView<float> grad_chosen, grad_rejected, chosen_rewards, rejected_rewards;
  OutputRef grad_chosen_ref, grad_rejected_ref, chosen_rewards_ref, rejected_rewards_ref;
  tirl_dpo_options options = tirl_dpo_options_default();
  tirl_dpo_result totals{};

  static DpoLossCall parse(Options& o) {
    DpoLossCall c;
    c.policy_chosen = o.array<float>("policyChosen", true);
    c.policy_rejected = o.array<float>("policyRejected", true);
    c.ref_chosen = o.array<float>("refChosen", true);
    c.ref_rejected = o.array<float>("refRejected", true);
    const int64_t pairs = c.policy_chosen.length;
    const char* because = "one per pair: policyChosen.length";
    o.require_length(c.policy_rejected, "policyRejected", pairs, because);
    o.require_length(c.ref_chosen, "refChosen", pairs, because);
    o.require_length(c.ref_rejected, "refRejected", pairs, because);
    c.options.beta = o.number("beta", c.options.beta);
    c.options.label_smoothing = o.number("labelSmoothing", c.options.label_smoothing);
    // Order matches tirl_dpo_variant.
    c.options.variant = static_cast<tirl_dpo_variant>(
        o.choice("variant", {"sigmoid", "hinge", "ipo", "robust"}, c.options.variant));
    c.grad_chosen = o.output<float>("gradChosen", pairs, c.grad_chosen_ref);
    c.grad_rejected = o.output<float>("gradRejected", pairs, c.grad_rejected_ref);
    c.chosen_rewards = o.output<float>("chosenRewards", pairs, c.chosen_rewards_ref);
    c.rejected_rewards = o.output<float>("rejectedRewards", pairs, c.rejected_rewards_ref);
    return c;
  }

  tirl_status run() {
    return tirl_dpo_loss(policy_chosen.data, policy_rejected.data, ref_chosen.data,
                         ref_rejected.data, policy_chosen.length, &options, grad_chosen.data,
                         grad_rejected.data, chosen_rewards.data, rejected_rewards.data, &totals,
                         device);
  }

  Napi::Value result(Napi::Env env) {
    ResultObject r(env);
    r.add("loss", totals.loss);
    r.add("gradChosen", grad_chosen_ref.Value());
    r.add("gradRejected", grad_rejected_ref.Value());
    r.add("chosenRewards", chosen_rewards_ref.Value());
    r.add("rejectedRewards", rejected_rewards_ref.Value());
    r.add("rewardAccuracy", totals.reward_accuracy);
    return r.done();
  }
};

}  // namespace

TIRL_BINDING(dpo_loss, DpoLossCall)

}  // namespace tirl::binding
