/**
 * The one TypeScript reference per op (test/reference/<op>.ts) holds, beside its float64
 * reference, the fused form that `tirl bench` times as its "TypeScript, 1 thread" peer.
 * Here each fused form is checked against the reference of its own module, on the options
 * the benchmark uses, so the benchmark's peer computes the math the tests check.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { dpoLossTs, finiteDifferenceGradient as dpoGradient, referenceLoss as dpoReference, referenceRewards } from './reference/dpo_loss.js';
import { groupAdvantagesTs, reference as groupReference } from './reference/group_advantages.js';
import { finiteDifferenceGradient as ppoGradient, ppoLossTs, reference as ppoReference } from './reference/ppo_loss.js';
import {
  reference as tokenReference,
  referenceGrad as tokenGradReference,
  toBf16,
  fromBf16,
  tokenLogprobsBackwardBf16Ts,
  tokenLogprobsBackwardTs,
  tokenLogprobsBf16Ts,
  tokenLogprobsTs,
} from './reference/token_logprobs.js';
import { Random } from './support.js';

function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    if (Number.isNaN(expected[i])) continue; // a kink of the finite-difference gradient
    const scale = Math.max(1, Math.abs(expected[i]));
    assert.ok(Math.abs(actual[i] - expected[i]) <= tolerance * scale, `${what}[${i}]: ${actual[i]} vs ${expected[i]}`);
  }
}

describe('the benchmark peers agree with the references', () => {
  it('groupAdvantages: contiguous groups, groups of one', () => {
    const random = new Random(3);
    for (const groupSize of [1, 2, 8]) {
      const rewards = Float32Array.from({ length: 64 }, () => (random.next() < 0.5 ? 1 : random.uniform(-1, 1)));
      const out = new Float32Array(rewards.length);
      groupAdvantagesTs(rewards, groupSize, 1e-6, out);
      const groupIds = Int32Array.from(rewards, (_, i) => Math.floor(i / groupSize));
      assertClose(out, groupReference(rewards, groupIds, true, 1e-6), 1e-5, `groupSize ${groupSize}`);
    }
  });

  it('dpoLoss: the sigmoid loss with label smoothing, its gradients and rewards', () => {
    const random = new Random(5);
    const n = 50;
    const p = {
      policyChosen: random.floats(n, -60, -10),
      policyRejected: random.floats(n, -60, -10),
      refChosen: random.floats(n, -60, -10),
      refRejected: random.floats(n, -60, -10),
    };
    for (const ls of [0, 0.1]) {
      const out = { gradChosen: new Float32Array(n), gradRejected: new Float32Array(n), chosen: new Float32Array(n), rejected: new Float32Array(n) };
      const r = dpoLossTs(p.policyChosen, p.policyRejected, p.refChosen, p.refRejected, 0.1, ls, out.gradChosen, out.gradRejected, out.chosen, out.rejected);
      assert.ok(Math.abs(r.loss - dpoReference(p, 0.1, ls, 'sigmoid')) < 1e-6);
      assertClose(out.gradChosen, dpoGradient(p, 'policyChosen', 0.1, ls, 'sigmoid'), 1e-5, 'gradChosen');
      assertClose(out.gradRejected, dpoGradient(p, 'policyRejected', 0.1, ls, 'sigmoid'), 1e-5, 'gradRejected');
      const rewards = referenceRewards(p, 0.1);
      assertClose(out.chosen, rewards.chosen, 1e-5, 'chosenRewards');
      assert.equal(r.rewardAccuracy, rewards.accuracy);
    }
  });

  it('ppoLoss: token-mean with dual clip and the k3 KL, its statistics and gradient', () => {
    const random = new Random(7);
    const n = 200;
    const logp = random.floats(n, -3, 0);
    const oldLogp = Float32Array.from(logp, (x) => x + random.uniform(-0.4, 0.4));
    const refLogp = Float32Array.from(logp, (x) => x + random.uniform(-0.5, 0.5));
    const advantages = random.normals(n);
    const mask = random.mask(n, 0.8);
    for (const kl of [false, true]) {
      const grad = new Float32Array(n);
      const r = ppoLossTs(logp, oldLogp, advantages, mask, kl ? refLogp : undefined, 0.2, 0.2, 3, kl ? 0.1 : 0, grad);
      const options = { logp, oldLogp, advantages, mask, clipLow: 0.2, dualClip: 3, ...(kl ? { refLogp, klCoef: 0.1 } : {}) };
      const expected = ppoReference(options);
      assert.ok(Math.abs(r.loss - expected.loss) < 1e-9, `loss ${r.loss} vs ${expected.loss}`);
      assert.ok(Math.abs(r.clipFraction - expected.clipFraction) < 1e-12);
      assert.ok(Math.abs(r.clipFractionLower - expected.clipFractionLower) < 1e-12);
      assert.ok(Math.abs(r.approxKl - expected.approxKl) < 1e-9);
      assertClose(grad, ppoGradient(options), 1e-4, 'grad');
    }
  });

  it('tokenLogprobs and its backward, f32 and bf16 logits', () => {
    const random = new Random(11);
    const rows = 6;
    const vocab = 37;
    const logits = random.floats(rows * vocab, -8, 8);
    const labels = Int32Array.from({ length: rows }, () => random.int(0, vocab));
    const gradLogp = random.normals(rows);
    for (const dtype of ['f32', 'bf16'] as const) {
      const bits = toBf16(logits);
      const values = dtype === 'f32' ? logits : fromBf16(bits);
      const logp = new Float32Array(rows);
      const grad = new Float32Array(rows * vocab);
      if (dtype === 'f32') {
        tokenLogprobsTs(logits, vocab, labels, logp);
        tokenLogprobsBackwardTs(logits, vocab, labels, gradLogp, grad);
      } else {
        tokenLogprobsBf16Ts(bits, vocab, labels, logp);
        tokenLogprobsBackwardBf16Ts(bits, vocab, labels, gradLogp, grad);
      }
      assertClose(logp, tokenReference(values, vocab, labels, 1).logp, 1e-6, `${dtype} logp`);
      assertClose(grad, tokenGradReference(values, vocab, labels, 1, gradLogp), 1e-6, `${dtype} grad`);
    }
  });
});
