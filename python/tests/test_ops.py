"""Each op against the float64 references in reference.py (values and autograd gradients),
in both layouts, plus the argument checks."""

import itertools
import math

import pytest
import torch

import tirl
import reference

AGGREGATIONS = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                "seq-mean-token-sum-norm"]


def ragged_batch(lengths, seed, *, masked_out=(), spread=0.3):
    """Flat float32 inputs for sequences of the given lengths; sequences in ``masked_out``
    have no masked-in token."""
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    old = -torch.rand(n, generator=g) * 3
    logp = old + spread * torch.randn(n, generator=g)
    adv = torch.randn(n, generator=g)
    mask = torch.rand(n, generator=g) > 0.25
    for i in masked_out:
        mask[offsets[i]:offsets[i + 1]] = False
    ref = old + 0.2 * torch.randn(n, generator=g)
    weights = torch.rand(n, generator=g) * 2
    return dict(logp=logp, old=old, adv=adv, mask=mask, ref=ref, weights=weights, offsets=offsets)


def check_ppo(batch, padded_shape=None, **options):
    offsets = batch["offsets"]
    logp64 = batch["logp"].double().requires_grad_()
    ref_args = dict(options)
    with_ref = ref_args.pop("with_ref", False)
    with_weights = ref_args.pop("with_weights", False)
    expected, pg, kl, stats = reference.ppo_loss(
        logp64, batch["old"].double(), batch["adv"].double(), batch["mask"], offsets,
        ref_logp=batch["ref"].double() if with_ref else None,
        weights=batch["weights"].double() if with_weights else None, **ref_args)
    expected.backward()

    def shaped(t):
        return t.view(padded_shape) if padded_shape else t

    logp = shaped(batch["logp"].clone()).requires_grad_()
    kwargs = dict(ref_args)
    if not padded_shape:
        kwargs["cu_seqlens"] = torch.tensor(offsets, dtype=torch.int32)
    if with_ref:
        kwargs["ref_logp"] = shaped(batch["ref"])
    if with_weights:
        kwargs["weights"] = shaped(batch["weights"])
    loss, got = tirl.ppo_loss(logp, shaped(batch["old"]), shaped(batch["adv"]), shaped(batch["mask"]),
                              **kwargs)
    (loss * 3).backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.pg_loss, float(pg), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.kl_loss, float(kl), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logp.grad.reshape(-1).double(), 3 * logp64.grad, rtol=1e-5, atol=1e-6)
    assert got.masked_tokens == stats["masked_tokens"]
    assert got.non_finite == 0
    torch.testing.assert_close(got.clip_fraction, stats["clip_fraction"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got.clip_fraction_lower, stats["clip_fraction_lower"], rtol=1e-6, atol=1e-7)
    if options.get("ratio_level", "token") == "token":
        torch.testing.assert_close(got.approx_kl, stats["approx_kl"], rtol=1e-5, atol=1e-6)
    return got


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_ppo_loss_aggregations(aggregation, layout):
    if layout == "padded":
        batch = ragged_batch([7] * 5, seed=1, masked_out=[2])
        check_ppo(batch, (5, 7), aggregation=aggregation)
    else:
        batch = ragged_batch([3, 9, 1, 6, 4], seed=2, masked_out=[3])
        check_ppo(batch, aggregation=aggregation)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_ppo_loss_kl_estimators_with_weights_and_dual_clip(estimator):
    batch = ragged_batch([5, 8, 2, 6], seed=3, spread=0.6)
    got = check_ppo(batch, aggregation="seq-mean-token-mean", with_ref=True, kl_coef=0.05,
                    kl_estimator=estimator, with_weights=True, dual_clip=3.0, clip_low=0.1, clip_high=0.28)
    assert got.clip_fraction > 0


def test_ppo_loss_dual_clip_is_active():
    batch = ragged_batch([20, 20], seed=4, spread=2.0)
    got = check_ppo(batch, dual_clip=1.5)
    assert got.clip_fraction_lower > 0


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_ppo_loss_normalisers_and_dp_size(aggregation):
    batch = ragged_batch([4, 6, 5], seed=5)
    check_ppo(batch, aggregation=aggregation, token_normalizer=37.0, seq_normalizer=7.0, horizon=12.0,
              dp_size=4.0)


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "token-mean"])
def test_ppo_loss_gspo(aggregation):
    batch = ragged_batch([6, 3, 8, 5], seed=6, masked_out=[1])
    check_ppo(batch, aggregation=aggregation, ratio_level="sequence", clip_low=3e-4, clip_high=4e-4)
    check_ppo(batch, aggregation=aggregation, ratio_level="sequence", with_ref=True, kl_coef=0.1,
              with_weights=True)


def test_ppo_loss_fully_masked_gives_zero():
    batch = ragged_batch([4, 4], seed=7, masked_out=[0, 1])
    got = check_ppo(batch, (2, 4))
    assert got.loss == 0 and got.masked_tokens == 0


@pytest.mark.parametrize("policy_loss", ["vanilla", "cispo"])
def test_ppo_loss_without_a_gradient_gives_the_same_loss_and_stats(policy_loss):
    # Where no gradient can flow (no requires_grad, or torch.no_grad()) the loss skips the
    # autograd node: the same value and statistics, and a tensor with no grad_fn.
    batch = ragged_batch([5, 3], seed=11)
    args = (batch["old"], batch["adv"], batch["mask"])
    kwargs = dict(cu_seqlens=torch.tensor(batch["offsets"], dtype=torch.int32), policy_loss=policy_loss)
    with_grad, stats = tirl.ppo_loss(batch["logp"].clone().requires_grad_(), *args, **kwargs)
    assert with_grad.grad_fn is not None
    plain, plain_stats = tirl.ppo_loss(batch["logp"], *args, **kwargs)
    with torch.no_grad():
        no_grad, no_grad_stats = tirl.ppo_loss(batch["logp"].clone().requires_grad_(), *args, **kwargs)
    for loss, got in ((plain, plain_stats), (no_grad, no_grad_stats)):
        assert loss.grad_fn is None and not loss.requires_grad
        assert loss.dtype == torch.float32 and loss.dim() == 0
        assert loss.item() == with_grad.item()
        assert got == stats and hash(got) == hash(stats) and repr(got) == repr(stats)
    assert stats == tirl.PpoStats(**{name: getattr(stats, name) for name in stats.__dataclass_fields__})
    with pytest.raises(AttributeError):
        stats.loss = 0.0  # still frozen


def test_ppo_loss_non_finite_masked_out_and_counted():
    logp = torch.tensor([[-1.0, float("nan"), -0.5]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.0, float("inf")]])
    adv = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, False, True]])
    loss, stats = tirl.ppo_loss(logp, old, adv, mask)
    loss.backward()
    assert stats.non_finite == 1
    assert logp.grad[0, 1] == 0


def test_ppo_loss_non_contiguous_inputs():
    batch = ragged_batch([6] * 4, seed=8)
    columns = {k: batch[k].view(6, 4).t() for k in ("logp", "old", "adv", "mask")}
    logp = columns["logp"].clone().requires_grad_()
    loss, _ = tirl.ppo_loss(logp, columns["old"], columns["adv"], columns["mask"],
                            aggregation="seq-mean-token-mean")
    loss.backward()
    dense = {k: v.contiguous() for k, v in columns.items()}
    logp2 = dense["logp"].clone().requires_grad_()
    loss2, _ = tirl.ppo_loss(logp2, dense["old"], dense["adv"], dense["mask"], aggregation="seq-mean-token-mean")
    loss2.backward()
    assert torch.equal(loss, loss2) and torch.equal(logp.grad, logp2.grad)


def test_ppo_loss_accepts_int64_and_float_masks():
    batch = ragged_batch([5] * 3, seed=9)
    shaped = {k: batch[k].view(3, 5) for k in ("logp", "old", "adv", "mask")}
    base, _ = tirl.ppo_loss(shaped["logp"], shaped["old"], shaped["adv"], shaped["mask"])
    for dtype in (torch.int64, torch.float32, torch.uint8):
        loss, _ = tirl.ppo_loss(shaped["logp"], shaped["old"], shaped["adv"], shaped["mask"].to(dtype))
        assert torch.equal(loss, base)


def test_ppo_loss_errors_name_the_argument():
    x = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match="logp"):
        tirl.ppo_loss(x.double(), x, x, mask)
    with pytest.raises(TypeError, match="old_logp"):
        tirl.ppo_loss(x, [0.0], x, mask)
    with pytest.raises(ValueError, match="advantages"):
        tirl.ppo_loss(x, x, torch.zeros(3, 2), mask)
    with pytest.raises(ValueError, match="mask"):
        tirl.ppo_loss(x, x, x, torch.ones(6, dtype=torch.bool))
    with pytest.raises(ValueError, match="aggregation"):
        tirl.ppo_loss(x, x, x, mask, aggregation="mean")
    with pytest.raises(ValueError, match="clip"):
        tirl.ppo_loss(x, x, x, mask, clip_low=float("nan"))
    with pytest.raises(ValueError, match="clip"):
        tirl.ppo_loss(x, x, x, mask, clip_low=1.5)
    with pytest.raises(TypeError, match="kl_coef"):
        tirl.ppo_loss(x, x, x, mask, kl_coef="0.1")
    with pytest.raises(ValueError, match="(?i)ref"):
        tirl.ppo_loss(x, x, x, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="(?i)seq"):
        tirl.ppo_loss(x.view(-1), x.view(-1), x.view(-1), mask.view(-1), aggregation="seq-mean-token-mean")
    with pytest.raises(ValueError, match="cu_seqlens"):
        tirl.ppo_loss(x, x, x, mask, cu_seqlens=torch.tensor([0, 6]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_token_logprobs_and_entropy_with_backward(dtype, temperature):
    g = torch.Generator().manual_seed(10)
    logits = (torch.randn(3, 4, 37, generator=g) * 3).to(dtype)
    labels = torch.randint(0, 37, (3, 4), generator=g)
    grad_logp = torch.randn(3, 4, generator=g)
    grad_entropy = torch.randn(3, 4, generator=g)

    leaf = logits.clone().requires_grad_()
    logp, entropy = tirl.token_logprobs(leaf, labels, temperature=temperature, with_entropy=True)
    (logp * grad_logp + entropy * grad_entropy).sum().backward()

    leaf64 = logits.double().requires_grad_()
    logp64, entropy64 = reference.token_logprobs(leaf64, labels, temperature)
    (logp64 * grad_logp.double() + entropy64 * grad_entropy.double()).sum().backward()

    torch.testing.assert_close(logp.double(), logp64.detach(), rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(entropy.double(), entropy64.detach(), rtol=1e-5, atol=2e-5)
    assert leaf.grad.dtype == dtype
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(leaf.grad.double(), leaf64.grad, **tolerance)

    only_logp = logits.clone().requires_grad_()
    tirl.token_logprobs(only_logp, labels.to(torch.int32), temperature=temperature).sum().backward()
    leaf64.grad = None
    reference.token_logprobs(leaf64, labels, temperature)[0].sum().backward()
    torch.testing.assert_close(only_logp.grad.double(), leaf64.grad, **tolerance)


@pytest.mark.parametrize("with_entropy", [False, True])
def test_token_logprobs_without_a_gradient_gives_the_same_values(with_entropy):
    # Where no gradient can flow into the logits the call skips the autograd node.
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, 7, generator=g)
    labels = torch.randint(0, 7, (3, 4), generator=g)
    with_grad = tirl.token_logprobs(logits.clone().requires_grad_(), labels, with_entropy=with_entropy)
    plain = tirl.token_logprobs(logits, labels, with_entropy=with_entropy)
    with torch.no_grad():
        no_grad = tirl.token_logprobs(logits.clone().requires_grad_(), labels, with_entropy=with_entropy)
    for got in (plain, no_grad):
        for a, b in zip(got if with_entropy else (got,), with_grad if with_entropy else (with_grad,)):
            assert a.grad_fn is None and b.grad_fn is not None
            assert a.shape == labels.shape and torch.equal(a, b.detach())


def test_token_logprobs_errors():
    logits = torch.zeros(2, 5)
    with pytest.raises(TypeError, match="logits"):
        tirl.token_logprobs(logits.half(), torch.zeros(2, dtype=torch.long))
    with pytest.raises(TypeError, match="labels"):
        tirl.token_logprobs(logits, torch.zeros(2))
    with pytest.raises(ValueError, match="labels"):
        tirl.token_logprobs(logits, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="(?i)label"):
        tirl.token_logprobs(logits, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="(?i)temperature"):
        tirl.token_logprobs(logits, torch.tensor([0, 1]), temperature=0.0)


def test_group_advantages():
    rewards = torch.tensor([1.0, 0.0, 3.0, 2.0, 2.0, 5.0, 0.5, 7.0])
    ids = [4, 9, 4, 9, 9, -2, 7, 7]
    for scale in (True, False):
        got = tirl.group_advantages(rewards, group_ids=torch.tensor(ids), scale_by_std=scale, epsilon=1e-4)
        expected = reference.group_advantages(rewards.double(), ids, scale, 1e-4)
        torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-6)
    contiguous = tirl.group_advantages(rewards, group_size=4)
    torch.testing.assert_close(contiguous.double(),
                               reference.group_advantages(rewards.double(), [0] * 4 + [1] * 4), rtol=1e-6, atol=1e-6)
    same = tirl.group_advantages(torch.full((4,), 2.0), group_size=2)
    assert torch.equal(same, torch.zeros(4))
    with pytest.raises(TypeError, match="group_ids"):
        tirl.group_advantages(rewards)
    with pytest.raises(ValueError, match="(?i)group_size|groupSize|divide"):
        tirl.group_advantages(rewards, group_size=3)


@pytest.mark.parametrize("variant,label_smoothing", [("sigmoid", 0.0), ("sigmoid", 0.1), ("hinge", 0.0),
                                                     ("ipo", 0.0), ("robust", 0.2)])
def test_dpo_loss(variant, label_smoothing):
    g = torch.Generator().manual_seed(11)
    pc, pr, rc, rr = (torch.randn(9, generator=g) * 4 for _ in range(4))
    leaf_c, leaf_r = pc.clone().requires_grad_(), pr.clone().requires_grad_()
    loss, stats = tirl.dpo_loss(leaf_c, leaf_r, rc, rr, beta=0.3, label_smoothing=label_smoothing,
                                variant=variant)
    loss.backward()
    c64, r64 = pc.double().requires_grad_(), pr.double().requires_grad_()
    expected, chosen, rejected, accuracy = reference.dpo_loss(c64, r64, rc.double(), rr.double(), 0.3,
                                                               label_smoothing, variant)
    expected.backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(leaf_c.grad.double(), c64.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(leaf_r.grad.double(), r64.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats.chosen_rewards.double(), chosen.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats.rejected_rewards.double(), rejected.detach(), rtol=1e-5, atol=1e-6)
    assert stats.reward_accuracy == pytest.approx(accuracy)
    with pytest.raises(ValueError, match="variant"):
        tirl.dpo_loss(pc, pr, rc, rr, variant="kto")
    with pytest.raises(ValueError, match="ref_rejected"):
        tirl.dpo_loss(pc, pr, rc, rr[:3])


def test_feedback_mask_both_layouts():
    roles = torch.tensor([[0, 1, 1, 2, 1, 3], [0, 0, 2, 1, 3, 3], [1, 1, 1, 1, 1, 1]], dtype=torch.uint8)
    keep = torch.tensor([True, True, False])
    mask, counts = tirl.feedback_mask(roles, keep=keep)
    expected = (roles == tirl.ACTION) & keep[:, None]
    assert mask.dtype == torch.bool and torch.equal(mask, expected)
    assert counts.tolist() == [3, 1, 0]
    flat = torch.tensor([0, 1, 2, 1, 1, 0, 3], dtype=torch.uint8)
    mask, counts = tirl.feedback_mask(flat, cu_seqlens=torch.tensor([0, 4, 4, 7]))
    assert mask.tolist() == [False, True, False, True, True, False, False] and counts.tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="(?i)role"):
        tirl.feedback_mask(torch.tensor([[0, 4]], dtype=torch.uint8))
    with pytest.raises(TypeError, match="roles"):
        tirl.feedback_mask(torch.tensor([[0, 1]]))


@pytest.mark.parametrize("average", [False, True])
def test_sequence_logprobs(average):
    batch = ragged_batch([4, 0, 7, 3], seed=12, masked_out=[3])
    offsets = batch["offsets"]
    leaf = batch["logp"].clone().requires_grad_()
    out = tirl.sequence_logprobs(leaf, batch["mask"], cu_seqlens=torch.tensor(offsets), average=average)
    weights = torch.arange(1.0, 5.0)
    (out * weights).sum().backward()
    leaf64 = batch["logp"].double().requires_grad_()
    m = batch["mask"].double()
    expected = []
    for start, end in reference.segments(offsets):
        total = (leaf64[start:end] * m[start:end]).sum()
        count = float(m[start:end].sum())
        expected.append(total / count if average and count else (total if not average else total * 0))
    expected = torch.stack(expected)
    (expected * weights.double()).sum().backward()
    torch.testing.assert_close(out.double(), expected.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(leaf.grad.double(), leaf64.grad, rtol=1e-6, atol=1e-6)
    padded = tirl.sequence_logprobs(batch["logp"][:12].view(3, 4), batch["mask"][:12].view(3, 4), average=average)
    assert padded.shape == (3,)


def test_library_info():
    assert tirl.version() == "0.1.0"
    assert tirl.num_threads() >= 1
    assert isinstance(tirl.cuda_available(), bool)
    threads = tirl.num_threads()
    tirl.set_num_threads(1)
    batch = ragged_batch([50] * 40, seed=13)
    one, _ = tirl.ppo_loss(batch["logp"], batch["old"], batch["adv"], batch["mask"])
    tirl.set_num_threads(2)
    two, _ = tirl.ppo_loss(batch["logp"], batch["old"], batch["adv"], batch["mask"])
    tirl.set_num_threads(threads)
    assert torch.equal(one, two)
    with pytest.raises(ValueError):
        tirl.set_num_threads(0)


def test_rollout_correction_hand_example_and_layouts():
    # d = logp - rollout_logp = [0, ln 3, -ln 2]: weights [1, 3 -> 2, 1/2]; token_k1 with the
    # ratio bound 2.5 rejects the token whose rollout/trainer ratio is 1/3 (verl's convention).
    logp = torch.tensor([-1.0, -1.0, -1.0])
    rollout = torch.tensor([-1.0, -1.0 - math.log(3), -1.0 + math.log(2)])
    mask = torch.ones(3, dtype=torch.bool)
    weights, kept, metrics = tirl.rollout_correction(
        logp, rollout, mask, cu_seqlens=torch.tensor([0, 3], dtype=torch.int32), rollout_is="token",
        rollout_rs="token_k1", rollout_rs_threshold=2.5)
    assert torch.allclose(weights, torch.tensor([1.0, 2.0, 0.5]))
    assert kept.tolist() == [True, False, True]
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["rollout_is_mean"] == pytest.approx(3.5 / 3, rel=1e-6)
    assert metrics["kl"] == pytest.approx((math.log(2) - math.log(3)) / 3, rel=1e-6)
    # Padded [B, T] equals packed with cu_seqlens.
    g = torch.Generator().manual_seed(4)
    lp = -torch.rand(4, 16, generator=g) * 3
    rlp = lp + 0.2 * torch.randn(4, 16, generator=g)
    m = torch.rand(4, 16, generator=g) > 0.2
    options = dict(rollout_is="sequence", rollout_rs=["seq_mean_k3"], rollout_rs_threshold=0.02)
    padded = tirl.rollout_correction(lp, rlp, m, **options)
    packed = tirl.rollout_correction(lp.reshape(-1), rlp.reshape(-1), m.reshape(-1),
                                     cu_seqlens=torch.arange(0, 65, 16, dtype=torch.int32), **options)
    assert torch.equal(padded[0].reshape(-1), packed[0]) and torch.equal(padded[1].reshape(-1), packed[1])
    assert padded[2] == packed[2]


def test_rollout_correction_errors_name_the_argument():
    x = torch.zeros(4)
    mask = torch.ones(4, dtype=torch.bool)
    offsets = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="rollout_is"):
        tirl.rollout_correction(x, x, mask, cu_seqlens=offsets, rollout_is="geo")
    with pytest.raises(ValueError, match="rollout_rs\\[0\\]"):
        tirl.rollout_correction(x, x, mask, cu_seqlens=offsets, rollout_rs="token_k4", rollout_rs_threshold=1.0)
    with pytest.raises(ValueError, match="rollout_rs_threshold\\[TIRL_ROLLOUT_RS_SEQ_MEAN_K2\\]"):
        tirl.rollout_correction(x, x, mask, cu_seqlens=offsets, rollout_rs="seq_mean_k2")
    with pytest.raises(ValueError, match="rollout_is_threshold"):
        tirl.rollout_correction(x, x, mask, cu_seqlens=offsets, rollout_is_threshold=-1.0)
    with pytest.raises(ValueError, match="rollout_logp"):
        tirl.rollout_correction(x, torch.zeros(3), mask, cu_seqlens=offsets)


def test_unsupported_device_is_a_value_error():
    meta = torch.empty(2, 3, device="meta")
    with pytest.raises(ValueError, match="logp"):
        tirl.ppo_loss(meta, meta, meta, torch.ones(2, 3, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="old_logp"):
        tirl.ppo_loss(torch.zeros(2, 3), meta, meta, torch.ones(2, 3, dtype=torch.bool))
