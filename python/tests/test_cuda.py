"""Every op on CUDA tensors (PyTorch's current stream) against the same op on the CPU.
Skipped, with the reason, where PyTorch or libtirl has no usable GPU; run it on one."""

import contextlib

import pytest
import torch

import tirl

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not tirl.cuda_available(),
    reason=f"needs a GPU for PyTorch and libtirl (torch: {torch.cuda.is_available()}, "
           f"libtirl: {tirl.cuda_status() or 'available'})")

CLOSE = dict(rtol=1e-5, atol=1e-6)


def both(*tensors):
    return tensors, tuple(t.cuda() for t in tensors)


def test_ppo_loss_on_cuda_matches_cpu():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 33, generator=g) * 3
    logp = old + 0.3 * torch.randn(8, 33, generator=g)
    adv, ref, weights = torch.randn(8, 33, generator=g), old + 0.1, torch.rand(8, 33, generator=g)
    mask = torch.rand(8, 33, generator=g) > 0.2
    results = []
    for device in ("cpu", "cuda"):
        leaf = logp.detach().clone().to(device).requires_grad_()
        stream = torch.cuda.Stream() if device == "cuda" else None
        # A side stream on CUDA: the kernels must queue on PyTorch's current stream.
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            loss, stats = tirl.ppo_loss(leaf, old.to(device), adv.to(device), mask.to(device),
                                        aggregation="seq-mean-token-mean", ref_logp=ref.to(device), kl_coef=0.1,
                                        weights=weights.to(device), dual_clip=3.0)
            loss.backward()
        if stream is not None:
            stream.synchronize()
        results.append((loss.cpu(), leaf.grad.cpu(), stats))
    torch.testing.assert_close(results[1][0], results[0][0], **CLOSE)
    torch.testing.assert_close(results[1][1], results[0][1], **CLOSE)
    assert results[1][2].masked_tokens == results[0][2].masked_tokens


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_logprobs_on_cuda_matches_cpu(dtype):
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(4, 9, 301, generator=g) * 2).to(dtype)
    labels = torch.randint(0, 301, (4, 9), generator=g)
    out = []
    for device in ("cpu", "cuda"):
        leaf = logits.detach().clone().to(device).requires_grad_()
        logp, entropy = tirl.token_logprobs(leaf, labels.to(device), temperature=0.8, with_entropy=True)
        (logp.sum() + entropy.sum()).backward()
        out.append((logp.cpu(), entropy.cpu(), leaf.grad.float().cpu()))
    for cpu, cuda in zip(*out):
        torch.testing.assert_close(cuda, cpu, rtol=1e-4, atol=1e-4 if dtype == torch.float32 else 1e-2)


def test_small_ops_on_cuda_match_cpu():
    g = torch.Generator().manual_seed(2)
    rewards = torch.rand(12, generator=g)
    ids = torch.tensor([0, 1, 2] * 4)
    torch.testing.assert_close(tirl.group_advantages(rewards.cuda(), group_ids=ids.cuda()).cpu(),
                               tirl.group_advantages(rewards, group_ids=ids), **CLOSE)
    roles = torch.randint(0, 4, (3, 10), generator=g, dtype=torch.uint8)
    mask_cpu, counts_cpu = tirl.feedback_mask(roles)
    mask_gpu, counts_gpu = tirl.feedback_mask(roles.cuda())
    assert torch.equal(mask_gpu.cpu(), mask_cpu) and torch.equal(counts_gpu.cpu(), counts_cpu)
    logp = -torch.rand(3, 10, generator=g)
    leaf = logp.cuda().requires_grad_()
    tirl.sequence_logprobs(leaf, mask_gpu, average=True).sum().backward()
    torch.testing.assert_close(tirl.sequence_logprobs(logp, mask_cpu, average=True),
                               tirl.sequence_logprobs(logp.cuda(), mask_gpu, average=True).cpu(), **CLOSE)
    pairs = [torch.randn(6, generator=g) for _ in range(4)]
    loss_cpu, stats_cpu = tirl.dpo_loss(*pairs)
    loss_gpu, stats_gpu = tirl.dpo_loss(*(p.cuda() for p in pairs))
    torch.testing.assert_close(loss_gpu.cpu(), loss_cpu, **CLOSE)
    assert stats_gpu.reward_accuracy == stats_cpu.reward_accuracy
