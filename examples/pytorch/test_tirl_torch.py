"""Checks tirl_torch against PyTorch's own formulas, values and autograd gradients.

    python3 examples/pytorch/test_tirl_torch.py

Exits 77 (with the reason on stdout) when PyTorch or libtirl is missing, so that a
harness can report a skip rather than a failure.
"""

import math
import sys
import unittest

try:
    import torch
    import torch.nn.functional as F
except ImportError as error:
    print(f"SKIP: PyTorch is not installed ({error}); on Debian: apt-get install python3-torch")
    sys.exit(77)

try:
    import tirl_torch
except OSError as error:
    print(f"SKIP: {error}")
    sys.exit(77)


def reference_token_logprobs(logits, labels, temperature):
    log_softmax = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = log_softmax.gather(1, labels.long().unsqueeze(1)).squeeze(1)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return logp, entropy


def reference_ppo_loss(logp, old_logp, advantages, mask, clip_low, clip_high, dual_clip, ref_logp, kl_coef,
                       seq_offsets=None, aggregation="token-mean"):
    """verl's compute_policy_loss with a k3 KL, written with torch ops."""
    ratio = torch.exp(torch.clamp(logp - old_logp, -20, 20))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip), loss)
    diff = logp - ref_logp
    loss = loss + kl_coef * torch.clamp(torch.exp(-diff) + diff - 1, -10, 10)
    m = mask.float()
    if aggregation == "token-mean":
        return (loss * m).sum() / m.sum()
    per_sequence = []
    for start, end in zip(seq_offsets[:-1].tolist(), seq_offsets[1:].tolist()):
        count = m[start:end].sum()
        if count > 0:
            per_sequence.append((loss[start:end] * m[start:end]).sum() / count)
    return torch.stack(per_sequence).mean()


class TirlTorchTest(unittest.TestCase):
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tirl_torch.cuda_available() else [])

    def setUp(self):
        torch.manual_seed(0)

    def test_token_logprobs_f32(self):
        for device in self.devices:
            logits = (3 * torch.randn(37, 101, device=device)).requires_grad_()
            labels = torch.randint(0, 101, (37,), device=device)
            weights = torch.randn(37, device=device), torch.randn(37, device=device)
            logp, entropy = tirl_torch.token_logprobs(logits, labels, temperature=0.7, with_entropy=True)
            ((logp * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
            ours = logits.grad.clone()
            logits.grad = None
            ref_logp, ref_entropy = reference_token_logprobs(logits, labels, 0.7)
            ((ref_logp * weights[0]).sum() + (ref_entropy * weights[1]).sum()).backward()
            torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(entropy, ref_entropy, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(ours, logits.grad, rtol=1e-4, atol=1e-6)

    def test_token_logprobs_bf16_reads_bf16(self):
        logits = (3 * torch.randn(16, 50)).to(torch.bfloat16).requires_grad_()
        labels = torch.randint(0, 50, (16,), dtype=torch.int32)
        logp = tirl_torch.token_logprobs(logits, labels)
        logp.sum().backward()
        self.assertEqual(logits.grad.dtype, torch.bfloat16)
        ours = logits.grad.float()
        logits.grad = None
        ref_logp, _ = reference_token_logprobs(logits, labels, 1.0)
        ref_logp.sum().backward()
        torch.testing.assert_close(logp, ref_logp, rtol=2e-2, atol=1e-3)
        torch.testing.assert_close(ours, logits.grad.float(), rtol=2e-2, atol=1e-2)

    def test_ppo_loss_matches_verl_formula(self):
        for device in self.devices:
            for aggregation in ("token-mean", "seq-mean-token-mean"):
                n = 64
                seq_offsets = torch.tensor([0, 10, 10, 31, 64], dtype=torch.int32, device=device)
                logp = (-torch.rand(n, device=device) * 3).requires_grad_()
                old_logp = (logp + 0.4 * (torch.rand(n, device=device) - 0.5)).detach()
                ref_logp = (logp + 0.3 * (torch.rand(n, device=device) - 0.5)).detach()
                advantages = torch.randn(n, device=device)
                mask = torch.rand(n, device=device) < 0.8
                options = dict(clip_low=0.2, clip_high=0.28, dual_clip=3.0, kl_coef=0.05)
                loss, stats = tirl_torch.ppo_loss(logp, old_logp, advantages, mask, seq_offsets, ref_logp,
                                                  aggregation=aggregation, kl_estimator="k3", **options)
                loss.backward()
                ours = logp.grad.clone()
                logp.grad = None
                expected = reference_ppo_loss(logp, old_logp, advantages, mask, options["clip_low"],
                                              options["clip_high"], options["dual_clip"], ref_logp,
                                              options["kl_coef"], seq_offsets, aggregation)
                expected.backward()
                torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(ours, logp.grad, rtol=1e-4, atol=1e-7)
                self.assertEqual(stats["masked_tokens"], int(mask.sum()))
                self.assertTrue(0 <= stats["clip_fraction"] <= 1)

    def test_dpo_loss_matches_logsigmoid(self):
        for device in self.devices:
            chosen = (-30 * torch.rand(8, device=device)).requires_grad_()
            rejected = (-30 * torch.rand(8, device=device)).requires_grad_()
            ref_chosen, ref_rejected = -30 * torch.rand(8, device=device), -30 * torch.rand(8, device=device)
            loss, stats = tirl_torch.dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.2,
                                              label_smoothing=0.1)
            loss.backward()
            ours = chosen.grad.clone(), rejected.grad.clone()
            chosen.grad = rejected.grad = None
            margin = 0.2 * ((chosen - ref_chosen) - (rejected - ref_rejected))
            expected = (-0.9 * F.logsigmoid(margin) - 0.1 * F.logsigmoid(-margin)).mean()
            expected.backward()
            torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(ours[0], chosen.grad, rtol=1e-4, atol=1e-7)
            torch.testing.assert_close(ours[1], rejected.grad, rtol=1e-4, atol=1e-7)
            torch.testing.assert_close(stats["chosen_rewards"], 0.2 * (chosen - ref_chosen).detach())

    def test_kernels_read_the_tensors_in_place(self):
        # A view into a larger buffer is read where it lies: change the buffer, the result follows.
        buffer = torch.randn(4, 10)
        logits = buffer[1:3]
        labels = torch.tensor([1, 2], dtype=torch.int32)
        before = tirl_torch.token_logprobs(logits, labels)
        buffer[1, 1] += 5.0
        after = tirl_torch.token_logprobs(logits, labels)
        self.assertGreater(after[0].item(), before[0].item())
        with self.assertRaisesRegex(ValueError, "contiguous"):
            tirl_torch.token_logprobs(buffer[:, ::2], torch.zeros(4, dtype=torch.int32))

    def test_errors_carry_the_library_message(self):
        with self.assertRaisesRegex(RuntimeError, "tirl token_logprobs failed"):
            tirl_torch.token_logprobs(torch.randn(2, 5), torch.tensor([0, 7], dtype=torch.int32))

    def test_cuda_tensors(self):
        if "cuda" not in self.devices:
            reason = "no CUDA device" if not torch.cuda.is_available() else "libtirl reports CUDA unavailable"
            self.skipTest(reason)
        logits = torch.randn(8, 32, device="cuda")
        logp = tirl_torch.token_logprobs(logits, torch.zeros(8, dtype=torch.int32, device="cuda"))
        self.assertEqual(logp.device.type, "cuda")
        self.assertTrue(math.isfinite(logp.sum().item()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
