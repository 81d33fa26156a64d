import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  info,
  ppoLoss,
  ppoLossAsync,
  setThreads,
  type KlEstimator,
  type PpoAggregation,
  type PpoLossOptions,
} from '../lib/index.js';
import { clamp, finiteDifferenceGradient, reference } from './reference/ppo_loss.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, detached, Random } from './support.js';

const AGGREGATIONS: PpoAggregation[] = [
  'token-mean',
  'token-sum',
  'seq-mean-token-sum',
  'seq-mean-token-mean',
  'seq-mean-token-sum-norm',
];
const ESTIMATORS: KlEstimator[] = ['k1', 'k2', 'k3', 'abs'];

function assertMatchesReference(o: PpoLossOptions, label: string): void {
  const got = ppoLoss(o);
  const want = reference(o);
  const atol = 1e-6 * want.magnitude;
  assertClose(got.loss, want.loss, { atol, label: `${label} loss` });
  assertClose(got.pgLoss, want.pgLoss, { atol, label: `${label} pgLoss` });
  if (o.refLogp) assertClose(got.klLoss!, want.klLoss, { atol, label: `${label} klLoss` });
  else assert.equal(got.klLoss, undefined, `${label}: klLoss without refLogp`);
  assertClose(got.clipFraction, want.clipFraction, { label: `${label} clipFraction` });
  assertClose(got.clipFractionLower, want.clipFractionLower, { label: `${label} clipFractionLower` });
  assertClose(got.approxKl, want.approxKl, { label: `${label} approxKl` });
  assert.equal(got.nonFinite, want.nonFinite, `${label} nonFinite`);
  assert.equal(got.maskedTokens, want.maskedTokens, `${label} maskedTokens`);

  const fd = finiteDifferenceGradient(o);
  let largest = 0;
  for (const g of fd) if (Number.isFinite(g)) largest = Math.max(largest, Math.abs(g));
  let kinks = 0;
  for (let t = 0; t < fd.length; t++) {
    if (Number.isNaN(fd[t])) {
      kinks++;
      continue;
    }
    if (!o.mask[t]) assert.ok(Object.is(got.grad[t], 0) || got.grad[t] === 0, `${label} grad[${t}] masked out`);
    assertClose(got.grad[t], fd[t], { rtol: 1e-5, atol: 1e-6 * largest, label: `${label} grad[${t}]` });
  }
  assert.ok(kinks <= Math.max(2, fd.length * 0.1), `${label}: ${kinks} of ${fd.length} tokens on a kink`);
}

// ---------------------------------------------------------------- batches

interface Batch {
  logp: Float32Array;
  oldLogp: Float32Array;
  advantages: Float32Array;
  mask: Uint8Array;
  seqOffsets: Int32Array;
  refLogp: Float32Array;
  weights: Float32Array;
}

/** A ragged batch with empty and fully masked sequences, ratios spread across the clip range. */
function randomBatch(rng: Random, b: number, maxLen: number): Batch {
  const seqOffsets = rng.seqOffsets(b, 0, maxLen);
  const n = seqOffsets[b];
  const logp = new Float32Array(n);
  const oldLogp = new Float32Array(n);
  const refLogp = new Float32Array(n);
  const advantages = rng.normals(n);
  const weights = rng.floats(n, 0.1, 2);
  const mask = rng.mask(n, 0.75);
  for (let t = 0; t < n; t++) {
    logp[t] = rng.uniform(-4, -0.01);
    oldLogp[t] = logp[t] + rng.normal() * 0.4;
    refLogp[t] = logp[t] + rng.normal() * 0.6;
  }
  if (b > 2) mask.fill(0, seqOffsets[1], seqOffsets[2]);
  return { logp, oldLogp, advantages, mask, seqOffsets, refLogp, weights };
}

function withThreads<T>(threads: number, body: () => T): T {
  const previous = info().threads;
  setThreads(threads);
  try {
    return body();
  } finally {
    setThreads(previous);
  }
}

// ---------------------------------------------------------------- tests

describe('ppoLoss', () => {
  it('matches a hand-worked 3-token example', () => {
    // d = [0.1, -0.5, 0]; r = [e^0.1, e^-0.5, 1]; A = [1, -1, 2], clip to [0.8, 1.2]:
    // token 0 unclipped: L = -e^0.1, dL/dlogp = -e^0.1
    // token 1: L1 = e^-0.5 = 0.607 < L2 = 0.8 -> clipped, L = 0.8, gradient 0
    // token 2: L = -2, dL/dlogp = -2;  mean over 3 tokens.
    const r = ppoLoss({
      logp: Float32Array.from([-1, -2, -0.5]),
      oldLogp: Float32Array.from([-1.1, -1.5, -0.5]),
      advantages: Float32Array.from([1, -1, 2]),
      mask: Uint8Array.from([1, 1, 1]),
    });
    const e = Math.exp(0.1);
    assertClose(r.loss, (-e + 0.8 - 2) / 3, { label: 'loss' });
    assertClose(r.pgLoss, r.loss, { label: 'pgLoss' });
    assertClose(r.grad, [-e / 3, 0, -2 / 3], { label: 'grad' });
    assertClose(r.clipFraction, 1 / 3, { label: 'clipFraction' });
    assert.equal(r.clipFractionLower, 0);
    assertClose(r.approxKl, (-0.1 + 0.5 - 0) / 3, { label: 'approxKl' });
    assert.equal(r.nonFinite, 0);
    assert.equal(r.maskedTokens, 3);
    assert.equal(r.klLoss, undefined);
  });

  it('matches hand-worked dual clip, k3 and seq-mean-token-mean values', () => {
    // A = -1, r = 4: L1 = 4 > L2 = 1.2; dual clip 3 caps it at 3 with gradient 0.
    // Second token A = -1, r = 2: L = 2 < 3, dL/dlogp = -A r = 2.
    const logp = Float32Array.from([Math.log(4), Math.log(2)]);
    const oldLogp = new Float32Array(2);
    const advantages = Float32Array.from([-1, -1]);
    const mask = Uint8Array.from([1, 1]);
    const dual = ppoLoss({ logp, oldLogp, advantages, mask, dualClip: 3, aggregation: 'token-sum' });
    assertClose(dual.loss, 3 + 2, { label: 'dual loss' });
    assertClose(dual.grad, [0, 2], { label: 'dual grad' });
    assertClose(dual.clipFractionLower, 0.5, { label: 'clipFractionLower' });

    // k3 at x = logp - ref = 0.5: e^-0.5 + 0.5 - 1, derivative 1 - e^-0.5; the pg term is 0
    // with A = 0. With x = -30 the clamps make it e^20 - 21 -> 10, derivative 0.
    const k3 = ppoLoss({
      logp: Float32Array.from([-1, -1]),
      oldLogp: Float32Array.from([-1, -1]),
      advantages: new Float32Array(2),
      mask: Uint8Array.from([1, 1]),
      refLogp: Float32Array.from([-1.5, 29]),
      klCoef: 0.5,
      aggregation: 'token-sum',
    });
    const k = Math.exp(-0.5) - 0.5;
    assertClose(k3.klLoss!, k + 10, { label: 'klLoss' });
    assertClose(k3.loss, 0.5 * (k + 10), { label: 'loss' });
    assertClose(k3.grad, [0.5 * (1 - Math.exp(-0.5)), 0], { label: 'k3 grad' });

    // Two sequences [A=1 r=1, masked-out] and [A=2, A=2] at r = 1: sequence means -1 and -2.
    const seq = ppoLoss({
      logp: new Float32Array(4),
      oldLogp: new Float32Array(4),
      advantages: Float32Array.from([1, 5, 2, 2]),
      mask: Uint8Array.from([1, 0, 1, 1]),
      seqOffsets: Int32Array.from([0, 2, 4]),
      aggregation: 'seq-mean-token-mean',
    });
    assertClose(seq.loss, (-1 + -2) / 2, { label: 'seq loss' });
    assertClose(seq.grad, [-1 / 2, 0, -2 / 4, -2 / 4], { label: 'seq grad' });
  });

  it('computes k3 to 1e-5 relative from tiny to large log-ratios (no cancellation)', () => {
    const xs = [1e-4, -3e-4, 2e-3, -0.01, 0.1, -0.2, 0.34, -0.35, 0.36, -0.5, 0.7, -1, 2, -5, 9, -12];
    const n = xs.length;
    const logp = new Float32Array(n).fill(-1);
    // Float32 inputs: x is the float difference the kernel sees.
    const refLogp = Float32Array.from(xs, (x) => -1 - x);
    const r = ppoLoss({ logp, oldLogp: logp, advantages: new Float32Array(n), mask: new Uint8Array(n).fill(1), refLogp, klCoef: 1, aggregation: 'token-sum' });
    for (let i = 0; i < n; i++) {
      const x = logp[i] - refLogp[i];
      const single = ppoLoss({ logp: logp.subarray(i, i + 1), oldLogp: logp.subarray(i, i + 1), advantages: new Float32Array(1), mask: Uint8Array.of(1), refLogp: refLogp.subarray(i, i + 1), aggregation: 'token-sum' });
      const want = clamp(Math.expm1(-x) + x, -10, 10);
      assertClose(single.klLoss!, want, { rtol: 1e-5, atol: 0, label: `k3(${x})` });
      assertClose(r.grad[i], Math.abs(want) < 10 ? -Math.expm1(-x) : 0, { rtol: 1e-5, atol: 0, label: `dk3(${x})` });
    }
  });

  it('matches the float64 reference and finite differences for every aggregation, KL estimator, dual clip, weights and ratio level', () => {
    const rng = new Random(1);
    const batch = randomBatch(rng, 12, 14);
    for (const aggregation of AGGREGATIONS) {
      for (const estimator of [undefined, ...ESTIMATORS]) {
        for (const dualClip of [undefined, 1.5]) {
          for (const weighted of [false, true]) {
            for (const ratioLevel of ['token', 'sequence'] as const) {
              const o: PpoLossOptions = {
                logp: batch.logp,
                oldLogp: batch.oldLogp,
                advantages: batch.advantages,
                mask: batch.mask,
                seqOffsets: batch.seqOffsets,
                clipLow: ratioLevel === 'sequence' ? 0.05 : 0.2,
                clipHigh: ratioLevel === 'sequence' ? 0.08 : 0.28,
                dualClip,
                aggregation,
                ratioLevel,
              };
              if (estimator) Object.assign(o, { refLogp: batch.refLogp, klEstimator: estimator, klCoef: 0.3 });
              if (weighted) o.weights = batch.weights;
              assertMatchesReference(o, `${aggregation}/${estimator ?? 'no KL'}/dual ${dualClip}/weights ${weighted}/${ratioLevel}`);
            }
          }
        }
      }
    }
  });

  it('applies the global normalisers and the data-parallel size', () => {
    const rng = new Random(2);
    const b = randomBatch(rng, 9, 20);
    const base = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask: b.mask, seqOffsets: b.seqOffsets };
    const cases: PpoLossOptions[] = [
      { ...base, tokenNormalizer: 500 },
      { ...base, tokenNormalizer: 500, dpSize: 4 },
      { ...base, aggregation: 'token-sum', dpSize: 2 },
      { ...base, aggregation: 'seq-mean-token-sum', seqNormalizer: 64, dpSize: 8 },
      { ...base, aggregation: 'seq-mean-token-mean', seqNormalizer: 64 },
      { ...base, aggregation: 'seq-mean-token-sum-norm', horizon: 4096 },
      { ...base, aggregation: 'seq-mean-token-sum-norm', horizon: 4096, seqNormalizer: 1 },
      { ...base, aggregation: 'seq-mean-token-sum-norm', refLogp: b.refLogp, klCoef: 0.1, weights: b.weights },
    ];
    for (const [i, o] of cases.entries()) assertMatchesReference(o, `normalisers case ${i}`);

    // tokenNormalizer = 2 x the masked count halves loss and gradient; dpSize doubles them.
    const plain = ppoLoss(base);
    const halved = ppoLoss({ ...base, tokenNormalizer: 2 * plain.maskedTokens });
    const doubled = ppoLoss({ ...base, dpSize: 2 });
    assertClose(halved.loss, plain.loss / 2, { label: 'halved loss' });
    assertClose(doubled.loss, plain.loss * 2, { label: 'doubled loss' });
    assertClose(halved.grad, Array.from(plain.grad, (g) => g / 2), { label: 'halved grad' });
    assertClose(doubled.grad, Array.from(plain.grad, (g) => g * 2), { label: 'doubled grad' });
  });

  it('uses clipHigh = clipLow by default and clips asymmetrically when given', () => {
    const rng = new Random(3);
    const b = randomBatch(rng, 6, 30);
    const base = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask: b.mask };
    assertBitwiseEqual(ppoLoss({ ...base, clipLow: 0.1 }).grad, ppoLoss({ ...base, clipLow: 0.1, clipHigh: 0.1 }).grad, 'default clipHigh');
    assertMatchesReference({ ...base, clipLow: 0.1, clipHigh: 0.4 }, 'asymmetric');
    assertMatchesReference({ ...base, clipLow: 0, clipHigh: 0 }, 'clip 0');
  });

  it('ignores dualClip with the sequence ratio, as verl does', () => {
    const rng = new Random(4);
    const b = randomBatch(rng, 8, 16);
    const o = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask: b.mask, seqOffsets: b.seqOffsets, ratioLevel: 'sequence' as const };
    const plain = ppoLoss(o);
    const dual = ppoLoss({ ...o, dualClip: 1.01 });
    assertBitwiseEqual(plain.grad, dual.grad, 'grad');
    assert.equal(plain.loss, dual.loss);
    assert.equal(dual.clipFractionLower, 0);
  });

  it('clamps log-ratios beyond ±20 with zero gradient there', () => {
    // d = +25 -> 20 and d = -25 -> -20; a token at d = 19.5 still has its gradient.
    const logp = Float32Array.from([0, -25, 0, -1, -1]);
    const oldLogp = Float32Array.from([-25, 0, -25, -1, -20.5]);
    const advantages = Float32Array.from([-1, 1, 1, 0.5, -0.25]);
    const mask = Uint8Array.from([1, 1, 1, 1, 1]);
    const o = { logp, oldLogp, advantages, mask, aggregation: 'token-sum' as const };
    const r = ppoLoss(o);
    const want = reference(o);
    assertClose(r.loss, want.loss, { label: 'loss' });
    // token 0: A < 0, L = e^20, clamp active -> 0; token 1: L1 = -e^-20 > L2 = -0.8, clamp active -> 0;
    // token 2: clipped at 1.2 -> 0; token 3: d = 0, -A; token 4: d = 19.5, L = -A e^19.5 unclipped.
    assertClose(r.grad, [0, 0, 0, -0.5, 0.25 * Math.exp(19.5)], { label: 'grad' });
    assertClose(r.loss, Math.exp(20) - Math.exp(-20) - 1.2 - 0.5 + 0.25 * Math.exp(19.5), { label: 'loss by hand' });
    assertClose(r.approxKl, -(20 - 20 + 20 + 0 + 19.5) / 5, { label: 'approxKl' });
    // GSPO caps the sequence log-ratio at 10.
    const gspo = ppoLoss({ ...o, seqOffsets: Int32Array.from([0, 1, 5]), ratioLevel: 'sequence', clipLow: 0.2 });
    assertClose(gspo.loss, reference({ ...o, seqOffsets: Int32Array.from([0, 1, 5]), ratioLevel: 'sequence' }).loss, { label: 'gspo loss' });
    assert.equal(gspo.grad[0], 0);
  });

  it('gives loss 0 and gradient 0 when everything is masked out, and skips fully masked sequences', () => {
    const rng = new Random(5);
    const b = randomBatch(rng, 6, 10);
    const mask = new Uint8Array(b.logp.length);
    const logp = Float32Array.from(b.logp);
    logp[0] = NaN; // masked out: must not leak
    for (const aggregation of AGGREGATIONS) {
      for (const ratioLevel of ['token', 'sequence'] as const) {
        const out = { grad: new Float32Array(logp.length).fill(7) };
        const r = ppoLoss({ logp, oldLogp: b.oldLogp, advantages: b.advantages, mask, seqOffsets: b.seqOffsets, refLogp: b.refLogp, klCoef: 0.1, aggregation, ratioLevel, out });
        assert.equal(r.loss, 0, aggregation);
        assert.equal(r.klLoss, 0);
        assert.ok(r.grad.every((g) => g === 0), `${aggregation} grad`);
        assert.deepEqual([r.clipFraction, r.clipFractionLower, r.approxKl, r.nonFinite, r.maskedTokens], [0, 0, 0, 0, 0]);
      }
    }
    // One fully masked sequence among others: excluded from the sequence count.
    const partial = Uint8Array.from([1, 1, 0, 0, 1]);
    const o = {
      logp: Float32Array.from([-1, -2, -3, -4, -5]),
      oldLogp: Float32Array.from([-1.1, -2, -3, -4, -5.2]),
      advantages: Float32Array.from([1, 2, 3, 4, 5]),
      mask: partial,
      seqOffsets: Int32Array.from([0, 2, 4, 5]),
    };
    for (const aggregation of AGGREGATIONS) assertMatchesReference({ ...o, aggregation }, `fully masked sequence ${aggregation}`);
  });

  it('handles empty input', () => {
    const empty = new Float32Array(0);
    for (const aggregation of AGGREGATIONS) {
      for (const seqOffsets of [Int32Array.from([0]), Int32Array.from([0, 0, 0])]) {
        const r = ppoLoss({ logp: empty, oldLogp: empty, advantages: empty, mask: new Uint8Array(0), seqOffsets, aggregation, refLogp: empty, ratioLevel: 'sequence' });
        assert.equal(r.loss, 0);
        assert.equal(r.grad.length, 0);
        assert.equal(r.maskedTokens, 0);
      }
    }
    assert.equal(ppoLoss({ logp: empty, oldLogp: empty, advantages: empty, mask: new Uint8Array(0) }).loss, 0);
  });

  it('propagates NaN and Inf from masked-in tokens and counts them in nonFinite', () => {
    const rng = new Random(6);
    const b = randomBatch(rng, 4, 12);
    const n = b.logp.length;
    const mask = new Uint8Array(n).fill(1);
    const base = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask, refLogp: b.refLogp, weights: b.weights, klCoef: 0.2 };
    const clean = ppoLoss(base);
    assert.equal(clean.nonFinite, 0);
    const poison = (name: 'logp' | 'oldLogp' | 'advantages' | 'refLogp' | 'weights', t: number, value: number) => {
      const array = Float32Array.from(base[name]);
      array[t] = value;
      return { ...base, [name]: array };
    };
    // NaN anywhere in a masked-in token makes the loss NaN.
    for (const name of ['logp', 'oldLogp', 'advantages', 'refLogp', 'weights'] as const) {
      const r = ppoLoss(poison(name, 3, NaN));
      assert.ok(Number.isNaN(r.loss), `${name} NaN -> loss`);
      assert.equal(r.nonFinite, 1, `${name} NaN counted`);
      // Token-mean with the default normaliser: other tokens keep their gradient.
      for (let t = 0; t < n; t++) if (t !== 3) assert.equal(r.grad[t], clean.grad[t], `${name}: grad[${t}]`);
    }
    // Inf: counted; the values follow torch (the clamp maps an infinite log-ratio to ±20).
    for (const [name, value] of [['logp', Infinity], ['oldLogp', -Infinity], ['advantages', Infinity], ['refLogp', Infinity], ['weights', Infinity]] as const) {
      const o = poison(name, 5, value);
      const r = ppoLoss(o);
      assert.equal(r.nonFinite, 1, `${name} Inf counted`);
      assertClose(r.loss, reference(o).loss, { label: `${name} Inf loss`, atol: 1e-6 * reference(o).magnitude });
    }
    // Several at once; refLogp and weights only count when given.
    const two = { ...poison('logp', 1, NaN), advantages: Float32Array.from(b.advantages).fill(Infinity, 2, 4) };
    assert.equal(ppoLoss(two).nonFinite, 3);
    const refOnly = poison('refLogp', 0, NaN);
    assert.equal(ppoLoss({ ...refOnly, refLogp: undefined, klCoef: 0 }).nonFinite, 0);
    // Masked out: neither counted nor propagated.
    const hidden = { ...poison('logp', 2, NaN), mask: Uint8Array.from(mask).fill(0, 2, 3) };
    const r = ppoLoss(hidden);
    assert.equal(r.nonFinite, 0);
    assert.ok(Number.isFinite(r.loss));
    assert.equal(r.grad[2], 0);
    // A sequence ratio built from a NaN token is NaN for the whole sequence.
    const gspo = ppoLoss({ ...poison('logp', 1, NaN), seqOffsets: Int32Array.from([0, 2, n]), ratioLevel: 'sequence' });
    assert.ok(Number.isNaN(gspo.loss));
    assert.equal(gspo.nonFinite, 1);
    // An infinite oldLogp makes the sequence ratio 0, and 0 times an infinite advantage is
    // NaN in L1: max(L1, L2) is NaN as torch.maximum gives, not L2's -Infinity (the
    // fuzzer's seed 31, case 306965).
    const zeroRatio = { ...poison('oldLogp', 1, Infinity), advantages: Float32Array.from(b.advantages).fill(Infinity, 1, 2) };
    const nanMax = ppoLoss({ ...zeroRatio, seqOffsets: Int32Array.from([0, 2, n]), ratioLevel: 'sequence', weights: undefined, klCoef: 0 });
    assert.ok(Number.isNaN(nanMax.loss), `loss ${nanMax.loss}`);
    assert.equal(nanMax.nonFinite, 1);
  });

  it('reports klLoss even with klCoef 0, without changing the gradient', () => {
    const rng = new Random(7);
    const b = randomBatch(rng, 5, 20);
    const base = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask: b.mask };
    const withRef = ppoLoss({ ...base, refLogp: b.refLogp });
    assertBitwiseEqual(withRef.grad, ppoLoss(base).grad, 'grad');
    assertClose(withRef.klLoss!, reference({ ...base, refLogp: b.refLogp }).klLoss, { label: 'klLoss' });
    assert.equal(withRef.loss, withRef.pgLoss);
  });

  it('writes into out.grad, and allocates when it is absent', () => {
    const rng = new Random(8);
    const b = randomBatch(rng, 5, 20);
    const n = b.logp.length;
    const grad = new Float32Array(n).fill(NaN);
    const o = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask: b.mask };
    const r = ppoLoss({ ...o, out: { grad } });
    assert.equal(r.grad, grad);
    assertBitwiseEqual(grad, ppoLoss(o).grad, 'out grad');
    assert.ok(ppoLoss({ ...o, out: {} }).grad instanceof Float32Array);
  });

  it('is bitwise identical for 1 and 7 threads, and async agrees with sync', async () => {
    const rng = new Random(9);
    const b = randomBatch(rng, 300, 700); // ~100K tokens: several chunks, sequences across chunk ends
    const base = { logp: b.logp, oldLogp: b.oldLogp, advantages: b.advantages, mask: b.mask, seqOffsets: b.seqOffsets };
    const variants: PpoLossOptions[] = [
      base,
      { ...base, refLogp: b.refLogp, klCoef: 0.1, weights: b.weights, dualClip: 3 },
      { ...base, aggregation: 'seq-mean-token-mean', ratioLevel: 'sequence', refLogp: b.refLogp, klCoef: 0.05, klEstimator: 'k2' },
      { ...base, aggregation: 'seq-mean-token-sum-norm', refLogp: b.refLogp, klEstimator: 'abs' },
    ];
    for (const [i, o] of variants.entries()) {
      const one = withThreads(1, () => ppoLoss(o));
      const seven = withThreads(7, () => ppoLoss(o));
      const async = await ppoLossAsync(o);
      for (const [name, r] of [['7 threads', seven], ['async', async]] as const) {
        assertBitwiseEqual(one.grad, r.grad, `variant ${i} ${name} grad`);
        for (const key of ['loss', 'pgLoss', 'klLoss', 'clipFraction', 'clipFractionLower', 'approxKl', 'nonFinite', 'maskedTokens'] as const) {
          assert.ok(Object.is(one[key], r[key]), `variant ${i} ${name} ${key}: ${one[key]} vs ${r[key]}`);
        }
      }
      assertMatchesReferenceLarge(o, one, `large variant ${i}`);
    }
  });

  it('rejects malformed calls with a named TypeError or RangeError', async () => {
    const logp = Float32Array.from([-1, -2, -3]);
    const oldLogp = Float32Array.from([-1, -2, -3]);
    const advantages = Float32Array.from([1, 0, -1]);
    const mask = Uint8Array.from([1, 1, 0]);
    const seqOffsets = Int32Array.from([0, 1, 3]);
    const ok = { logp, oldLogp, advantages, mask };
    const call = (o: unknown) => () => ppoLoss(o as never);
    const with_ = (extra: object) => call({ ...ok, ...extra });
    checkBadInputs([
      { name: 'no options', call: call(undefined), error: TypeError, message: 'options object' },
      { name: 'options is a number', call: call(1), error: TypeError, message: 'options object' },
      { name: 'logp missing', call: call({ oldLogp, advantages, mask }), error: TypeError, message: 'for logp' },
      { name: 'logp as Array', call: with_({ logp: [-1, -2, -3] }), error: TypeError, message: 'an Array of length 3' },
      { name: 'logp as Float64Array', call: with_({ logp: new Float64Array(3) }), error: TypeError, message: 'Float64Array' },
      { name: 'logp detached', call: with_({ logp: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'oldLogp missing', call: call({ logp, advantages, mask }), error: TypeError, message: 'for oldLogp' },
      { name: 'oldLogp wrong length', call: with_({ oldLogp: new Float32Array(2) }), error: RangeError, message: 'oldLogp' },
      { name: 'advantages wrong length', call: with_({ advantages: new Float32Array(4) }), error: RangeError, message: 'advantages' },
      { name: 'advantages as Int32Array', call: with_({ advantages: new Int32Array(3) }), error: TypeError, message: 'advantages' },
      { name: 'mask missing', call: call({ logp, oldLogp, advantages }), error: TypeError, message: 'for mask' },
      { name: 'mask as Int8Array', call: with_({ mask: new Int8Array(3) }), error: TypeError, message: 'mask' },
      { name: 'mask wrong length', call: with_({ mask: new Uint8Array(2) }), error: RangeError, message: 'mask' },
      { name: 'clipLow 1', call: with_({ clipLow: 1 }), error: RangeError, message: 'clipLow' },
      { name: 'clipLow negative', call: with_({ clipLow: -0.1 }), error: RangeError, message: 'clipLow' },
      { name: 'clipLow NaN', call: with_({ clipLow: NaN }), error: RangeError, message: 'clipLow' },
      { name: 'clipLow string', call: with_({ clipLow: '0.2' }), error: TypeError, message: 'clipLow' },
      { name: 'clipHigh negative', call: with_({ clipHigh: -1 }), error: RangeError, message: 'clipHigh' },
      { name: 'clipHigh Infinity', call: with_({ clipHigh: Infinity }), error: RangeError, message: 'clipHigh' },
      { name: 'dualClip 1', call: with_({ dualClip: 1 }), error: RangeError, message: 'dualClip' },
      { name: 'dualClip 0', call: with_({ dualClip: 0 }), error: RangeError, message: 'dualClip' },
      { name: 'dualClip null', call: with_({ dualClip: null }), error: TypeError, message: 'dualClip' },
      { name: 'aggregation unknown', call: with_({ aggregation: 'mean' }), error: RangeError, message: 'aggregation' },
      { name: 'aggregation number', call: with_({ aggregation: 3 }), error: TypeError, message: 'aggregation' },
      { name: 'seq aggregation without seqOffsets', call: with_({ aggregation: 'seq-mean-token-mean' }), error: TypeError, message: 'seqOffsets' },
      { name: 'sequence ratio without seqOffsets', call: with_({ ratioLevel: 'sequence' }), error: TypeError, message: 'seqOffsets' },
      { name: 'ratioLevel unknown', call: with_({ ratioLevel: 'seq' }), error: RangeError, message: 'ratioLevel' },
      { name: 'seqOffsets as Float32Array', call: with_({ seqOffsets: new Float32Array([0, 3]) }), error: TypeError, message: 'seqOffsets' },
      { name: 'seqOffsets empty', call: with_({ seqOffsets: new Int32Array(0) }), error: RangeError, message: 'seqOffsets' },
      { name: 'seqOffsets short of N', call: with_({ seqOffsets: Int32Array.from([0, 2]) }), error: RangeError, message: 'end at the token count 3' },
      { name: 'seqOffsets decreasing', call: with_({ seqOffsets: Int32Array.from([0, 2, 1, 3]), aggregation: 'seq-mean-token-sum' }), error: RangeError, message: 'non-decreasing' },
      { name: 'seqOffsets not starting at 0', call: with_({ seqOffsets: Int32Array.from([1, 3]) }), error: RangeError, message: 'seqOffsets[0]' },
      { name: 'tokenNormalizer 0', call: with_({ tokenNormalizer: 0 }), error: RangeError, message: 'tokenNormalizer' },
      { name: 'seqNormalizer negative', call: with_({ seqNormalizer: -1, seqOffsets }), error: RangeError, message: 'seqNormalizer' },
      { name: 'horizon 0', call: with_({ horizon: 0 }), error: RangeError, message: 'horizon' },
      { name: 'horizon string', call: with_({ horizon: '10' }), error: TypeError, message: 'horizon' },
      { name: 'dpSize 0', call: with_({ dpSize: 0 }), error: RangeError, message: 'dpSize' },
      { name: 'klCoef negative', call: with_({ klCoef: -0.1, refLogp: logp }), error: RangeError, message: 'klCoef' },
      { name: 'klCoef without refLogp', call: with_({ klCoef: 0.1 }), error: TypeError, message: 'refLogp' },
      { name: 'refLogp wrong length', call: with_({ refLogp: new Float32Array(5) }), error: RangeError, message: 'refLogp' },
      { name: 'refLogp detached', call: with_({ refLogp: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'klEstimator unknown', call: with_({ klEstimator: 'k4', refLogp: logp }), error: RangeError, message: 'klEstimator' },
      { name: 'weights wrong length', call: with_({ weights: new Float32Array(1) }), error: RangeError, message: 'weights' },
      { name: 'weights as Uint8Array', call: with_({ weights: new Uint8Array(3) }), error: TypeError, message: 'weights' },
      { name: 'out not an object', call: with_({ out: 5 }), error: TypeError, message: 'for out' },
      { name: 'out.grad wrong length', call: with_({ out: { grad: new Float32Array(2) } }), error: RangeError, message: 'out.grad' },
      { name: 'out.grad as Float64Array', call: with_({ out: { grad: new Float64Array(3) } }), error: TypeError, message: 'out.grad' },
    ]);
    await assert.rejects(ppoLossAsync({ ...ok, clipLow: 2 }), RangeError);
    await assert.rejects(ppoLossAsync({ ...ok, aggregation: 'seq-mean-token-sum' }), TypeError);
    await assert.rejects(ppoLossAsync(null as never), TypeError);
  });
});

/** Large batches: forward values against the reference (finite differences would be O(N^2)). */
function assertMatchesReferenceLarge(o: PpoLossOptions, got: ReturnType<typeof ppoLoss>, label: string): void {
  const want = reference(o);
  const atol = 1e-6 * want.magnitude;
  assertClose(got.loss, want.loss, { atol, label: `${label} loss` });
  if (o.refLogp) assertClose(got.klLoss!, want.klLoss, { atol, label: `${label} klLoss` });
  assertClose(got.approxKl, want.approxKl, { label: `${label} approxKl` });
  assertClose(got.clipFraction, want.clipFraction, { atol: 1e-4, label: `${label} clipFraction` });
  assert.equal(got.maskedTokens, want.maskedTokens);
}
