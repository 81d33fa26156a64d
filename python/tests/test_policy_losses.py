"""ppo_loss's other policy losses (tirl_policy_loss) against verl's formulas, transcribed in
float64 from verl-project/verl at commit 1dda039b9c6311889a9c9a26040677e1254814f9
(verl/trainer/ppo/core_algos.py: compute_policy_loss_gpg, _sapo, _cispo, _dro), and the
vanilla/GSPO identity with tirl_ppo_loss. Skipped with a library that predates the op."""

import pytest
import torch

import tirl
from tirl import _abi

import reference

pytestmark = pytest.mark.skipif(not hasattr(_abi.lib, "tirl_policy_loss"),
                                reason=f"{_abi.library_path} has no tirl_policy_loss")


def batch(seed, b=4, t=7):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    logp = old + 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) > 0.25
    mask[1] = False
    weights = torch.rand(b, t, generator=g, dtype=torch.float64) + 0.5
    offsets = [i * t for i in range(b + 1)]
    return old, logp, adv, mask, weights, offsets


def verl_token_losses(kind, logp, old, adv, **o):
    if kind == "gpg":
        return -logp * adv
    if kind == "sapo":
        ratio = torch.exp(torch.clamp(logp - old, -20.0, 20.0))
        taus = torch.where(adv > 0, torch.full_like(adv, o["tau_pos"]), torch.full_like(adv, o["tau_neg"]))
        return -torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus) * adv
    if kind == "cispo":
        ratio = torch.exp(torch.clamp(logp - old, -20.0, 20.0))
        return -torch.clamp(ratio, 1 - o["clip_low"], 1 + o["clip_high"]).detach() * adv * logp
    if kind == "dro":
        return -(logp * adv - 0.5 * o["dro_beta"] * (logp - old).square())
    raise ValueError(kind)


CASES = [
    ("gpg", "token-mean", {}),
    ("gpg", "seq-mean-token-sum", {}),
    ("sapo", "seq-mean-token-mean", dict(tau_pos=1.0, tau_neg=1.05)),
    ("cispo", "token-mean", dict(clip_low=0.2, clip_high=0.28)),
    ("dro", "token-sum", dict(dro_beta=0.3)),
]


@pytest.mark.parametrize("kind,aggregation,options", CASES)
def test_policy_loss_matches_verl(kind, aggregation, options):
    old, logp, adv, mask, weights, offsets = batch(len(kind) + len(aggregation))
    leaf64 = logp.clone().requires_grad_()
    expected = reference.aggregate((verl_token_losses(kind, leaf64, old, adv, **options) * weights).reshape(-1),
                                   mask.reshape(-1).double(), offsets, aggregation)
    expected.backward()
    leaf = logp.float().requires_grad_()
    kwargs = dict(options)
    clip = dict(clip_low=kwargs.pop("clip_low", 0.2), clip_high=kwargs.pop("clip_high", None))
    loss, stats = tirl.ppo_loss(leaf, old.float(), adv.float(), mask, weights=weights.float(), aggregation=aggregation,
                                policy_loss=kind, **clip, **kwargs)
    loss.backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(leaf.grad.double(), leaf64.grad, rtol=1e-5, atol=1e-6)
    assert stats.masked_tokens == int(mask.sum())


@pytest.mark.parametrize("ratio_level,policy", [("token", "vanilla"), ("sequence", "gspo")])
def test_vanilla_and_gspo_equal_ppo_loss(ratio_level, policy):
    old, logp, adv, mask, weights, _ = batch(3)
    args = (logp.float(), old.float(), adv.float(), mask)
    base, base_stats = tirl.ppo_loss(*args, aggregation="seq-mean-token-mean", ratio_level=ratio_level,
                                     dual_clip=3.0 if policy == "vanilla" else None)
    again, stats = tirl.ppo_loss(*args, aggregation="seq-mean-token-mean", ratio_level=ratio_level,
                                 dual_clip=3.0 if policy == "vanilla" else None, policy_loss=policy,
                                 rollout_is_threshold=2.0)
    assert torch.equal(base, again) and base_stats.clip_fraction == stats.clip_fraction


def test_policy_options_are_checked():
    old, logp, adv, mask, *_ = batch(4)
    args = (logp.float(), old.float(), adv.float(), mask)
    with pytest.raises(ValueError, match="policy_loss"):
        tirl.ppo_loss(*args, policy_loss="ppo2")
    with pytest.raises(TypeError, match="tau_pos"):
        tirl.ppo_loss(*args, policy_loss="sapo", tau_pos="1")
    with pytest.raises(TypeError, match="unexpected keyword argument 'tau'"):
        tirl.ppo_loss(*args, policy_loss="sapo", tau=1.0)
    with pytest.raises(ValueError, match="(?i)dro"):
        tirl.ppo_loss(*args, policy_loss="dro")
