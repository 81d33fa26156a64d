"""tirl.integrations.verl against verl's own formulas, transcribed below in float64 from
verl-project/verl at commit 1dda039b9c6311889a9c9a26040677e1254814f9
(verl/trainer/ppo/core_algos.py: agg_loss, compute_policy_loss_vanilla,
compute_policy_loss_gspo, kl_penalty_forward, compute_grpo_outcome_advantage;
verl/utils/torch_functional.py: masked_sum, masked_mean). verl itself is not installed."""

import types
from dataclasses import dataclass, field

import pytest
import torch

from tirl.integrations import verl as tirl_verl

AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


# ---------------------------------------------------------------- verl, transcribed

def masked_sum(values, mask, axis=None):
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    return masked_sum(values, mask, axis) / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
             loss_scale_factor=None):
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ["seq-mean-token-sum", "seq-mean-token-sum-norm"]:
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).double()
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    seq_mask = torch.sum(loss_mask, dim=-1)
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)
    seq_mask = (seq_mask > 0).double()
    if global_batch_size is None:
        global_batch_size = seq_mask.sum()
    return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size


def verl_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights=None):
    clip_ratio = config.clip_ratio
    low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_ratio
    clip_ratio_c = config.get("clip_ratio_c", 3.0)
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).double(), response_mask)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).double(), response_mask)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **config.global_batch_info)
    return pg_loss, {"actor/pg_clipfrac": pg_clipfrac.item(), "actor/ppo_kl": ppo_kl.item(),
                     "actor/pg_clipfrac_lower": pg_clipfrac_lower.item()}


def verl_gspo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights=None):
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths
    log_seq_importance_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
    log_seq_importance_ratio = torch.clamp(log_seq_importance_ratio, max=10.0)
    seq_importance_ratio = torch.exp(log_seq_importance_ratio)
    pg_losses1 = -advantages * seq_importance_ratio
    pg_losses2 = -advantages * torch.clamp(seq_importance_ratio, 1 - low, 1 + high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, "seq-mean-token-mean", **config.global_batch_info)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).double(), response_mask)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    return pg_loss, {"actor/pg_clipfrac": pg_clipfrac.item(), "actor/ppo_kl": ppo_kl.item(),
                     "actor/pg_clipfrac_lower": 0.0}


def verl_kl_penalty_forward(logprob, ref_logprob, kl_penalty):
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)


def verl_grpo_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    scores = token_level_rewards.sum(dim=-1)
    groups = {}
    for i in range(scores.shape[0]):
        groups.setdefault(index[i], []).append(scores[i])
    stats = {}
    for key, values in groups.items():
        stacked = torch.stack(values)
        stats[key] = (torch.tensor(0.0), torch.tensor(1.0)) if len(values) == 1 else (stacked.mean(), stacked.std())
    out = scores.clone()
    for i in range(scores.shape[0]):
        mean, std = stats[index[i]]
        out[i] = (scores[i] - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores[i] - mean
    out = out.unsqueeze(-1) * response_mask
    return out, out


# ---------------------------------------------------------------- configs as verl has them

@dataclass
class ActorConfig:
    """The fields of verl's ActorConfig that the losses read, with its ``get``."""
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 3.0
    global_batch_info: dict = field(default_factory=dict)

    def get(self, key, default=None):
        return getattr(self, key, default)


def batch(seed, b=5, t=9):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    logp = old + 1.2 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t) + 0.3 * torch.randn(b, t, generator=g,
                                                                                                  dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) > 0.3).to(torch.int64)  # verl's response_mask dtype
    mask[2] = 0
    weights = torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    return old, logp, adv, mask, weights


def compare(ours, theirs, inputs_ours, inputs_theirs):
    (loss, metrics), (ref_loss, ref_metrics) = ours, theirs
    loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(loss.double(), ref_loss.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(inputs_ours.grad.double(), inputs_theirs.grad, rtol=1e-5, atol=1e-7)
    assert metrics.keys() == ref_metrics.keys()
    for key in metrics:
        assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("global_info", [{}, {"dp_size": 4, "batch_num_tokens": 97, "global_batch_size": 19,
                                              "loss_scale_factor": 512}])
@pytest.mark.parametrize("with_weights", [False, True])
def test_vanilla_policy_loss(mode, global_info, with_weights):
    old, logp, adv, mask, weights = batch(1)
    config = ActorConfig(global_batch_info=global_info)
    ours_logp = logp.float().requires_grad_()
    ref_logp = logp.clone().requires_grad_()
    ours = tirl_verl.compute_policy_loss_vanilla(old.float(), ours_logp, adv.float(), mask, mode, config,
                                                 weights.float() if with_weights else None)
    theirs = verl_vanilla(old, ref_logp, adv, mask, mode, config, weights if with_weights else None)
    compare(ours, theirs, ours_logp, ref_logp)
    assert ours[1]["actor/pg_clipfrac_lower"] > 0 and ours[1]["actor/pg_clipfrac"] > 0


@pytest.mark.parametrize("global_info", [{}, {"dp_size": 2, "global_batch_size": 11}])
def test_gspo_policy_loss(global_info):
    old, logp, adv, mask, weights = batch(2)
    config = ActorConfig(clip_ratio_low=3e-4, clip_ratio_high=4e-4, global_batch_info=global_info)
    ours_logp = logp.float().requires_grad_()
    ref_logp = logp.clone().requires_grad_()
    ours = tirl_verl.compute_policy_loss_gspo(old.float(), ours_logp, adv.float(), mask, "token-mean", config,
                                              weights.float())
    theirs = verl_gspo(old, ref_logp, adv, mask, "token-mean", config, weights)
    compare(ours, theirs, ours_logp, ref_logp)


def test_config_read_by_attribute_get_or_mapping():
    old, logp, adv, mask, _ = batch(3)
    dataclass_config = ActorConfig(clip_ratio_low=0.1, clip_ratio_high=0.3, clip_ratio_c=2.0)
    mapping = {"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.3, "clip_ratio_c": 2.0}
    namespace = types.SimpleNamespace(**mapping)
    results = [tirl_verl.compute_policy_loss_vanilla(old.float(), logp.float(), adv.float(), mask, "token-mean", c)
               for c in (dataclass_config, mapping, namespace)]
    assert results[0][0] == results[1][0] == results[2][0]
    assert results[0][1] == results[1][1] == results[2][1]
    with pytest.raises(ValueError, match="clip_ratio_c"):
        tirl_verl.compute_policy_loss_vanilla(old.float(), logp.float(), adv.float(), mask, "token-mean",
                                              {"clip_ratio": 0.2, "clip_ratio_c": 1.0})


@pytest.mark.parametrize("penalty", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_kl_loss_is_aggregated_kl_penalty(penalty, mode):
    _, logp, _, mask, _ = batch(4)
    ref = logp.detach() + 0.4 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ours_logp = logp.float().requires_grad_()
    ref_logp = logp.clone().requires_grad_()
    loss = tirl_verl.kl_loss(ours_logp, ref.float(), mask, mode, penalty)
    expected = agg_loss(verl_kl_penalty_forward(ref_logp, ref, penalty), mask, mode)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad.double(), ref_logp.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_outcome_advantage(norm):
    g = torch.Generator().manual_seed(6)
    rewards = torch.zeros(7, 5)
    rewards[torch.arange(7), torch.randint(0, 5, (7,), generator=g)] = torch.rand(7, generator=g)
    mask = (torch.rand(7, 5, generator=g) > 0.2).float()
    index = ["a", "b", "a", "c", "b", "a", "b"]  # "c" is a group of one
    ours, returns = tirl_verl.compute_grpo_outcome_advantage(rewards, mask, index, 1e-6, norm)
    theirs, _ = verl_grpo_advantage(rewards.double(), mask.double(), index, 1e-6, norm)
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-5, atol=1e-6)
    assert returns is ours


def test_registries_and_register():
    assert tirl_verl.get_policy_loss_fn("vanilla") is tirl_verl.compute_policy_loss_vanilla
    assert tirl_verl.get_policy_loss_fn("tirl_gspo") is tirl_verl.compute_policy_loss_gspo
    assert tirl_verl.get_adv_estimator_fn(types.SimpleNamespace(value="grpo")) is \
        tirl_verl.compute_grpo_outcome_advantage
    with pytest.raises(ValueError, match="clip_cov"):
        tirl_verl.get_policy_loss_fn("clip_cov")
    fake = types.SimpleNamespace(POLICY_LOSS_REGISTRY={}, ADV_ESTIMATOR_REGISTRY={})
    assert tirl_verl.register(fake) is True
    assert fake.POLICY_LOSS_REGISTRY == {f"tirl_{mode}": fn for mode, fn in tirl_verl.POLICY_LOSSES.items()}
    assert fake.POLICY_LOSS_REGISTRY["tirl_vanilla"] is tirl_verl.compute_policy_loss_vanilla
    assert fake.ADV_ESTIMATOR_REGISTRY == {f"tirl_{name}": fn for name, fn in tirl_verl.ADV_ESTIMATORS.items()}
    assert fake.ADV_ESTIMATOR_REGISTRY["tirl_grpo"] is tirl_verl.compute_grpo_outcome_advantage
    try:
        import verl  # noqa: F401
    except ImportError:
        assert tirl_verl.register() is False


# ---------------------------------------------------------------- rollout_corr_helper (same commit)

def rollout_batch(seed=11):
    g = torch.Generator().manual_seed(seed)
    rollout = -torch.rand(5, 8, generator=g) * 3
    old = rollout + 0.3 * torch.randn(5, 8, generator=g)
    mask = (torch.rand(5, 8, generator=g) > 0.2).to(torch.int64)
    return old, rollout, mask


@pytest.mark.skipif(not hasattr(tirl_verl._abi.lib, "tirl_rollout_correction"), reason="no tirl_rollout_correction")
def test_rollout_correction_drop_in_matches_the_op_and_verl_names():
    import tirl
    old, rollout, mask = rollout_batch()
    proto, new_mask, metrics = tirl_verl.compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, rollout_is="token", rollout_is_threshold="0.5_1.5", rollout_rs="token_k1,seq_mean_k3",
        rollout_rs_threshold="0.8_1.25,0.05")
    weights, kept, direct = tirl.rollout_correction(
        old, rollout, mask, rollout_is="token", rollout_is_threshold=1.5, rollout_is_threshold_lower=0.5,
        rollout_rs=["token_k1", "seq_mean_k3"], rollout_rs_threshold=[1.25, 0.05], rollout_rs_threshold_lower=[0.8, 0])
    assert torch.equal(proto.batch["rollout_is_weights"], weights)
    assert new_mask.dtype == mask.dtype and torch.equal(new_mask.bool(), kept)
    assert metrics == {f"rollout_corr/{k}": v for k, v in direct.items() if k not in ("non_finite", "masked_tokens")}
    m = mask.double()
    kl = float(((rollout.double() - old.double()) * m).sum() / m.sum())
    assert metrics["rollout_corr/kl"] == pytest.approx(kl, rel=1e-6)
    assert "rollout_corr/rollout_rs_token_k1_masked_fraction" in metrics
    assert "rollout_corr/rollout_is_oob_ratio" in metrics


@pytest.mark.skipif(not hasattr(tirl_verl._abi.lib, "tirl_rollout_correction"), reason="no tirl_rollout_correction")
def test_rollout_correction_drop_in_defaults_and_errors():
    old, rollout, mask = rollout_batch(12)
    proto, new_mask, metrics = tirl_verl.compute_rollout_correction_and_rejection_mask(old, rollout, mask)
    assert proto is None and torch.equal(new_mask, mask)
    assert not any(key.startswith("rollout_corr/rollout_is") for key in metrics)
    offpolicy = tirl_verl.compute_offpolicy_metrics(old, rollout, mask)
    assert offpolicy == {k[len("rollout_corr/"):]: v for k, v in metrics.items()}
    assert set(tirl_verl.compute_offpolicy_metrics(old, None, mask)) == {"training_ppl", "training_log_ppl"}
    with pytest.raises(ValueError, match="at least one valid token"):
        tirl_verl.compute_rollout_correction_and_rejection_mask(old, rollout, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        tirl_verl.compute_rollout_correction_and_rejection_mask(old, rollout, mask, rollout_rs="token_k2")
    with pytest.raises(ValueError, match="single upper bound"):
        tirl_verl.compute_rollout_correction_and_rejection_mask(old, rollout, mask, rollout_rs="token_k2",
                                                                rollout_rs_threshold="0.5_2")


def verl_other_losses(kind, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                      rollout_is_weights=None):
    """compute_policy_loss_gpg / _sapo / _cispo / _dro, transcribed (same commit)."""
    negative_approx_kl = log_prob - old_log_prob
    clamped = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(clamped)
    metrics = {}
    if kind == "gpg":
        pg_losses = -log_prob * advantages
    elif kind == "sapo":
        taus = torch.where(advantages > 0, torch.full_like(advantages, config.tau_pos),
                           torch.full_like(advantages, config.tau_neg))
        pg_losses = -torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus) * advantages
        loss_agg_mode = "seq-mean-token-mean"
        metrics = {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": masked_mean(-clamped, response_mask).item(),
                   "actor/pg_clipfrac_lower": 0.0}
    elif kind == "cispo":
        clipped = torch.clamp(ratio, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high)
        pg_losses = -clipped.detach() * advantages * log_prob
        metrics = {"actor/pg_clipfrac": masked_mean((ratio != clipped).double(), response_mask).item(),
                   "actor/ppo_kl": masked_mean(-clamped, response_mask).item(), "actor/pg_clipfrac_lower": 0.0}
    else:
        beta = config.policy_loss["dro_beta"]
        pg_losses = -(log_prob * advantages - 0.5 * beta * negative_approx_kl.square())
        metrics = {"actor/ppo_kl": masked_mean(-negative_approx_kl, response_mask).item()}
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return agg_loss(pg_losses, response_mask, loss_agg_mode, **config.global_batch_info), metrics


@dataclass
class FullActorConfig(ActorConfig):
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    policy_loss: dict = field(default_factory=lambda: {"dro_beta": 0.25})


@pytest.mark.skipif(not hasattr(tirl_verl._abi.lib, "tirl_policy_loss"),
                    reason="the library has no tirl_policy_loss")
@pytest.mark.parametrize("kind", ["gpg", "sapo", "cispo", "dro"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
def test_other_policy_losses(kind, mode):
    old, logp, adv, mask, weights = batch(7)
    config = FullActorConfig(global_batch_info={"dp_size": 2, "batch_num_tokens": 50, "global_batch_size": 9})
    ours_logp = logp.float().requires_grad_()
    ref_logp = logp.clone().requires_grad_()
    ours = tirl_verl.get_policy_loss_fn(f"tirl_{kind}")(old.float(), ours_logp, adv.float(), mask, mode, config,
                                                        weights.float())
    theirs = verl_other_losses(kind, old, ref_logp, adv, mask, mode, config, weights)
    compare(ours, theirs, ours_logp, ref_logp)


def masked_whiten(values, mask):
    mean = masked_mean(values, mask)
    centered = values - mean
    variance = masked_mean(centered**2, mask)
    mask_sum = mask.sum()
    variance = variance * mask_sum / (mask_sum - 1)
    return (values - mean) * torch.rsqrt(variance + 1e-8)


def verl_rloo(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(dim=-1)
    groups = {}
    for i in range(scores.shape[0]):
        groups.setdefault(index[i], []).append(scores[i])
    means = {k: torch.tensor(0.0, dtype=scores.dtype) if len(v) == 1 else torch.stack(v).mean()
             for k, v in groups.items()}
    out = scores.clone()
    for i in range(scores.shape[0]):
        n = len(groups[index[i]])
        if n > 1:
            out[i] = scores[i] * n / (n - 1) - means[index[i]] * n / (n - 1)
    out = out.unsqueeze(-1) * response_mask
    return out, out


def verl_reinforce_plus_plus(token_level_rewards, response_mask, gamma):
    returns = torch.zeros_like(token_level_rewards)
    running_return = 0
    for t in reversed(range(token_level_rewards.shape[1])):
        new_running_return = token_level_rewards[:, t] + gamma * running_return
        returns[:, t] = new_running_return * response_mask[:, t]
        running_return = new_running_return * response_mask[:, t] + running_return * (1 - response_mask[:, t])
    return masked_whiten(returns, response_mask) * response_mask, returns


def verl_gae(token_level_rewards, values, response_mask, gamma, lam):
    nextvalues, lastgaelam, reversed_advantages = 0, 0, []
    for t in reversed(range(token_level_rewards.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * response_mask[:, t] + (1 - response_mask[:, t]) * lastgaelam
        reversed_advantages.append(lastgaelam)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    returns = advantages + values
    return masked_whiten(advantages, response_mask), returns


@pytest.mark.skipif(not hasattr(tirl_verl._abi.lib, "tirl_advantages"), reason="the library has no tirl_advantages")
def test_other_advantage_estimators():
    g = torch.Generator().manual_seed(8)
    b, t = 6, 7
    mask = (torch.rand(b, t, generator=g) > 0.2).double()
    mask[:, 0] = 1
    rewards = torch.zeros(b, t, dtype=torch.float64)
    rewards[torch.arange(b), torch.randint(0, t, (b,), generator=g)] = torch.rand(b, generator=g,
                                                                                  dtype=torch.float64)
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    index = ["p", "q", "p", "q", "r", "p"]
    close = dict(rtol=1e-5, atol=1e-5)

    ours, _ = tirl_verl.get_adv_estimator_fn("tirl_rloo")(rewards.float(), mask, index)
    torch.testing.assert_close(ours.double(), verl_rloo(rewards, mask, index)[0], **close)

    ours, ours_returns = tirl_verl.get_adv_estimator_fn("reinforce_plus_plus")(rewards.float(), mask,
                                                                                config={"gamma": 0.9})
    theirs, returns = verl_reinforce_plus_plus(rewards, mask, 0.9)
    torch.testing.assert_close(ours.double(), theirs, **close)
    torch.testing.assert_close(ours_returns.double(), returns, **close)

    ours, ours_returns = tirl_verl.compute_gae_advantage_return(rewards.float(), values.float(), mask, 0.95, 0.9)
    theirs, returns = verl_gae(rewards, values, mask, 0.95, 0.9)
    on = mask > 0
    torch.testing.assert_close(ours.double()[on], theirs[on], **close)
    torch.testing.assert_close(ours_returns.double()[on], returns[on], **close)
