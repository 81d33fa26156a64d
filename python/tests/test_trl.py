"""tirl.integrations.trl.grpo_loss against GRPOTrainer._compute_loss, transcribed below in
float64 from huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8
(trl/trainer/grpo_trainer.py; the loss, its normalisation per loss_type and the logged
clip/KL/entropy metrics). TRL itself is not installed."""

import pytest
import torch

from tirl.integrations import trl as tirl_trl


def trl_loss(per_token_logps, old_per_token_logps, advantages, mask, *, loss_type, epsilon_low, epsilon_high,
             delta=None, importance_sampling_level="token", beta=0.0, ref_per_token_logps=None,
             max_completion_length=None, num_items_in_batch=None, num_processes=1, gradient_accumulation_steps=1,
             importance_sampling_ratio=None, entropies=None, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05):
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = per_token_logps - old_per_token_logps
    if importance_sampling_level == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    if beta != 0.0:
        per_token_kl = torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
    if loss_type == "cispo":
        per_token_loss = -torch.clamp(coef_1, max=epsilon_high).detach() * advantages * per_token_logps
    elif loss_type == "sapo":
        temperatures = torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)
        per_token_loss = -torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures * advantages
    else:
        coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
        if delta is not None:
            coef_1 = torch.clamp(coef_1, max=delta)
        per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if importance_sampling_ratio is not None:
        per_token_loss = per_token_loss * importance_sampling_ratio
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    if loss_type in ("grpo", "sapo"):
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / gradient_accumulation_steps
    elif loss_type == "bnpo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0) / gradient_accumulation_steps
    elif loss_type == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)
        loss = loss / gradient_accumulation_steps
    elif loss_type in ("dapo", "cispo"):
        normalizer = torch.tensor(float(num_items_in_batch)).clamp(min=1.0) / num_processes
        loss = (per_token_loss * mask).sum() / normalizer
    elif loss_type == "luspo":
        loss = (per_token_loss * mask.sum(1, keepdim=True)).mean() / gradient_accumulation_steps

    def masked_seq_mean(x):
        return x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)

    def global_masked_mean(x):
        if x.shape[1] == 1:
            return (x.sum() / max(float(x.shape[0]), 1.0)).item()
        return ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()

    metrics = {}
    if beta != 0.0:
        metrics["kl"] = global_masked_mean(per_token_kl)
    if entropies is not None:
        metrics["entropy"] = global_masked_mean(entropies)
    if loss_type == "cispo":
        metrics["cispo_clip_ratio"] = global_masked_mean(((coef_1 > epsilon_high) & (advantages > 0)).double())
    if loss_type in ("cispo", "sapo"):
        return loss, metrics
    is_low = (coef_1 < 1 - epsilon_low) & (advantages < 0)
    is_high = (coef_1 > 1 + epsilon_high) & (advantages > 0)
    metrics["clip_ratio/low_mean"] = global_masked_mean(is_low.double())
    metrics["clip_ratio/high_mean"] = global_masked_mean(is_high.double())
    metrics["clip_ratio/region_mean"] = global_masked_mean((is_low | is_high).double())
    low_seq, high_seq = masked_seq_mean(is_low.double()), masked_seq_mean(is_high.double())
    metrics["clip_ratio/low_min"] = low_seq[~low_seq.isnan()].min().item()
    metrics["clip_ratio/high_max"] = high_seq[~high_seq.isnan()].max().item()
    return loss, metrics


def batch(seed, b=6, t=8):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    logp = old + 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) > 0.25).to(torch.int64)
    mask[4] = 0
    ref = logp + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    ratio = torch.rand(b, t, generator=g, dtype=torch.float64) + 0.5
    entropies = torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    return old, logp, adv, mask, ref, ratio, entropies


CASES = [
    dict(loss_type="grpo"),
    dict(loss_type="grpo", gradient_accumulation_steps=4, beta=0.04),
    dict(loss_type="bnpo", beta=0.1, with_ratio=True),
    dict(loss_type="dr_grpo", max_completion_length=16, gradient_accumulation_steps=2),
    dict(loss_type="dapo", num_items_in_batch=123, num_processes=4, delta=1.5),
    dict(loss_type="dapo", num_items_in_batch=37, beta=0.02, with_ratio=True, importance_sampling_level="sequence"),
    dict(loss_type="grpo", importance_sampling_level="sequence", epsilon_low=3e-4, epsilon_high=4e-4),
    dict(loss_type="bnpo", importance_sampling_level="sequence", beta=0.05),
    dict(loss_type="luspo", importance_sampling_level="sequence", gradient_accumulation_steps=2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_grpo_loss_matches_trl(case):
    case = dict(case)
    with_ratio = case.pop("with_ratio", False)
    case.setdefault("epsilon_low", 0.2)
    case.setdefault("epsilon_high", 0.28)
    old, logp, adv, mask, ref, ratio, entropies = batch(len(str(case)))
    if case.get("importance_sampling_level") == "sequence":
        ratio = ratio[:, :1]  # TRL's sequence-level importance weights: one per sequence
    if case.get("delta"):
        logp = old + 1.5 * (logp - old) * 3  # ratios past delta
    ours_logp = logp.float().requires_grad_()
    ref_logp = logp.clone().requires_grad_()
    expected, expected_metrics = trl_loss(ref_logp, old, adv, mask, ref_per_token_logps=ref,
                                          importance_sampling_ratio=ratio if with_ratio else None,
                                          entropies=entropies, **case)
    ours_case = dict(case)
    ours_case["epsilon"] = ours_case.pop("epsilon_low")
    loss, metrics = tirl_trl.grpo_loss(ours_logp, old.float(), adv.float(), mask,
                                       ref_per_token_logps=ref.float(),
                                       importance_sampling_ratio=ratio.float() if with_ratio else None,
                                       entropies=entropies.float(), **ours_case)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad.double(), ref_logp.grad, rtol=1e-5, atol=1e-7)
    assert metrics.keys() == expected_metrics.keys()
    for key, value in expected_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert ours_logp.grad.abs().max() > 0


def test_on_policy_default_and_unsupported():
    old, logp, adv, mask, *_ = batch(9)
    logp32 = logp.float()
    loss, metrics = tirl_trl.grpo_loss(logp32, None, adv.float(), mask, loss_type="bnpo")
    assert metrics["clip_ratio/region_mean"] == 0.0
    for loss_type in tirl_trl._NO_KERNEL:
        with pytest.raises(NotImplementedError, match=loss_type):
            tirl_trl.grpo_loss(logp32, None, adv.float(), mask, loss_type=loss_type)
    with pytest.raises(ValueError, match="loss_type"):
        tirl_trl.grpo_loss(logp32, None, adv.float(), mask, loss_type="ppo")
    with pytest.raises(TypeError, match="num_items_in_batch"):
        tirl_trl.grpo_loss(logp32, None, adv.float(), mask)
    with pytest.raises(ValueError, match="delta"):
        tirl_trl.grpo_loss(logp32, None, adv.float(), mask, loss_type="bnpo", delta=1.1, epsilon_high=0.28)
    with pytest.raises(NotImplementedError, match="importance_sampling_ratio"):
        tirl_trl.grpo_loss(logp32, None, adv.float(), mask, loss_type="bnpo", importance_sampling_level="sequence",
                           importance_sampling_ratio=torch.ones_like(logp32))
    with pytest.raises(TypeError, match="ref_per_token_logps"):
        tirl_trl.grpo_loss(logp32, None, adv.float(), mask, loss_type="bnpo", beta=0.1)


@pytest.mark.skipif(not hasattr(tirl_trl._abi.lib, "tirl_policy_loss"), reason="the library has no tirl_policy_loss")
@pytest.mark.parametrize("case", [dict(loss_type="cispo", epsilon_high=1.3, num_items_in_batch=70, num_processes=2),
                                  dict(loss_type="sapo", gradient_accumulation_steps=2, beta=0.05,
                                       sapo_temperature_pos=0.9, sapo_temperature_neg=1.2)],
                         ids=["cispo", "sapo"])
def test_cispo_and_sapo_match_trl(case):
    case = dict(case, epsilon_low=0.2)
    case.setdefault("epsilon_high", 0.28)
    old, logp, adv, mask, ref, ratio, entropies = batch(5)
    ours_logp = logp.float().requires_grad_()
    ref_logp = logp.clone().requires_grad_()
    expected, expected_metrics = trl_loss(ref_logp, old, adv, mask, ref_per_token_logps=ref, entropies=entropies,
                                          importance_sampling_ratio=ratio, **case)
    ours_case = dict(case)
    ours_case["epsilon"] = ours_case.pop("epsilon_low")
    loss, metrics = tirl_trl.grpo_loss(ours_logp, old.float(), adv.float(), mask, ref_per_token_logps=ref.float(),
                                       entropies=entropies.float(), importance_sampling_ratio=ratio.float(),
                                       **ours_case)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad.double(), ref_logp.grad, rtol=1e-5, atol=1e-7)
    assert metrics.keys() == expected_metrics.keys()
    for key, value in expected_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
