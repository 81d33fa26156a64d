/**
 * Extreme inputs across the ops: logits of ±1e4, the f32 and bf16 limits and denormals,
 * tiny and huge temperatures, log-prob differences of ±1e3 in ppoLoss and dpoLoss, equal
 * rewards, groups of one and of a million, and exact `nonFinite` counts. Each expectation
 * is a closed form worked out here in float64 (the ops' general references stay in their
 * own test files); the results must be finite and right, or the IEEE value documented.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  dpoLoss,
  groupAdvantages,
  groupAdvantagesAsync,
  ppoLoss,
  ppoLossAsync,
  tokenLogprobs,
  tokenLogprobsBackward,
} from '../lib/index.js';
import { assertClose, checkBadInputs, Random } from './support.js';

const F32 = { rtol: 1e-5, atol: 1e-6 };
const FLT_MAX = 3.4028234663852886e38;

/** bf16 bits of a float that bf16 holds exactly. */
function bf16(x: number): number {
  return new Uint32Array(Float32Array.of(x).buffer)[0] >>> 16;
}

/**
 * A row where `count` entries equal `high` and the rest `low`, at temperature T, its label
 * at a high entry: log-prob, entropy and dlogit (g_lp = 1) at the label and elsewhere.
 */
function twoLevelRow(v: number, count: number, high: number, low: number, temperature: number) {
  const gap = (low - high) / temperature;  // <= 0
  const sum = count + (v - count) * Math.exp(gap);
  const pHigh = 1 / sum;
  const pLow = Math.exp(gap) / sum;
  const entropy = -(count * pHigh * Math.log(pHigh) + (pLow > 0 ? (v - count) * pLow * Math.log(pLow) : 0));
  return { logp: -Math.log(sum), entropy, gradLabel: (1 - pHigh) / temperature, gradHigh: -pHigh / temperature, gradLow: -pLow / temperature };
}

describe('numerics: tokenLogprobs at the extremes', () => {
  it('gives exact results for logits of ±1e4 in 151,936-entry rows (f32; bf16 ±8192), across block boundaries', () => {
    const v = 151_936;
    // 1e4 is not a bf16 value; 8192 = 2^13 is.
    for (const [dtype, high] of [['f32', 1e4], ['bf16', 8192]] as const) for (const temperature of [1, 0.5, high]) {
      // Row 0: one `high` (at the end of the first 2048-block), the rest -high; row 1: two of them.
      const f32 = new Float32Array(2 * v).fill(-high);
      f32[2047] = high;
      f32[v + 2048] = high;
      f32[v + v - 1] = high;
      const logits = dtype === 'f32' ? f32 : Uint16Array.from(f32, bf16);
      const labels = Int32Array.of(2047, 2048);
      const r = tokenLogprobs({ logits, vocabSize: v, labels, dtype, temperature, withEntropy: true });
      const one = twoLevelRow(v, 1, high, -high, temperature);
      const two = twoLevelRow(v, 2, high, -high, temperature);
      assertClose(r.logp, [one.logp, two.logp], { ...F32, label: `${dtype} logp T=${temperature}` });
      assertClose(r.entropy!, [one.entropy, two.entropy], { ...F32, label: `${dtype} entropy T=${temperature}` });
      const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, dtype, temperature, gradLogp: Float32Array.of(1, 1) });
      assertClose([grad[2047], grad[0], grad[v - 1]], [one.gradLabel, one.gradLow, one.gradLow], { ...F32, label: `${dtype} grad row 0 T=${temperature}` });
      assertClose([grad[v + 2048], grad[v + v - 1], grad[v + 5]], [two.gradLabel, two.gradHigh, two.gradLow], { ...F32, label: `${dtype} grad row 1 T=${temperature}` });
    }
  });

  it('handles the f32 limits and denormals: ±FLT_MAX, 1e-45, in wide rows', () => {
    const v = 5000;
    // Row 0: all FLT_MAX (uniform); row 1: FLT_MAX at 3 entries, -FLT_MAX elsewhere (the
    // difference overflows to -Infinity: probability 0, exactly as the true e^-6.8e38);
    // row 2: denormals and zeros (uniform to f32 precision).
    const logits = new Float32Array(3 * v);
    logits.fill(FLT_MAX, 0, v);
    logits.fill(-FLT_MAX, v, 2 * v);
    for (const i of [0, 2048, v - 1]) logits[v + i] = FLT_MAX;
    for (let i = 0; i < v; i++) logits[2 * v + i] = i % 2 === 0 ? 1e-45 : -1e-45;
    const labels = Int32Array.of(17, 2048, 3);
    const r = tokenLogprobs({ logits, vocabSize: v, labels, withEntropy: true });
    assertClose(r.logp, [-Math.log(v), -Math.log(3), -Math.log(v)], { ...F32, label: 'logp' });
    assertClose(r.entropy!, [Math.log(v), Math.log(3), Math.log(v)], { ...F32, label: 'entropy' });
    const gradLogp = Float32Array.of(1, 1, 1);
    for (const gradEntropy of [undefined, Float32Array.of(1, -1, 0.5)]) {
      const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, gradLogp, gradEntropy });
      assert.ok(grad.every(Number.isFinite), 'finite gradient');
      // At a uniform row log p + H = 0, so the entropy term vanishes.
      assertClose([grad[17], grad[0], grad[v + 2048], grad[v], grad[v + 1], grad[2 * v + 3], grad[2 * v + 4]],
        [1 - 1 / v, -1 / v, 1 - 1 / 3, -1 / 3, 0, 1 - 1 / v, -1 / v], { ...F32, label: 'grad' });
    }
  });

  it('reads bf16 extremes: ±max, the smallest normal and denormals, ±Infinity and NaN', () => {
    const bf16Max = 3.3895313892515355e38;  // 0x7f7f
    const rows = [
      [0x7f7f, 0xff7f, 0x0001, 0x0000],  // max wins outright
      [0x0001, 0x8001, 0x0080, 0x0000],  // denormals, the smallest normal, 0: uniform
      [0xff80, 0x0000, 0x0001, 0x8000],  // -Infinity has probability 0
      [0x7f80, 0x0000, 0x0000, 0x0000],  // +Infinity: NaN row, as PyTorch
      [0x7fc0, 0x0000, 0x0000, 0x0000],  // NaN: NaN row
      [bf16(8192), bf16(-8192), bf16(8192), 0],  // ±2^13, exact in bf16
    ];
    const logits = Uint16Array.from(rows.flat());
    const labels = Int32Array.of(0, 2, 1, 0, 1, 2);
    const r = tokenLogprobs({ logits, vocabSize: 4, labels, dtype: 'bf16', withEntropy: true });
    assert.equal(bf16(bf16Max), 0x7f7f);
    assertClose(Array.from(r.logp.subarray(0, 3)), [0, -Math.log(4), -Math.log(3)], { ...F32, label: 'logp' });
    assertClose(Array.from(r.entropy!.subarray(0, 3)), [0, Math.log(4), Math.log(3)], { ...F32, label: 'entropy' });
    for (const t of [3, 4]) assert.ok(Number.isNaN(r.logp[t]) && Number.isNaN(r.entropy![t]), `row ${t} is NaN`);
    assertClose(r.logp[5], -Math.log(2), { ...F32, label: '±8192' });
  });

  it('gives the limits at tiny and huge temperatures, and refuses beyond [1e-37, 1e37] by name', () => {
    const v = 3000;
    const rng = new Random(41);
    const logits = rng.normals(2 * v, 2);
    logits[100] = 10;  // row 0's argmax
    logits[v + 2500] = 10;  // row 1's argmax
    const labels = Int32Array.of(100, 7);
    for (const temperature of [1e-37, 1e-30]) {
      // softmax(x / T) -> one-hot at the argmax: log-prob 0 there, (x - max) / T elsewhere.
      const r = tokenLogprobs({ logits, vocabSize: v, labels, temperature, withEntropy: true });
      assert.equal(r.logp[0], 0);
      assertClose(r.logp[1], (logits[v + 7] - 10) / temperature, { rtol: 1e-6, atol: 0 });
      assert.deepEqual(Array.from(r.entropy!), [0, 0]);
      const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature, gradLogp: Float32Array.of(1, 1) });
      // One-hot p: row 0's label has p = 1 (no gradient anywhere); row 1's has p = 0, so
      // 1/T at its label and -1/T at the argmax, 0 elsewhere.
      const want = new Float64Array(2 * v);
      want[v + 7] = 1 / temperature;
      want[v + 2500] = -1 / temperature;
      assertClose(grad, want, { rtol: 1e-6, atol: 0, label: `grad T=${temperature}` });
    }
    for (const temperature of [1e30, 1e37]) {
      // -> uniform: log-prob -log V, entropy log V, gradients (1[v = label] - 1/V) / T.
      const r = tokenLogprobs({ logits, vocabSize: v, labels, temperature, withEntropy: true });
      assertClose(r.logp, [-Math.log(v), -Math.log(v)], F32);
      assertClose(r.entropy!, [Math.log(v), Math.log(v)], F32);
      const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature, gradLogp: Float32Array.of(1, 1) });
      // -1/(V T) is an f32 denormal at T = 1e37: spacing 1.4e-45.
      assertClose([grad[100], grad[0], grad[v + 7]], [(1 - 1 / v) / temperature, -1 / v / temperature, (1 - 1 / v) / temperature], { rtol: 1e-5, atol: 1e-44 });
    }
    const call = (temperature: number) => () => tokenLogprobs({ logits, vocabSize: v, labels, temperature });
    checkBadInputs([
      { name: 'temperature 9e-38', call: call(9e-38), error: RangeError, message: 'Expected a number in [1e-37, 1e+37] for temperature but received 9e-38' },
      { name: 'temperature 1.1e37', call: call(1.1e37), error: RangeError, message: 'for temperature' },
      { name: 'temperature 5e-324', call: call(5e-324), error: RangeError, message: 'for temperature' },
    ]);
  });
});

describe('numerics: log-ratio differences of ±1e3', () => {
  it('ppoLoss: the clamp to ±20 keeps every result finite; dual clip and KL as torch gives them', () => {
    const e20 = Math.exp(20);
    // [logp - oldLogp, A, dualClip] -> [loss, clipFraction, clipFractionLower]
    const cases: [number, number, number | undefined, number, number, number][] = [
      [1e3, 1, undefined, -1.2, 1, 0],   // r = e^20 clipped to 1.2
      [1e3, -1, undefined, e20, 0, 0],   // L1 = e^20 > L2 = 1.2: unclipped, huge but finite
      [1e3, -1, 3, 3, 0, 1],             // the dual clip caps it at -A c = 3
      [-1e3, 1, undefined, -Math.exp(-20), 0, 0],
      [-1e3, -1, undefined, 0.8, 1, 0],
      [-1e3, -1, 3, 0.8, 1, 0],
    ];
    for (const [d, a, dualClip, loss, clipFraction, clipFractionLower] of cases) {
      const r = ppoLoss({
        logp: Float32Array.of(d > 0 ? 0 : d), oldLogp: Float32Array.of(d > 0 ? -d : 0),
        advantages: Float32Array.of(a), mask: Uint8Array.of(1), dualClip,
        refLogp: Float32Array.of(d > 0 ? -d : 0), klCoef: 0.1,
      });
      const label = `d=${d} A=${a} dualClip=${dualClip}`;
      // k3 of x = ±1e3: x' = ±20, e^-x' + x' - 1 clamped to 10.
      assertClose(r.pgLoss, loss, { ...F32, label });
      assertClose(r.klLoss!, 10, { ...F32, label: `${label} k3` });
      assert.equal(Math.abs(r.grad[0]), 0, `${label}: every clamp is active, no gradient`);
      assert.equal(r.clipFraction, clipFraction, label);
      assert.equal(r.clipFractionLower, clipFractionLower, label);
      assert.equal(r.approxKl, d > 0 ? -20 : 20, label);
      assert.equal(r.nonFinite, 0, label);
    }
    // GSPO: the sequence log-ratio +1e3 is capped at 10 (then clipped); -1e3 underflows to 0.
    const seq = ppoLoss({
      logp: Float32Array.of(0, 0, -1e3, -1e3), oldLogp: Float32Array.of(-1e3, -1e3, 0, 0),
      advantages: Float32Array.of(-1, -1, 1, 1), mask: Uint8Array.of(1, 1, 1, 1),
      seqOffsets: Int32Array.of(0, 2, 4), ratioLevel: 'sequence', aggregation: 'seq-mean-token-mean',
    });
    // seq 0: A = -1, s = e^10: L = max(e^10, 1.2) = e^10; seq 1: A = 1, s = 0: L = max(-0, -0.8) = 0.
    assertClose(seq.loss, Math.exp(10) / 2, { ...F32, label: 'GSPO loss' });
    assert.ok(seq.grad.every((g) => g === 0), `GSPO grad ${seq.grad}`);
  });

  it('dpoLoss: -log sigmoid of ±1e3 margins is 0 and 1e3 exactly, gradients exact, for every variant', () => {
    const zero = new Float32Array(2);
    const pairs = { policyChosen: Float32Array.of(1e3, -1e3), policyRejected: zero, refChosen: zero, refRejected: zero };
    const sigmoid = dpoLoss({ ...pairs, beta: 1 });
    assert.equal(sigmoid.loss, (0 + 1e3) / 2);
    assert.deepEqual(Array.from(sigmoid.gradChosen), [0, -0.5]);  // sigma(-1e3) = 0 exactly; -1 / P
    assert.equal(sigmoid.rewardAccuracy, 0.5);
    // Each pair alone: the saturated one gives exactly 0.
    const won = dpoLoss({ policyChosen: Float32Array.of(1e3), policyRejected: zero.subarray(1), refChosen: zero.subarray(1), refRejected: zero.subarray(1), beta: 1 });
    assert.equal(won.loss, 0);
    assert.equal(won.gradChosen[0], 0);
    // cDPO (ls = 0.1): -(0.9) log sigma(z) - 0.1 log sigma(-z) = 0.1 z for z = 1e3, 0.9 |z| for z = -1e3.
    const cdpo = dpoLoss({ ...pairs, beta: 1, labelSmoothing: 0.1 });
    assertClose(cdpo.loss, (100 + 900) / 2, F32);
    assertClose(cdpo.gradChosen, [0.1 / 2, -0.9 / 2], F32);
    // robust: (-(1-ls) log sigma(z) + ls log sigma(-z)) / (1 - 2 ls).
    const robust = dpoLoss({ ...pairs, beta: 1, labelSmoothing: 0.1, variant: 'robust' });
    assertClose(robust.loss, (0.1 * -1e3 / 0.8 + 0.9 * 1e3 / 0.8) / 2, F32);
    // hinge relu(1 - z); ipo (delta - 1/(2 beta))^2 on the same margins.
    const hinge = dpoLoss({ ...pairs, beta: 1, variant: 'hinge' });
    assert.equal(hinge.loss, (0 + 1001) / 2);
    assert.deepEqual(Array.from(hinge.gradChosen), [0, -0.5]);
    const ipo = dpoLoss({ ...pairs, beta: 1, variant: 'ipo' });
    assertClose(ipo.loss, (999.5 ** 2 + 1000.5 ** 2) / 2, F32);
    assertClose(ipo.gradChosen, [999.5, -1000.5], F32);
    // beta * delta = ±1e4 and ±3e38 stay finite and exact the same way.
    for (const margin of [1e4, 3e38]) {
      const r = dpoLoss({ policyChosen: Float32Array.of(margin, -margin), policyRejected: zero, refChosen: zero, refRejected: zero, beta: 1 });
      assertClose(r.loss, Math.fround(margin) / 2, { ...F32, label: `margin ${margin}` });
      assert.deepEqual(Array.from(r.gradChosen), [0, -0.5]);
    }
  });
});

describe('numerics: groupAdvantages', () => {
  it('gives exactly 0, never NaN, to groups of equal rewards (epsilon 0 included), on every path', async () => {
    const rewards = new Float32Array(24).fill(0.7);
    rewards.fill(-3e38, 16);
    const scattered = Int32Array.from({ length: 24 }, (_, i) => (i * 5) % 3);
    for (const epsilon of [1e-6, 0]) {
      for (const grouping of [{ groupSize: 8 }, { groupIds: scattered.map((g, i) => (i < 16 ? g : 9)) }]) {
        const a = groupAdvantages({ rewards, epsilon, ...grouping });
        assert.ok(a.every((x) => Object.is(x, 0)), `eps=${epsilon} ${Object.keys(grouping)[0]}: ${a}`);
        assert.deepEqual(await groupAdvantagesAsync({ rewards, epsilon, ...grouping }), a);
      }
    }
  });

  it('gives a group of one mean 0 and std 1: A = r / (1 + epsilon)', () => {
    const rewards = Float32Array.of(5, -3, 1e30, 0);
    const want = Array.from(rewards, (r) => r / (1 + 1e-6));
    assertClose(groupAdvantages({ rewards, groupSize: 1 }), want, F32);
    assertClose(groupAdvantages({ rewards, groupIds: Int32Array.of(4, 1, 3, 2) }), want, F32);
  });

  it('normalises a million-member group to f32 rounding of the two-pass float64 value; one pass would not be', () => {
    const n = 1_000_000;
    const rng = new Random(7);
    const ids = Int32Array.from({ length: n }, (_, i) => (i % 3 === 0 ? 5 : 2));  // two interleaved groups
    for (const offset of [0, 1e3, 1e6]) {
      // Rewards far from 0 relative to their spread: what a one-pass sum of squares cancels on.
      const rewards = Float32Array.from({ length: n }, () => offset + rng.uniform(0, 1));
      let sum = 0;
      let sumSquares = 0;
      for (const r of rewards) {
        sum += r;
        sumSquares += r * r;
      }
      const mean = sum / n;
      let squares = 0;
      for (const r of rewards) squares += (r - mean) ** 2;
      const std = Math.sqrt(squares / (n - 1));
      const onePassStd = Math.sqrt(Math.max(0, (sumSquares - sum * mean) / (n - 1)));
      const got = groupAdvantages({ rewards, groupSize: n });
      let worst = 0;
      for (let i = 0; i < n; i++) {
        const want = (rewards[i] - mean) / (std + 1e-6);
        worst = Math.max(worst, Math.abs(got[i] - want) / Math.max(Math.abs(want), 1e-2));
      }
      console.log(`# offset ${offset}: worst relative error ${worst.toExponential(2)} (two-pass float64 reference); one-pass float64 std off by ${(Math.abs(onePassStd - std) / std).toExponential(2)}`);
      assert.ok(worst < 2e-7, `offset ${offset}: ${worst}`);
      // The scattered path (ids) sums each group in the same order: the same result per group.
      const byIds = groupAdvantages({ rewards, groupIds: ids });
      const idsRef = new Float64Array(n);
      for (const id of [5, 2]) {
        const members = [...ids.keys()].filter((i) => ids[i] === id);
        const m = members.reduce((s, i) => s + rewards[i], 0) / members.length;
        const sd = Math.sqrt(members.reduce((s, i) => s + (rewards[i] - m) ** 2, 0) / (members.length - 1));
        for (const i of members) idsRef[i] = (rewards[i] - m) / (sd + 1e-6);
      }
      let worstIds = 0;
      for (let i = 0; i < n; i++) worstIds = Math.max(worstIds, Math.abs(byIds[i] - idsRef[i]) / Math.max(Math.abs(idsRef[i]), 1e-2));
      assert.ok(worstIds < 2e-7, `offset ${offset} ids: ${worstIds}`);
    }
  });
});

describe('numerics: nonFinite counts', () => {
  it('ppoLoss counts exactly the masked-in tokens with a NaN or ±Infinity input, over chunks and lanes', async () => {
    // DESIGN.md / tirl.h: masked-out tokens are neither counted nor propagated.
    const rng = new Random(99);
    const n = 70_001;  // several 16,384-token chunks and a ragged tail
    const arrays = {
      logp: rng.floats(n, -3, 0), oldLogp: rng.floats(n, -3, 0), advantages: rng.normals(n),
      refLogp: rng.floats(n, -3, 0), weights: rng.floats(n, 0.5, 1.5),
    };
    const mask = rng.mask(n, 0.7);
    const poisoned = new Uint8Array(n);
    const values = [NaN, Infinity, -Infinity];
    for (let k = 0; k < 3000; k++) {
      const t = rng.int(0, n);
      const name = (['logp', 'oldLogp', 'advantages', 'refLogp', 'weights'] as const)[rng.int(0, 5)];
      arrays[name][t] = values[rng.int(0, 3)];
      poisoned[t] = 1;
    }
    let want = 0;
    let wantWithoutOptional = 0;
    for (let t = 0; t < n; t++) {
      if (!mask[t]) continue;
      if (poisoned[t]) want++;
      if (!Number.isFinite(arrays.logp[t]) || !Number.isFinite(arrays.oldLogp[t]) || !Number.isFinite(arrays.advantages[t])) wantWithoutOptional++;
    }
    const offsets = rng.seqOffsets(50, 1, 2 * Math.ceil(n / 50));
    offsets[offsets.length - 1] = n;
    for (let i = offsets.length - 2; i >= 0; i--) offsets[i] = Math.min(offsets[i], offsets[i + 1]);
    for (const aggregation of ['token-mean', 'token-sum', 'seq-mean-token-mean'] as const) {
      for (const ratioLevel of ['token', 'sequence'] as const) {
        const o = { ...arrays, mask, aggregation, ratioLevel, seqOffsets: offsets, klCoef: 0.1, dualClip: 3 };
        assert.equal(ppoLoss(o).nonFinite, want, `${aggregation} ${ratioLevel}`);
        assert.equal((await ppoLossAsync(o)).nonFinite, want, `${aggregation} ${ratioLevel} async`);
      }
    }
    // Without refLogp and weights their non-finite values are not inputs, so not counted.
    const bare = ppoLoss({ logp: arrays.logp, oldLogp: arrays.oldLogp, advantages: arrays.advantages, mask });
    assert.equal(bare.nonFinite, wantWithoutOptional);
    assert.ok(want > 1000 && wantWithoutOptional < want);
  });
});
