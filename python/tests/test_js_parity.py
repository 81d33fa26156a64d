"""The package and the JavaScript API run the same kernels: on the same inputs their
outputs are bitwise equal. Runs node on this checkout's dist/ (built by `npm run build`)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import tirl

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (ROOT / "dist" / "lib" / "index.js").is_file(),
    reason="needs node and this checkout's dist/ (npm run build)")


def f32(t):
    return {"f32": [float(x) for x in t.reshape(-1).tolist()]}


def u8(t):
    return {"u8": [int(x) for x in t.reshape(-1).to(torch.uint8).tolist()]}


def i32(t):
    return {"i32": [int(x) for x in t.reshape(-1).tolist()]}


def as_f32(values):
    return torch.tensor(values, dtype=torch.float32)


def run_node(cases, tmp_path):
    source, target = tmp_path / "cases.json", tmp_path / "results.json"
    source.write_text(json.dumps(cases))
    subprocess.run(["node", str(Path(__file__).with_name("js_parity.mjs")), str(source), str(target)],
                   check=True, cwd=ROOT, timeout=60)
    return json.loads(target.read_text())


def test_every_op_bitwise_equal_to_the_js_api(tmp_path):
    g = torch.Generator().manual_seed(21)
    lengths = [5, 9, 1, 7]
    offsets = torch.tensor([0, 5, 14, 15, 22], dtype=torch.int32)
    n = 22
    old = -torch.rand(n, generator=g) * 3
    logp = old + 0.4 * torch.randn(n, generator=g)
    adv = torch.randn(n, generator=g)
    mask = torch.rand(n, generator=g) > 0.3
    ref = old + 0.2 * torch.randn(n, generator=g)
    weights = torch.rand(n, generator=g)
    logits = torch.randn(6, 33, generator=g) * 2
    labels = torch.randint(0, 33, (6,), generator=g, dtype=torch.int32)
    rewards = torch.randn(8, generator=g)
    group_ids = torch.tensor([3, 1, 3, 1, 1, 0, 3, 2], dtype=torch.int32)
    pairs = [torch.randn(5, generator=g) * 3 for _ in range(4)]
    roles = torch.randint(0, 4, (n,), generator=g, dtype=torch.uint8)

    ppo_variants = [
        dict(aggregation="token-mean"),
        dict(aggregation="seq-mean-token-sum-norm", clip_low=0.1, clip_high=0.3, dual_clip=2.5),
        dict(aggregation="seq-mean-token-mean", ratio_level="sequence", with_kl="k3"),
        dict(aggregation="seq-mean-token-sum", token_normalizer=40.0, seq_normalizer=3.0, dp_size=2.0,
             with_kl="k2", with_weights=True),
    ]
    cases, expected = [], []
    for variant in ppo_variants:
        variant = dict(variant)
        kl = variant.pop("with_kl", None)
        with_weights = variant.pop("with_weights", False)
        js = dict(logp=f32(logp), oldLogp=f32(old), advantages=f32(adv), mask=u8(mask), seqOffsets=i32(offsets),
                  aggregation=variant["aggregation"])
        names = dict(clip_low="clipLow", clip_high="clipHigh", dual_clip="dualClip", ratio_level="ratioLevel",
                     token_normalizer="tokenNormalizer", seq_normalizer="seqNormalizer", dp_size="dpSize")
        for key, js_key in names.items():
            if key in variant:
                js[js_key] = variant[key]
        if kl:
            js.update(refLogp=f32(ref), klCoef=0.05, klEstimator=kl)
            variant.update(ref_logp=ref, kl_coef=0.05, kl_estimator=kl)
        if with_weights:
            js["weights"] = f32(weights)
            variant["weights"] = weights
        cases.append({"op": "ppoLoss", "options": js})
        leaf = logp.clone().requires_grad_()
        loss, stats = tirl.ppo_loss(leaf, old, adv, mask, cu_seqlens=offsets, **variant)
        loss.backward()
        expected.append(("ppoLoss", loss, stats, leaf.grad))

    cases.append({"op": "tokenLogprobs", "options": dict(logits=f32(logits), vocabSize=33, labels=i32(labels),
                                                         temperature=0.7, withEntropy=True)})
    grad_logp, grad_entropy = torch.randn(6, generator=g), torch.randn(6, generator=g)
    cases.append({"op": "tokenLogprobsBackward", "options": dict(
        logits=f32(logits), vocabSize=33, labels=i32(labels), temperature=0.7, gradLogp=f32(grad_logp),
        gradEntropy=f32(grad_entropy))})
    bf16 = logits.to(torch.bfloat16)
    cases.append({"op": "tokenLogprobs", "options": dict(
        logits={"u16": bf16.view(torch.int16).to(torch.int32).bitwise_and(0xFFFF).reshape(-1).tolist()}, vocabSize=33,
        labels=i32(labels), dtype="bf16")})
    cases.append({"op": "groupAdvantages", "options": dict(rewards=f32(rewards), groupIds=i32(group_ids))})
    cases.append({"op": "groupAdvantages", "options": dict(rewards=f32(rewards), groupSize=4, scaleByStd=False)})
    for variant in ("sigmoid", "hinge", "ipo", "robust"):
        cases.append({"op": "dpoLoss", "options": dict(
            policyChosen=f32(pairs[0]), policyRejected=f32(pairs[1]), refChosen=f32(pairs[2]),
            refRejected=f32(pairs[3]), beta=0.2, labelSmoothing=0.1 if variant == "robust" else 0,
            variant=variant)})
    cases.append({"op": "feedbackMask", "options": dict(roles=u8(roles), seqOffsets=i32(offsets),
                                                        keep=u8(torch.tensor([1, 0, 1, 1])))})
    cases.append({"op": "sequenceLogprobs", "options": dict(logp=f32(logp), mask=u8(mask), seqOffsets=i32(offsets),
                                                            average=True)})
    rollout_logp = old + 0.3 * torch.randn(n, generator=g)
    rollout_variants = [
        dict(rollout_is="token", rollout_rs="token_k1,seq_mean_k3", rollout_rs_threshold=[1.5, 0.05]),
        dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_is_threshold_lower=0.2,
             rollout_is_batch_normalize=True, rollout_rs=["seq_max_k2", "seq_sum_k1"],
             rollout_rs_threshold=[0.5, 2.0], rollout_rs_threshold_lower=0.8),
    ]
    js_names = dict(rollout_is="rolloutIs", rollout_is_threshold="rolloutIsThreshold",
                    rollout_is_threshold_lower="rolloutIsThresholdLower",
                    rollout_is_batch_normalize="rolloutIsBatchNormalize", rollout_rs="rolloutRs",
                    rollout_rs_threshold="rolloutRsThreshold",
                    rollout_rs_threshold_lower="rolloutRsThresholdLower")
    for variant in rollout_variants:
        js = dict(logp=f32(old), rolloutLogp=f32(rollout_logp), mask=u8(mask), seqOffsets=i32(offsets))
        js.update({js_names[key]: value for key, value in variant.items()})
        cases.append({"op": "rolloutCorrection", "options": js})
    results = run_node(cases, tmp_path)
    rollout_results = results[len(results) - len(rollout_variants):]
    results = results[:len(results) - len(rollout_variants)]
    for variant, got in zip(rollout_variants, rollout_results):
        weights_t, kept, metrics = tirl.rollout_correction(old, rollout_logp, mask, cu_seqlens=offsets, **variant)
        assert torch.equal(as_f32(got["weights"]), weights_t)
        assert got["mask"] == kept.to(torch.uint8).tolist()
        assert got["nonFinite"] == metrics.pop("non_finite") and got["maskedTokens"] == metrics.pop("masked_tokens")
        assert got["stats"] == metrics

    for (op, loss, stats, grad), got in zip(expected, results):
        assert got["loss"] == stats.loss and float(loss) == float(torch.tensor(stats.loss, dtype=torch.float32))
        assert got["pgLoss"] == stats.pg_loss and got["clipFraction"] == stats.clip_fraction
        assert got["approxKl"] == stats.approx_kl and got["maskedTokens"] == stats.masked_tokens
        assert got.get("klLoss", 0.0) == stats.kl_loss
        assert torch.equal(as_f32(got["grad"]), grad)
    rest = results[len(expected):]

    leaf = logits.clone().requires_grad_()
    logp_t, entropy_t = tirl.token_logprobs(leaf, labels, temperature=0.7, with_entropy=True)
    assert torch.equal(as_f32(rest[0]["logp"]), logp_t.detach())
    assert torch.equal(as_f32(rest[0]["entropy"]), entropy_t.detach())
    (logp_t * grad_logp + entropy_t * grad_entropy).sum().backward()
    assert torch.equal(as_f32(rest[1]).view(6, 33), leaf.grad)
    assert torch.equal(as_f32(rest[2]["logp"]), tirl.token_logprobs(bf16, labels))
    assert torch.equal(as_f32(rest[3]), tirl.group_advantages(rewards, group_ids=group_ids))
    assert torch.equal(as_f32(rest[4]), tirl.group_advantages(rewards, group_size=4, scale_by_std=False))
    for got, variant in zip(rest[5:9], ("sigmoid", "hinge", "ipo", "robust")):
        chosen, rejected = pairs[0].clone().requires_grad_(), pairs[1].clone().requires_grad_()
        loss, stats = tirl.dpo_loss(chosen, rejected, pairs[2], pairs[3], beta=0.2,
                                    label_smoothing=0.1 if variant == "robust" else 0.0, variant=variant)
        loss.backward()
        assert got["loss"] == stats.loss and got["rewardAccuracy"] == stats.reward_accuracy
        assert torch.equal(as_f32(got["gradChosen"]), chosen.grad)
        assert torch.equal(as_f32(got["gradRejected"]), rejected.grad)
        assert torch.equal(as_f32(got["chosenRewards"]), stats.chosen_rewards)
    mask_t, counts = tirl.feedback_mask(roles, cu_seqlens=offsets, keep=torch.tensor([1, 0, 1, 1], dtype=torch.uint8))
    assert rest[9]["mask"] == mask_t.to(torch.uint8).tolist() and rest[9]["actionTokens"] == counts.tolist()
    assert torch.equal(as_f32(rest[10]), tirl.sequence_logprobs(logp, mask, cu_seqlens=offsets, average=True))
