/**
 * rolloutCorrection against the float64 reference of test/reference/rollout_correction.ts,
 * which follows verl's verl/trainer/ppo/rollout_corr_helper.py at verl-project/verl commit
 * 1dda039b9c6311889a9c9a26040677e1254814f9 (importance weights, TIS / IcePop, batch
 * normalisation, the eleven rejection options and their chaining, verl's metric names).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  info,
  ppoLoss,
  rolloutCorrection,
  rolloutCorrectionAsync,
  setThreads,
  type RolloutCorrectionOptions,
  type RolloutRejectionOption,
} from '../lib/index.js';
import { reference as ppoReference } from './reference/ppo_loss.js';
import { rolloutCorrectionReference } from '../benchmarks/peers/rollout_correction.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, detached, Random } from './support.js';

const ALL_OPTIONS: RolloutRejectionOption[] = [
  'token_k1', 'token_k2', 'token_k3', 'seq_sum_k1', 'seq_sum_k2', 'seq_sum_k3',
  'seq_mean_k1', 'seq_mean_k2', 'seq_mean_k3', 'seq_max_k2', 'seq_max_k3',
];

/**
 * A ragged batch with empty and fully masked sequences; the rollout log-probs differ from
 * the trainer's by noise of scale `mismatch` (what bf16 sampling against an f32 trainer gives).
 */
function randomBatch(rng: Random, b: number, maxLen: number, mismatch = 0.3) {
  const seqOffsets = rng.seqOffsets(b, 0, maxLen);
  const n = seqOffsets[b];
  const logp = new Float32Array(n);
  const rolloutLogp = new Float32Array(n);
  for (let t = 0; t < n; t++) {
    logp[t] = -Math.abs(rng.normal()) * 2;
    rolloutLogp[t] = logp[t] + rng.normal() * mismatch;
  }
  const mask = rng.mask(n, 0.8);
  if (b > 2) mask.fill(0, seqOffsets[1], seqOffsets[2]); // one fully masked sequence
  return { logp, rolloutLogp, mask, seqOffsets };
}

/** Kernel and reference agree: weights, mask, the same stats keys, each value close. */
function check(options: RolloutCorrectionOptions, label: string, { rtol = 1e-7, atol = 1e-9 } = {}) {
  const got = rolloutCorrection(options);
  const want = rolloutCorrectionReference(options);
  assertClose(got.weights, Float32Array.from(want.weights), { rtol: 2e-7, atol: 0, label: `${label}: weights` });
  assert.deepEqual([...got.mask], [...want.mask], `${label}: mask`);
  assert.deepEqual(Object.keys(got.stats).sort(), Object.keys(want.stats).sort(), `${label}: stats keys`);
  for (const [key, value] of Object.entries(want.stats)) {
    assertClose((got.stats as unknown as Record<string, number>)[key], value, { rtol, atol, label: `${label}: ${key}` });
  }
  assert.equal(got.nonFinite, want.nonFinite, `${label}: nonFinite`);
  return got;
}

describe('rolloutCorrection', () => {
  it('works a hand-computed example (token TIS, token_k1)', () => {
    // One sequence, d = logp - rolloutLogp = [0, ln 3, -ln 2] (in float32).
    const logp = Float32Array.from([-1, -1, -1]);
    const rolloutLogp = Float32Array.from([-1, -1 - Math.log(3), -1 + Math.log(2)]);
    const mask = Uint8Array.from([1, 1, 1]);
    const seqOffsets = Int32Array.from([0, 3]);
    const r = rolloutCorrection({
      logp, rolloutLogp, mask, seqOffsets, rolloutIs: 'token', rolloutIsThreshold: 2,
      rolloutRs: ['token_k1'], rolloutRsThreshold: 2.5, // keep 1/2.5 <= pi_rollout/pi_trainer <= 2.5
    });
    assertClose(r.weights, [1, 2, 0.5], { rtol: 1e-6 }); // 3 truncated to 2
    assert.deepEqual([...r.mask], [1, 0, 1]); // ratio 1/3 < 1/2.5 is rejected
    assertClose(r.stats.rollout_is_mean!, 3.5 / 3, { rtol: 1e-6 });
    assertClose(r.stats.rollout_is_ratio_fraction_high!, 1 / 3);
    assertClose(r.stats.rollout_rs_masked_fraction!, 1 / 3);
    assertClose(r.stats.rollout_rs_seq_masked_fraction!, 1);
    assertClose(r.stats.kl, (0 - Math.log(3) + Math.log(2)) / 3, { rtol: 1e-6 });
  });

  it('matches the reference for every importance-weight mode', () => {
    const rng = new Random(11);
    for (const [b, maxLen] of [[1, 5], [7, 40], [300, 120]] as const) {
      const batch = randomBatch(rng, b, maxLen);
      for (const rolloutIs of ['none', 'token', 'sequence'] as const) {
        const bands = rolloutIs === 'none' ? [{}] : [{}, { rolloutIsThresholdLower: 0.5 }, { rolloutIsThreshold: 1.3, rolloutIsThresholdLower: 0.9 }];
        for (const band of bands) {
          for (const rolloutIsBatchNormalize of rolloutIs === 'none' ? [undefined] : [false, true]) {
            check({ ...batch, rolloutIs, ...band, rolloutIsBatchNormalize },
              `B=${b} ${rolloutIs} ${JSON.stringify(band)} norm=${rolloutIsBatchNormalize}`);
          }
        }
      }
    }
  });

  it('matches the reference for every rejection option, alone and chained', () => {
    const rng = new Random(12);
    const batch = randomBatch(rng, 200, 60, 0.2);
    // Bounds that keep some and reject some of each statistic.
    const threshold: Record<RolloutRejectionOption, number> = {
      token_k1: 1.3, token_k2: 0.02, token_k3: 0.02, seq_sum_k1: 2, seq_sum_k2: 0.6, seq_sum_k3: 0.6,
      seq_mean_k1: 1.03, seq_mean_k2: 0.02, seq_mean_k3: 0.02, seq_max_k2: 0.08, seq_max_k3: 0.08,
    };
    for (const option of ALL_OPTIONS) {
      const got = check({ ...batch, rolloutIs: 'none', rolloutRs: [option], rolloutRsThreshold: threshold[option] }, option);
      const rejected = got.stats.rollout_rs_masked_fraction!;
      assert.ok(rejected > 0.01 && rejected < 0.99, `${option} rejects ${rejected}: the test should exercise both sides`);
      if (option.endsWith('k1')) {
        // An explicit lower bound (verl's "lower_upper").
        check({ ...batch, rolloutIs: 'none', rolloutRs: [option], rolloutRsThreshold: threshold[option], rolloutRsThresholdLower: 0.95 },
          `${option} with a lower bound`);
      }
    }
    // Chains, with per-option thresholds, a shared k1 lower bound, and verl's string form.
    const chain: RolloutRejectionOption[] = ['token_k1', 'seq_mean_k3', 'seq_max_k2'];
    const perOption = chain.map((o) => threshold[o]);
    const chained = check({ ...batch, rolloutIs: 'token', rolloutRs: chain, rolloutRsThreshold: perOption }, 'chain');
    const asString = rolloutCorrection({ ...batch, rolloutIs: 'token', rolloutRs: ' token_k1, seq_mean_k3 ,seq_max_k2', rolloutRsThreshold: perOption });
    assert.deepEqual(asString, chained);
    check({ ...batch, rolloutIs: 'sequence', rolloutRs: chain, rolloutRsThreshold: perOption, rolloutRsThresholdLower: 0.8 }, 'chain, shared lower');
    check({ ...batch, rolloutIs: 'sequence', rolloutRs: chain, rolloutRsThreshold: perOption, rolloutRsThresholdLower: [0.8, 0, 0] }, 'chain, per-option lower');
    check({ ...batch, rolloutRs: ALL_OPTIONS, rolloutRsThreshold: ALL_OPTIONS.map((o) => threshold[o] * 3) }, 'all eleven');
    // A chain keeps a token only if every option keeps it.
    const alone = chain.map((o, i) => rolloutCorrection({ ...batch, rolloutRs: [o], rolloutRsThreshold: perOption[i] }).mask);
    for (let t = 0; t < batch.mask.length; t++) {
      assert.equal(chained.mask[t], alone.every((m) => m[t] === 1) ? 1 : 0);
    }
  });

  it('names its stats right for more option sets than the binding compiles result literals for', () => {
    // The binding builds a result with a JavaScript object literal compiled once per list of
    // names, for at most 64 lists (bindings/common.cc, KeyCache::object_maker); each set of
    // rejection options has its own list, and past the 64th the result is built by
    // napi_define_properties instead. Both must give the reference's keys and values.
    const batch = randomBatch(new Random(13), 12, 20, 0.2);
    for (let bits = 1; bits <= 80; bits++) {
      const chosen = ALL_OPTIONS.filter((_, i) => (bits >> i) & 1);
      check({ ...batch, rolloutIs: bits % 2 ? 'token' : 'sequence', rolloutRs: chosen, rolloutRsThreshold: 2 }, `options ${chosen.join(',')}`);
    }
  });

  it('matches the reference on long sequences (many blocks and lanes of the CPU walk), every mode', () => {
    // Sequences up to 3000 tokens: the CPU walks 256-token blocks in 8 (AVX-512) or 4 / 2
    // lanes; a clamped log-ratio and a NaN deep inside take its rare paths.
    const rng = new Random(31);
    const batch = randomBatch(rng, 12, 3000, 0.2);
    const t = batch.seqOffsets[3] + 1000;
    batch.rolloutLogp[t] = batch.logp[t] - 25; // d = 25: clamped to 20
    batch.mask[t] = 1;
    for (const [rolloutIs, rolloutRs, threshold, band] of [
      ['token', ['token_k1', 'token_k3', 'seq_max_k3'], [1.3, 0.02, 0.5], {}],
      ['token', ['seq_mean_k3'], [0.01], { rolloutIsThresholdLower: 0.5 }],
      ['sequence', ['seq_sum_k2', 'token_k2'], [40, 0.02], {}],
      ['none', ['seq_mean_k1', 'seq_max_k2'], [1.05, 0.2], {}],
    ] as const) {
      const options = { ...batch, rolloutIs, rolloutRs: [...rolloutRs], rolloutRsThreshold: [...threshold], ...band };
      check(options, `long ${rolloutIs} ${rolloutRs.join(',')}`);
      const poisoned = { ...options, logp: batch.logp.slice() };
      poisoned.logp[batch.seqOffsets[5] + 700] = NaN;
      poisoned.logp[batch.seqOffsets[5] + 701] = NaN;
      poisoned.mask = batch.mask.slice();
      poisoned.mask[batch.seqOffsets[5] + 700] = 1;
      check(poisoned, `long ${rolloutIs} with NaN`);
    }
  });

  it('handles empty batches, empty and fully masked sequences', () => {
    const options = { rolloutIs: 'token' as const, rolloutRs: ALL_OPTIONS, rolloutRsThreshold: 1 };
    const empty = { logp: new Float32Array(0), rolloutLogp: new Float32Array(0), mask: new Uint8Array(0) };
    for (const seqOffsets of [Int32Array.from([0]), Int32Array.from([0, 0, 0])]) {
      const r = check({ ...empty, seqOffsets, ...options }, `empty, B=${seqOffsets.length - 1}`);
      assert.equal(r.maskedTokens, 0);
      assert.ok(Object.values(r.stats).every((v) => v === 0), 'every statistic is 0');
    }
    const rng = new Random(3);
    const batch = randomBatch(rng, 5, 10);
    const none = check({ ...batch, mask: new Uint8Array(batch.mask.length), ...options }, 'all masked out');
    assert.ok(none.weights.every((w) => w === 0) && none.mask.every((m) => m === 0));
    assert.equal(none.validSeqs, 0);
    check({ ...batch, seqOffsets: Int32Array.from([0, 0, ...batch.seqOffsets.slice(1), batch.logp.length]), ...options }, 'leading and trailing empty sequences');
  });

  it('clamps extreme log-ratios at the safety bound and agrees at exact thresholds', () => {
    const logp = Float32Array.from([-1, -1, -1, -1, -1e4, -1]);
    const rolloutLogp = Float32Array.from([-1e4, -1.5, -1, -0.5, -1, -1]);
    const mask = new Uint8Array(6).fill(1);
    const seqOffsets = Int32Array.from([0, 1, 4, 6]);
    for (const rolloutIs of ['token', 'sequence'] as const) {
      const r = check({ logp, rolloutLogp, mask, seqOffsets, rolloutIs, rolloutIsThreshold: 1e12 }, `extreme ${rolloutIs}`);
      assertClose(r.weights[0], Math.exp(20), { rtol: 1e-6 }); // exp(clamp(9999)) = e^20
    }
    // d = 0.5 exactly: k2 = 0.125 passes a 0.125 bound and fails a smaller one.
    const boundary = { logp, rolloutLogp, mask, seqOffsets, rolloutIs: 'none' as const };
    const at = check({ ...boundary, rolloutRs: ['token_k2'], rolloutRsThreshold: 0.125 }, 'k2 at the bound');
    assert.equal(at.mask[1], 1);
    const below = check({ ...boundary, rolloutRs: ['token_k2'], rolloutRsThreshold: 0.12499999 }, 'k2 below');
    assert.equal(below.mask[1], 0);
    // k1 with ratio bounds [1, 1] keeps exactly the tokens with d = 0.
    const exact = check({ ...boundary, rolloutRs: ['token_k1'], rolloutRsThreshold: 1, rolloutRsThresholdLower: 1 }, 'k1 [1, 1]');
    assert.deepEqual([...exact.mask], [0, 0, 1, 0, 0, 1]);
    // IcePop with the band [1, 1] keeps weight 1 exactly where d = 0.
    const band = check({ logp, rolloutLogp, mask, seqOffsets, rolloutIs: 'token', rolloutIsThreshold: 1, rolloutIsThresholdLower: 1 }, 'IcePop [1, 1]');
    assert.deepEqual([...band.weights], [0, 0, 1, 0, 0, 1]);
  });

  it('propagates NaN and Inf of masked-in tokens and ignores those masked out', () => {
    const rng = new Random(5);
    const batch = randomBatch(rng, 6, 12);
    const options = { rolloutIs: 'token' as const, rolloutRs: ['token_k3', 'seq_mean_k1'] as RolloutRejectionOption[], rolloutRsThreshold: [0.05, 1.2] };
    const clean = rolloutCorrection({ ...batch, ...options });
    const dirty = { ...batch, logp: batch.logp.slice(), rolloutLogp: batch.rolloutLogp.slice() };
    const out = batch.mask.findIndex((m) => m === 0);
    dirty.logp[out] = NaN;
    dirty.rolloutLogp[out] = Infinity;
    assert.deepEqual(rolloutCorrection({ ...dirty, ...options }), clean, 'masked-out NaN changes nothing');
    for (const poison of [NaN, Infinity, -Infinity]) {
      const p = { ...batch, logp: batch.logp.slice() };
      const t = batch.mask.findIndex((m) => m === 1);
      p.logp[t] = poison;
      const r = check({ ...p, ...options }, `poison ${poison}`);
      assert.equal(r.nonFinite, 1);
      assert.equal(r.mask[t], 0, 'a non-finite statistic rejects');
    }
  });

  it('is bitwise identical for any thread count, async agrees, out buffers work', async () => {
    const rng = new Random(21);
    const many = randomBatch(rng, 3000, 200);
    const long = randomBatch(rng, 3, 60_000);
    const options = { rolloutIs: 'token' as const, rolloutIsBatchNormalize: true, rolloutRs: ['token_k2', 'seq_mean_k3'] as RolloutRejectionOption[], rolloutRsThreshold: [0.05, 0.03] };
    const threads = info().threads;
    try {
      for (const batch of [many, long]) {
        setThreads(1);
        const one = rolloutCorrection({ ...batch, ...options });
        setThreads(7);
        const seven = rolloutCorrection({ ...batch, ...options });
        assertBitwiseEqual(one.weights, seven.weights, 'weights 1 vs 7 threads');
        assertBitwiseEqual(one.mask, seven.mask, 'mask 1 vs 7 threads');
        assert.deepEqual(one.stats, seven.stats);
        assert.deepEqual(await rolloutCorrectionAsync({ ...batch, ...options }), one);
        const out = { weights: new Float32Array(batch.logp.length).fill(NaN), mask: batch.mask.slice() };
        const r = rolloutCorrection({ ...batch, ...options, mask: out.mask, out }); // the mask in place
        assert.equal(r.weights, out.weights);
        assert.equal(r.mask, out.mask);
        assertBitwiseEqual(one.weights, out.weights, 'out weights');
        assertBitwiseEqual(one.mask, out.mask, 'in-place mask');
      }
    } finally {
      setThreads(threads);
    }
  });

  it('feeds ppoLoss: weights and mask give the formulas of both ops', () => {
    const rng = new Random(8);
    const batch = randomBatch(rng, 40, 30, 0.2);
    const n = batch.logp.length;
    const oldLogp = batch.logp;
    const logp = Float32Array.from(oldLogp, (x) => x + rng.normal() * 0.1);
    const advantages = rng.normals(n);
    const options: RolloutCorrectionOptions = {
      ...batch, rolloutIs: 'sequence', rolloutIsThreshold: 1.5, rolloutRs: ['seq_mean_k1'], rolloutRsThreshold: 1.05,
    };
    const rc = rolloutCorrection(options);
    const want = rolloutCorrectionReference(options);
    assert.ok(rc.stats.rollout_rs_masked_fraction! > 0, 'some tokens are rejected');
    const ppoOptions = { logp, oldLogp, advantages, mask: rc.mask, weights: rc.weights, seqOffsets: batch.seqOffsets };
    for (const aggregation of ['token-mean', 'seq-mean-token-mean'] as const) {
      const got = ppoLoss({ ...ppoOptions, aggregation });
      const expected = ppoReference({ ...ppoOptions, aggregation, mask: want.mask, weights: Float32Array.from(want.weights) });
      assertClose(got.loss, expected.loss, { rtol: 1e-5, atol: 1e-7, label: aggregation });
      assert.equal(got.maskedTokens, expected.maskedTokens);
    }
  });

  it('rejects malformed calls with a named TypeError or RangeError', async () => {
    const logp = new Float32Array(4);
    const mask = new Uint8Array(4).fill(1);
    const seqOffsets = Int32Array.from([0, 4]);
    const base = { logp, rolloutLogp: logp, mask, seqOffsets };
    const call = (extra: object) => () => rolloutCorrection({ ...base, ...extra } as RolloutCorrectionOptions);
    checkBadInputs([
      { name: 'no logp', call: call({ logp: undefined }), error: TypeError, message: 'logp' },
      { name: 'f64 rolloutLogp', call: call({ rolloutLogp: new Float64Array(4) }), error: TypeError, message: 'rolloutLogp' },
      { name: 'short mask', call: call({ mask: new Uint8Array(3) }), error: RangeError, message: 'mask' },
      { name: 'no seqOffsets', call: call({ seqOffsets: undefined }), error: TypeError, message: 'seqOffsets' },
      { name: 'empty seqOffsets', call: call({ seqOffsets: new Int32Array(0) }), error: RangeError, message: 'seqOffsets' },
      { name: 'bad seqOffsets end', call: call({ seqOffsets: Int32Array.from([0, 3]) }), error: RangeError, message: 'seqOffsets' },
      { name: 'detached logp', call: call({ logp: detached((k) => new Float32Array(k)) }), error: TypeError, message: 'detached' },
      { name: 'unknown level', call: call({ rolloutIs: 'geo' }), error: RangeError, message: 'rolloutIs' },
      { name: 'threshold 0', call: call({ rolloutIsThreshold: 0 }), error: RangeError, message: 'for rolloutIsThreshold but received 0' },
      { name: 'threshold NaN', call: call({ rolloutIsThreshold: NaN }), error: RangeError, message: 'rolloutIsThreshold' },
      { name: 'lower 0', call: call({ rolloutIsThresholdLower: 0 }), error: RangeError, message: 'rolloutIsThresholdLower' },
      { name: 'lower above upper', call: call({ rolloutIsThresholdLower: 3 }), error: RangeError, message: 'a number in (0, rolloutIsThreshold] (or 0 for TIS) for rolloutIsThresholdLower' },
      { name: 'normalize not boolean', call: call({ rolloutIsBatchNormalize: 1 }), error: TypeError, message: 'rolloutIsBatchNormalize' },
      { name: 'unknown option', call: call({ rolloutRs: ['token_k4'], rolloutRsThreshold: 1 }), error: RangeError, message: "rolloutRs[0] but received 'token_k4'" },
      { name: 'seq_max_k1 (verl has none)', call: call({ rolloutRs: 'seq_max_k1', rolloutRsThreshold: 1 }), error: RangeError, message: 'rolloutRs[0]' },
      { name: 'repeated option', call: call({ rolloutRs: ['token_k2', 'token_k2'], rolloutRsThreshold: 1 }), error: RangeError, message: "'token_k2' twice" },
      { name: 'option not a string', call: call({ rolloutRs: [3] }), error: TypeError, message: 'rolloutRs[0]' },
      { name: 'missing threshold', call: call({ rolloutRs: ['token_k2'] }), error: RangeError, message: "for rolloutRsThreshold['token_k2'] but received 0" },
      { name: 'negative threshold', call: call({ rolloutRs: ['seq_sum_k3'], rolloutRsThreshold: -1 }), error: RangeError, message: "a finite number > 0 for rolloutRsThreshold['seq_sum_k3'] but received -1" },
      { name: 'threshold count', call: call({ rolloutRs: ['token_k2', 'token_k3', 'seq_max_k2'], rolloutRsThreshold: [1, 2] }), error: RangeError, message: 'one per rolloutRs option (3)' },
      { name: 'threshold not a number', call: call({ rolloutRs: ['token_k2'], rolloutRsThreshold: ['1'] }), error: TypeError, message: 'rolloutRsThreshold[0]' },
      { name: 'threshold Infinity', call: call({ rolloutRs: ['token_k2'], rolloutRsThreshold: Infinity }), error: RangeError, message: 'rolloutRsThreshold' },
      { name: 'lower for k2', call: call({ rolloutRs: ['token_k1', 'token_k2'], rolloutRsThreshold: 1, rolloutRsThresholdLower: [0.5, 0.5] }), error: RangeError, message: "for rolloutRsThresholdLower['token_k2'] but received 0.5" },
      { name: 'lower without k1', call: call({ rolloutRs: ['token_k2'], rolloutRsThreshold: 1, rolloutRsThresholdLower: 0.5 }), error: TypeError, message: 'Expected no rolloutRsThresholdLower (read by k1 options only, and rolloutRs has none) but received the number 0.5' },
      { name: 'rs threshold without rolloutRs', call: call({ rolloutRsThreshold: 1 }), error: TypeError, message: 'Expected no rolloutRsThreshold (not read without rolloutRs)' },
      { name: 'is threshold with none', call: call({ rolloutIs: 'none', rolloutIsThreshold: 3 }), error: TypeError, message: "Expected no rolloutIsThreshold (not read with rolloutIs 'none')" },
      { name: 'k1 upper below 1', call: call({ rolloutRs: ['seq_mean_k1'], rolloutRsThreshold: 0.5 }), error: RangeError, message: "a number >= 1 (the lower bound defaults to 1 / upper) for rolloutRsThreshold['seq_mean_k1']" },
      { name: 'k1 lower above upper', call: call({ rolloutRs: ['token_k1'], rolloutRsThreshold: 2, rolloutRsThresholdLower: 3 }), error: RangeError, message: "for rolloutRsThresholdLower['token_k1'] but received 3" },
      { name: 'short out.weights', call: call({ out: { weights: new Float32Array(3) } }), error: RangeError, message: 'weights' },
    ]);
    await assert.rejects(rolloutCorrectionAsync({ ...base, rolloutIsThreshold: -2 }), RangeError);
  });
});
