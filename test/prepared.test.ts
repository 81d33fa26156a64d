/**
 * Prepared calls (preparePpoLoss): options read once, then only the arrays on every call.
 * The results are bitwise those of the plain call with the same options, sync and async;
 * bad input is the same TypeError/RangeError, naming the argument, as for the plain call;
 * an array given to prepare, or an option given to the prepared call, is a TypeError
 * naming it; detached buffers are refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { dpoLoss, ppoLoss, ppoLossAsync, preparePpoLoss, type PpoLossArrays, type PpoLossOptions, type PpoLossPositional, type PpoLossResult, type PpoLossSettings } from '../lib/index.js';
import { native } from '../lib/native.js';
import { assertBitwiseEqual, detached, Random } from './support.js';

const ARRAY_KEYS = ['logp', 'oldLogp', 'advantages', 'mask', 'seqOffsets', 'refLogp', 'weights', 'out'] as const;

function split(options: PpoLossOptions): { arrays: PpoLossArrays; settings: PpoLossSettings } {
  const arrays: Record<string, unknown> = {};
  const settings: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options)) {
    ((ARRAY_KEYS as readonly string[]).includes(key) ? arrays : settings)[key] = value;
  }
  return { arrays: arrays as unknown as PpoLossArrays, settings: settings as PpoLossSettings };
}

function assertSameResult(got: PpoLossResult, want: PpoLossResult, label: string): void {
  assert.deepEqual(Object.keys(got), Object.keys(want), `${label}: result keys`);
  for (const key of Object.keys(want) as (keyof PpoLossResult)[]) {
    if (key === 'grad') assertBitwiseEqual(got.grad, want.grad, `${label} grad`);
    else assert.ok(Object.is(got[key], want[key]), `${label} ${key}: ${String(got[key])} vs ${String(want[key])}`);
  }
}

/** The arguments of a prepared call's positional form, in its order. */
function positional(a: PpoLossArrays): PpoLossPositional {
  return [a.logp, a.oldLogp, a.advantages, a.mask, a.refLogp, a.weights, a.seqOffsets, a.out];
}

/** The message of what `call` throws, and its class. */
function thrown(call: () => unknown): { type: unknown; message: string } {
  try {
    call();
  } catch (error) {
    return { type: (error as Error).constructor, message: (error as Error).message };
  }
  assert.fail('did not throw');
}

describe('preparePpoLoss', () => {
  const rng = new Random(20);
  const n = 700;
  const seqOffsets = Int32Array.from([0, 1, 90, 90, 400, 700]); // a one-token and an empty sequence
  const logp = rng.floats(n, -4, -0.1);
  const base = {
    logp,
    oldLogp: logp.map((x) => x + rng.normal() * 0.3),
    advantages: rng.normals(n),
    mask: rng.mask(n, 0.7),
  };
  const refLogp = logp.map((x) => x + rng.normal() * 0.1);
  const weights = rng.floats(n, 0, 2);
  const CASES: [string, PpoLossOptions][] = [
    ['defaults', { ...base }],
    ['dual clip, KL k3, weights', { ...base, clipLow: 0.2, clipHigh: 0.28, dualClip: 3, refLogp, klCoef: 0.01, weights }],
    ['seq-mean-token-mean, normalisers', { ...base, seqOffsets, aggregation: 'seq-mean-token-mean', seqNormalizer: 7, dpSize: 2 }],
    ['gspo', { ...base, seqOffsets, policyLoss: 'gspo', clipLow: 0.1 }],
    ['clip_cov with a seed', { ...base, policyLoss: 'clip_cov', clipCovRatio: 0.05, clipCovLb: -5, clipCovUb: 5, seed: 3 }],
    ['kl_cov', { ...base, policyLoss: 'kl_cov', klCovRatio: 0.1 }],
    ['bypass reinforce, batch-normalised sequence weights', { ...base, seqOffsets, policyLoss: 'bypass_mode', lossType: 'reinforce', rolloutIs: 'sequence', rolloutIsBatchNormalize: true }],
    ['dro', { ...base, policyLoss: 'dro', droBeta: 0.5, klEstimator: 'k1', refLogp, klCoef: 0.1 }],
    ['nothing masked in', { ...base, mask: new Uint8Array(n) }],
    ['no tokens', { logp: new Float32Array(0), oldLogp: new Float32Array(0), advantages: new Float32Array(0), mask: new Uint8Array(0) }],
  ];

  it('gives bitwise the results of ppoLoss, sync and async, for every kind of option', async () => {
    for (const [label, options] of CASES) {
      const { arrays, settings } = split(options);
      const prepared = preparePpoLoss(settings);
      const want = ppoLoss(options);
      assertSameResult(prepared(arrays), want, `${label} sync`);
      assertSameResult(await prepared.async(arrays), await ppoLossAsync(options), `${label} async`);
      // Called again, and with out: the same numbers, written into out.
      const grad = new Float32Array(options.logp.length);
      const withOut = prepared({ ...arrays, out: { grad } });
      assert.equal(withOut.grad, grad, `${label}: out.grad is the result`);
      assertSameResult(withOut, want, `${label} out`);
    }
  });

  it('positional: gives bitwise the results of ppoLoss for every kind of option', () => {
    for (const [label, options] of CASES) {
      const { arrays, settings } = split(options);
      const prepared = preparePpoLoss(settings);
      const want = ppoLoss(options);
      assertSameResult(prepared.positional(...positional(arrays)), want, `${label} positional`);
      const grad = new Float32Array(options.logp.length);
      const withOut = prepared.positional(...positional({ ...arrays, out: { grad } }));
      assert.equal(withOut.grad, grad, `${label}: out.grad is the result`);
      assertSameResult(withOut, want, `${label} positional with out`);
    }
  });

  it('positional: throws what ppoLoss throws for bad arrays, and a TypeError for too many arguments', () => {
    const bad: [string, PpoLossOptions][] = [
      ['missing oldLogp', { ...base, oldLogp: undefined } as unknown as PpoLossOptions],
      ['wrong type', { ...base, mask: new Float32Array(n) } as unknown as PpoLossOptions],
      ['short advantages', { ...base, advantages: base.advantages.subarray(1) }],
      ['short refLogp', { ...base, refLogp: refLogp.subarray(2), klCoef: 0.1 }],
      ['short weights', { ...base, policyLoss: 'gpg', weights: weights.subarray(1) } as PpoLossOptions],
      ['weights of a loss that does not read them', { ...base, policyLoss: 'bypass_mode', weights } as PpoLossOptions],
      ['seqOffsets of the wrong type', { ...base, seqOffsets: new Float32Array(2) } as unknown as PpoLossOptions],
      ['clipLow out of range', { ...base, clipLow: 1.5 }],
      ['seqOffsets out of order', { ...base, aggregation: 'seq-mean-token-sum', seqOffsets: Int32Array.from([0, 9, 3, n]) }],
      ['out.grad too short', { ...base, out: { grad: new Float32Array(n - 1) } }],
      ['out not an object', { ...base, out: 3 } as unknown as PpoLossOptions],
      ['a detached logp', { ...base, logp: detached((k) => new Float32Array(k)) }],
      ['a detached out.grad', { ...base, out: { grad: detached((k) => new Float32Array(k)) } }],
    ];
    for (const [label, options] of bad) {
      const { arrays, settings } = split(options);
      const want = thrown(() => ppoLoss(options));
      assert.ok(want.type === TypeError || want.type === RangeError, `${label}: ${want.message}`);
      assert.deepEqual(thrown(() => preparePpoLoss(settings).positional(...positional(arrays))), want, label);
    }
    const prepared = preparePpoLoss({});
    const call = prepared.positional as unknown as (...args: unknown[]) => PpoLossResult;
    assert.deepEqual(thrown(() => call(base.logp, base.oldLogp, base.advantages, base.mask, undefined, undefined, undefined, undefined, 1)), {
      type: TypeError,
      message: 'ppoLoss: Expected at most 8 arguments (logp, oldLogp, advantages, mask, refLogp, weights, seqOffsets, out) but received 9',
    });
    // The object form's argument given to the positional form: named as the first array.
    assert.deepEqual(thrown(() => call(base)), { type: TypeError, message: 'ppoLoss: Expected a Float32Array for logp but received an object' });
    assert.deepEqual(thrown(() => call()), { type: TypeError, message: 'ppoLoss: Expected a Float32Array for logp but received undefined' });
  });

  it('takes any arrays of any length on each call', () => {
    const prepared = preparePpoLoss({ clipLow: 0.3 });
    for (const length of [1, 5, 300]) {
      const arrays = { logp: base.logp.subarray(0, length), oldLogp: base.oldLogp.subarray(0, length), advantages: base.advantages.subarray(0, length), mask: base.mask.subarray(0, length) };
      assertSameResult(prepared(arrays), ppoLoss({ ...arrays, clipLow: 0.3 }), `length ${length}`);
    }
  });

  it('refuses an array given to prepare and an option given to the prepared call, naming it', () => {
    for (const key of ARRAY_KEYS) {
      const error = thrown(() => preparePpoLoss({ [key]: new Float32Array(2) } as PpoLossSettings));
      assert.equal(error.type, TypeError);
      assert.equal(error.message, `ppoLoss: Expected no ${key} (an array: pass it to the prepared call) but received a Float32Array of length 2`);
    }
    const prepared = preparePpoLoss({});
    const error = thrown(() => prepared({ ...base, clipLow: 0.5 } as PpoLossArrays));
    assert.equal(error.type, TypeError);
    assert.match(error.message, /^ppoLoss: Expected no option named 'clipLow' \(a prepared ppoLoss takes only its arrays: logp, oldLogp, advantages, mask, refLogp, weights, seqOffsets, out\) but received the number 0\.5$/);
    assert.throws(() => preparePpoLoss({ tempreature: 1 } as PpoLossSettings), /^TypeError: ppoLoss: Expected no option named 'tempreature' \(ppoLoss reads /);
    assert.throws(() => preparePpoLoss({ policyLoss: 'gpg', clipLow: 0.2 }), /^TypeError: ppoLoss: Expected no clipLow \(not read by policyLoss 'gpg'\) but received the number 0\.2/);
    assert.throws(() => preparePpoLoss({ clipLow: '0.2' } as unknown as PpoLossSettings), /^TypeError: ppoLoss: Expected a number for clipLow but received a string$/);
    assert.throws(() => preparePpoLoss(null as unknown as PpoLossSettings), /^TypeError: ppoLoss: Expected an options object for the first argument but received null$/);
    assert.throws(() => prepared(undefined as unknown as PpoLossArrays), /^TypeError: ppoLoss: Expected an options object for the first argument but received undefined$/);
  });

  it('throws what ppoLoss throws for bad arrays and values out of range', async () => {
    const bad: [string, PpoLossOptions][] = [
      ['missing oldLogp', { ...base, oldLogp: undefined } as unknown as PpoLossOptions],
      ['wrong type', { ...base, mask: new Float32Array(n) } as unknown as PpoLossOptions],
      ['short advantages', { ...base, advantages: base.advantages.subarray(1) }],
      ['weights of a loss that does not read them', { ...base, policyLoss: 'gpg', weights: weights.subarray(1) } as PpoLossOptions],
      ['clipLow out of range', { ...base, clipLow: 1.5 }],
      ['seqOffsets needed', { ...base, aggregation: 'seq-mean-token-sum' }],
      ['seqOffsets out of order', { ...base, aggregation: 'seq-mean-token-sum', seqOffsets: Int32Array.from([0, 9, 3, n]) }],
      ['refLogp needed', { ...base, klCoef: 0.5 }],
      ['out.grad too short', { ...base, out: { grad: new Float32Array(n - 1) } }],
      ['a detached logp', { ...base, logp: detached((k) => new Float32Array(k)) }],
    ];
    for (const [label, options] of bad) {
      const { arrays, settings } = split(options);
      const want = thrown(() => ppoLoss(options));
      assert.ok(want.type === TypeError || want.type === RangeError, `${label}: ${want.message}`);
      const prepared = preparePpoLoss(settings);
      assert.deepEqual(thrown(() => prepared(arrays)), want, label);
      // The async form never throws: bad arrays are a rejected Promise, as in ppoLossAsync.
      let pending: Promise<PpoLossResult> | undefined;
      assert.doesNotThrow(() => void (pending = prepared.async(arrays)), `${label} async`);
      await assert.rejects(pending!, (e: Error) => e.constructor === want.type && e.message === want.message, `${label} async`);
    }
  });

  it("async: computes from the arrays as they were, and rejects when out was detached before it settled", async () => {
    const prepared = preparePpoLoss({ clipLow: 0.2 });
    const logpCopy = Float32Array.from(base.logp);
    const arrays = { ...base, logp: logpCopy };
    const want = ppoLoss({ ...base, clipLow: 0.2 });
    const pending = prepared.async(arrays);
    logpCopy.fill(0);
    assertSameResult(await pending, want, 'inputs changed after the call');
    const grad = new Float32Array(n);
    const rejected = prepared.async({ ...base, out: { grad } });
    structuredClone(grad.buffer, { transfer: [grad.buffer] });
    await assert.rejects(rejected, /^TypeError: ppoLoss: Expected a Float32Array of length 700 for out\.grad but received one whose buffer was detached before the call settled$/);
  });

  it('lives as long as its function: the async form alone keeps the options', async () => {
    let prepared: ReturnType<typeof preparePpoLoss> | undefined = preparePpoLoss({ clipLow: 0.25, dualClip: 2 });
    const later = prepared.async;
    prepared = undefined;
    globalThis.gc?.();
    await new Promise((resolve) => setImmediate(resolve));
    globalThis.gc?.();
    assertSameResult(await later(base), ppoLoss({ ...base, clipLow: 0.25, dualClip: 2 }), 'after the sync function was dropped');
  });
});

describe('<op>CCalls (the bench reference: the C call alone)', () => {
  const rng = new Random(21);
  const n = 300;
  const logp = rng.floats(n, -4, -0.1);
  const options: PpoLossOptions = { logp, oldLogp: logp.map((x) => x + rng.normal() * 0.3), advantages: rng.normals(n), mask: rng.mask(n, 0.7), clipLow: 0.2, dualClip: 3 };

  it("writes bitwise ppoLoss's gradient into out.grad, however many times it calls", () => {
    const want = ppoLoss(options);
    for (const calls of [1, 7]) {
      const grad = new Float32Array(n);
      assert.equal(native.ppoLossCCalls({ ...options, out: { grad } }, calls), undefined);
      assertBitwiseEqual(grad, want.grad, `${calls} calls`);
    }
  });

  it("refuses what ppoLoss refuses, and a count that is not an integer in [1, 2^31 - 1]", () => {
    const bad = { ...options, clipLow: 1.5 };
    assert.deepEqual(thrown(() => native.ppoLossCCalls(bad, 1)), thrown(() => ppoLoss(bad)));
    assert.deepEqual(thrown(() => native.ppoLossCCalls({ ...options, clipLo: 1 } as PpoLossOptions, 1)), thrown(() => ppoLoss({ ...options, clipLo: 1 } as PpoLossOptions)));
    for (const calls of [0, 1.5, -1, 2 ** 31, NaN]) {
      assert.throws(() => native.ppoLossCCalls(options, calls), (e: Error) => e instanceof RangeError && /^ppoLossCCalls: Expected an integer in \[1, 2147483647\] for calls but received /.test(e.message), String(calls));
    }
    assert.throws(() => native.ppoLossCCalls(options, '3' as unknown as number), /^TypeError: ppoLossCCalls: Expected an integer in \[1, 2147483647\] for calls but received a string$/);
  });

  it('writes the wall-clock and CPU seconds a C call took into times, and refuses a times that cannot hold them', () => {
    const times = new Float64Array(3).fill(-1);
    native.ppoLossCCalls(options, 5, times);
    assert.ok(times[0] > 0 && times[0] < 1 && times[1] >= 0 && times[1] < 1, String(times));
    assert.equal(times[2], -1);
    for (const [bad, what] of [
      [new Float64Array(1), 'a Float64Array of length 1'],
      [new Float32Array(2), 'a Float32Array of length 2'],
      [[0, 0], 'an Array of length 2'],
      [detached((n) => new Float64Array(n)), 'a Float64Array of length 0'],
    ] as const) {
      assert.throws(
        () => native.ppoLossCCalls(options, 1, bad as unknown as Float64Array),
        (e: Error) => e instanceof TypeError && e.message === `ppoLossCCalls: Expected a Float64Array of length at least 2 for times but received ${what}`,
        what,
      );
    }
  });

  it("exists for every op, and writes what the op's sync form writes (dpoLoss)", () => {
    for (const op of ['ppoLoss', 'dpoLoss', 'groupAdvantages', 'advantages', 'feedbackMask', 'sequenceLogprobs', 'sequenceLogprobsBackward', 'tokenLogprobs', 'tokenLogprobsBackward', 'rolloutCorrection']) {
      assert.equal(typeof native[`${op}CCalls`], 'function', op);
    }
    const pairs = 37;
    const arrays = { policyChosen: rng.floats(pairs, -40, -1), policyRejected: rng.floats(pairs, -40, -1), refChosen: rng.floats(pairs, -40, -1), refRejected: rng.floats(pairs, -40, -1) };
    const want = dpoLoss(arrays);
    const out = { gradChosen: new Float32Array(pairs), gradRejected: new Float32Array(pairs), chosenRewards: new Float32Array(pairs), rejectedRewards: new Float32Array(pairs) };
    const times = new Float64Array(2);
    native.dpoLossCCalls({ ...arrays, out }, 3, times);
    for (const key of ['gradChosen', 'gradRejected', 'chosenRewards', 'rejectedRewards'] as const) assertBitwiseEqual(out[key], want[key], key);
    assert.ok(times[0] > 0, String(times));
  });
});
