import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { dpoLoss, dpoLossAsync, info, setThreads, type DpoVariant } from '../lib/index.js';
import { finiteDifferenceGradient, referenceLoss, referenceRewards } from './reference/dpo_loss.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, detached, Random } from './support.js';

const variants: DpoVariant[] = ['sigmoid', 'hinge', 'ipo', 'robust'];

function randomPairs(rng: Random, n: number) {
  // Summed log-probs of completions: large negative numbers whose differences matter.
  const policyChosen = rng.floats(n, -300, -20);
  const refChosen = Float32Array.from(policyChosen, (x) => x + rng.normal() * 8);
  const policyRejected = rng.floats(n, -300, -20);
  const refRejected = Float32Array.from(policyRejected, (x) => x + rng.normal() * 8);
  return { policyChosen, policyRejected, refChosen, refRejected };
}

describe('dpoLoss', () => {
  it('gives the hand-worked values at delta = 0', () => {
    const zeros = () => new Float32Array(4);
    const p = { policyChosen: zeros(), policyRejected: zeros(), refChosen: zeros(), refRejected: zeros() };
    const sigmoid = dpoLoss(p);
    assertClose(sigmoid.loss, Math.LN2);
    assertClose(sigmoid.gradChosen, [-0.0125, -0.0125, -0.0125, -0.0125]); // -beta * 0.5 / P
    assertClose(sigmoid.gradRejected, [0.0125, 0.0125, 0.0125, 0.0125]);
    assert.equal(sigmoid.rewardAccuracy, 0);
    assertClose(dpoLoss({ ...p, variant: 'hinge' }).loss, 1);
    assertClose(dpoLoss({ ...p, variant: 'ipo', beta: 0.1 }).loss, 25); // (1 / 0.2)^2
    assertClose(dpoLoss({ ...p, variant: 'robust', labelSmoothing: 0.1 }).loss, Math.LN2); // (0.9 - 0.1) log 2 / 0.8
    // One pair, policy prefers chosen by 2 nats more than the reference: delta = 2.
    const one = dpoLoss({ policyChosen: Float32Array.of(-10), refChosen: Float32Array.of(-11), policyRejected: Float32Array.of(-12), refRejected: Float32Array.of(-11), beta: 0.5 });
    assertClose(one.loss, Math.log1p(Math.exp(-1)));
    assertClose(one.chosenRewards, [0.5]);
    assertClose(one.rejectedRewards, [-0.5]);
    assert.equal(one.rewardAccuracy, 1);
  });

  it('matches the reference loss, rewards and accuracy for every variant', () => {
    const rng = new Random(21);
    for (const n of [1, 7, 1000, 5000]) {
      const p = randomPairs(rng, n);
      for (const variant of variants) {
        for (const [beta, ls] of [[0.1, 0], [0.5, 0.2], [0.01, 0.45]]) {
          const r = dpoLoss({ ...p, beta, labelSmoothing: ls, variant });
          assertClose(r.loss, referenceLoss(p, beta, ls, variant), { label: `${variant} loss` });
          const want = referenceRewards(p, beta);
          for (let i = 0; i < n; i++) {
            assertClose(r.chosenRewards[i], want.chosen[i], { label: 'chosenRewards' });
            assertClose(r.rejectedRewards[i], want.rejected[i], { label: 'rejectedRewards' });
          }
          assertClose(r.rewardAccuracy, want.accuracy, { label: 'rewardAccuracy' });
        }
      }
    }
  });

  it('has gradients equal to finite differences of the reference (all variants, label smoothing)', () => {
    const rng = new Random(22);
    const p = randomPairs(rng, 24);
    for (const variant of variants) {
      for (const [beta, ls] of [[0.1, 0], [0.3, 0.25], [0.05, 0.1]]) {
        const r = dpoLoss({ ...p, beta, labelSmoothing: ls, variant });
        const options = { rtol: 1e-4, atol: 1e-8 };
        assertClose(r.gradChosen, finiteDifferenceGradient(p, 'policyChosen', beta, ls, variant), { ...options, label: `${variant} gradChosen` });
        assertClose(r.gradRejected, finiteDifferenceGradient(p, 'policyRejected', beta, ls, variant), { ...options, label: `${variant} gradRejected` });
      }
    }
  });

  it('stays finite and exact for huge margins', () => {
    const p = { policyChosen: Float32Array.of(0, -5000), refChosen: Float32Array.of(-5000, 0), policyRejected: new Float32Array(2), refRejected: new Float32Array(2) };
    for (const variant of variants) {
      for (const ls of [0, 0.3]) {
        const r = dpoLoss({ ...p, variant, labelSmoothing: ls, beta: 1 });
        assertClose(r.loss, referenceLoss(p, 1, ls, variant), { label: variant });
        assert.ok(r.gradChosen.every(Number.isFinite));
      }
    }
    const sigmoid = dpoLoss({ ...p, beta: 1 });
    assertClose(sigmoid.gradChosen, [0, -0.5]); // saturated: 0 for the won pair, -1 / P for the lost one
  });

  it('keeps the mean finite when losses near the f32 maximum add up past it', () => {
    // 300 pairs of loss 3e38 each: a block's f32 partial sums overflow, its double sum does not.
    const n = 300;
    const p = { policyChosen: new Float32Array(n).fill(-3e38), refChosen: new Float32Array(n), policyRejected: new Float32Array(n), refRejected: new Float32Array(n) };
    const r = dpoLoss({ ...p, beta: 1 });
    assert.ok(Number.isFinite(r.loss), `${r.loss}`);
    assertClose(r.loss, referenceLoss(p, 1, 0, 'sigmoid'));
  });

  it('gives loss 0 and accuracy 0 for no pairs', () => {
    const empty = new Float32Array(0);
    const r = dpoLoss({ policyChosen: empty, policyRejected: empty, refChosen: empty, refRejected: empty });
    assert.equal(r.loss, 0);
    assert.equal(r.rewardAccuracy, 0);
    assert.equal(r.gradChosen.length, 0);
  });

  it('propagates NaN and Inf into the loss and their own pair only', () => {
    const p = { policyChosen: Float32Array.of(NaN, -1, Infinity, -2), refChosen: Float32Array.of(-1, -1, -1, -1), policyRejected: Float32Array.of(-1, -3, -1, -1), refRejected: Float32Array.of(-1, -1, -1, -1) };
    for (const variant of variants) {
      const r = dpoLoss({ ...p, variant });
      assert.ok(Number.isNaN(r.loss) || !Number.isFinite(r.loss), `${variant} loss ${r.loss}`);
      const finite = { policyChosen: p.policyChosen.slice(1, 2), refChosen: p.refChosen.slice(1, 2), policyRejected: p.policyRejected.slice(1, 2), refRejected: p.refRejected.slice(1, 2) };
      assertClose(r.gradChosen[1], finiteDifferenceGradient(finite, 'policyChosen', 0.1, 0, variant)[0] / 4, { rtol: 1e-4, label: variant });
      assert.ok(Number.isNaN(r.chosenRewards[0]) && r.chosenRewards[2] === Infinity);
      assert.equal(r.rewardAccuracy, 2 / 4); // NaN compares false; Inf > finite counts
    }
  });

  it('gives an infinite or NaN margin the reference value (Inf, 0, or NaN as IEEE has it)', () => {
    const zero = new Float32Array(1);
    for (const variant of variants) {
      for (const ls of [0, 0.2]) {
        for (const margin of [Infinity, -Infinity, NaN]) {
          const p = { policyChosen: Float32Array.of(margin), policyRejected: zero, refChosen: zero, refRejected: zero };
          const got = dpoLoss({ ...p, variant, labelSmoothing: ls }).loss;
          const want = referenceLoss(p, 0.1, ls, variant);
          assert.ok(Object.is(got, want) || (Number.isNaN(got) && Number.isNaN(want)), `${variant} ls=${ls} margin=${margin}: ${got} vs ${want}`);
        }
      }
    }
  });

  it('is bitwise identical for any thread count, async agrees, out buffers work', async () => {
    const rng = new Random(23);
    const p = randomPairs(rng, 65_536);
    const threads = info().threads;
    try {
      for (const variant of variants) {
        const options = { ...p, variant, labelSmoothing: 0.1 };
        setThreads(1);
        const one = dpoLoss(options);
        setThreads(7);
        const seven = dpoLoss(options);
        const async = await dpoLossAsync(options);
        for (const r of [seven, async]) {
          assert.equal(r.loss, one.loss);
          assert.equal(r.rewardAccuracy, one.rewardAccuracy);
          for (const key of ['gradChosen', 'gradRejected', 'chosenRewards', 'rejectedRewards'] as const) {
            assertBitwiseEqual(r[key], one[key], `${variant} ${key}`);
          }
        }
        const out = { gradChosen: new Float32Array(65_536), gradRejected: new Float32Array(65_536), chosenRewards: new Float32Array(65_536), rejectedRewards: new Float32Array(65_536) };
        const written = dpoLoss({ ...options, out });
        assert.equal(written.gradChosen, out.gradChosen);
        assert.equal(written.rejectedRewards, out.rejectedRewards);
        assertBitwiseEqual(out.gradRejected, one.gradRejected, 'out.gradRejected');
        assert.equal(written.loss, one.loss);
      }
    } finally {
      setThreads(threads);
    }
  });

  it('rejects malformed calls with a named TypeError or RangeError', async () => {
    const a = () => new Float32Array(3);
    const p = { policyChosen: a(), policyRejected: a(), refChosen: a(), refRejected: a() };
    const call = (o: unknown) => () => dpoLoss(o as never);
    checkBadInputs([
      { name: 'no options', call: call(undefined), error: TypeError, message: 'options object' },
      { name: 'options is an Array', call: call([]), error: TypeError, message: 'options object' },
      { name: 'policyChosen missing', call: call({ ...p, policyChosen: undefined }), error: TypeError, message: 'policyChosen' },
      { name: 'policyRejected missing', call: call({ ...p, policyRejected: undefined }), error: TypeError, message: 'policyRejected' },
      { name: 'refChosen as Array', call: call({ ...p, refChosen: [0, 0, 0] }), error: TypeError, message: 'refChosen' },
      { name: 'refRejected as Float64Array', call: call({ ...p, refRejected: new Float64Array(3) }), error: TypeError, message: 'refRejected' },
      { name: 'policyChosen detached', call: call({ ...p, policyChosen: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'policyRejected too short', call: call({ ...p, policyRejected: new Float32Array(2) }), error: RangeError, message: 'policyRejected' },
      { name: 'refChosen too long', call: call({ ...p, refChosen: new Float32Array(4) }), error: RangeError, message: 'refChosen' },
      { name: 'refRejected too short', call: call({ ...p, refRejected: new Float32Array(0) }), error: RangeError, message: 'refRejected' },
      { name: 'beta 0', call: call({ ...p, beta: 0 }), error: RangeError, message: 'beta' },
      { name: 'beta negative', call: call({ ...p, beta: -0.1 }), error: RangeError, message: 'beta' },
      { name: 'beta NaN', call: call({ ...p, beta: NaN }), error: RangeError, message: 'beta' },
      { name: 'beta Infinity', call: call({ ...p, beta: Infinity }), error: RangeError, message: 'beta' },
      { name: 'beta as string', call: call({ ...p, beta: '0.1' }), error: TypeError, message: 'beta' },
      { name: 'labelSmoothing negative', call: call({ ...p, labelSmoothing: -0.1 }), error: RangeError, message: 'labelSmoothing' },
      { name: 'labelSmoothing 0.5', call: call({ ...p, labelSmoothing: 0.5 }), error: RangeError, message: 'labelSmoothing' },
      { name: 'labelSmoothing 1', call: call({ ...p, labelSmoothing: 1 }), error: RangeError, message: 'labelSmoothing' },
      { name: 'labelSmoothing as boolean', call: call({ ...p, labelSmoothing: true }), error: TypeError, message: 'labelSmoothing' },
      { name: 'variant unknown', call: call({ ...p, variant: 'kto' }), error: RangeError, message: 'variant' },
      { name: 'variant as number', call: call({ ...p, variant: 2 }), error: TypeError, message: 'variant' },
      { name: 'out not an object', call: call({ ...p, out: 1 }), error: TypeError, message: 'for out' },
      { name: 'out.gradChosen wrong length', call: call({ ...p, out: { gradChosen: new Float32Array(2) } }), error: RangeError, message: 'out.gradChosen' },
      { name: 'out.gradRejected wrong type', call: call({ ...p, out: { gradRejected: new Int32Array(3) } }), error: TypeError, message: 'out.gradRejected' },
      { name: 'out.chosenRewards detached', call: call({ ...p, out: { chosenRewards: detached((n) => new Float32Array(n)) } }), error: TypeError, message: 'detached' },
      { name: 'out.rejectedRewards wrong length', call: call({ ...p, out: { rejectedRewards: new Float32Array(9) } }), error: RangeError, message: 'out.rejectedRewards' },
    ]);
    await assert.rejects(dpoLossAsync({ ...p, beta: -1 }), RangeError);
    await assert.rejects(dpoLossAsync({ ...p, variant: 'nope' as never }), RangeError);
  });
});
