/**
 * advantages against the float64 reference in test/reference/advantages.ts, which follows
 * verl's core_algos.py at commit 1dda039b9c6311889a9c9a26040677e1254814f9 (verl-project/verl):
 * GRPO's unbiased std and a group of one as mean 0 / std 1, RLOO keeping a lone score, the
 * masked_whiten of REINFORCE++, its baseline variant, GDPO and GAE, GAE skipping values on
 * masked-out tokens, the optimal token baseline's cumulative path variance and zero tail.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ADVANTAGE_ESTIMATORS, advantages, advantagesAsync, setThreads, type AdvantageEstimator, type AdvantagesOptions } from '../lib/index.js';
import { reference } from './reference/advantages.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, Random } from './support.js';

/** What each estimator reads beyond rewards, mask and offsets. */
function extras(estimator: AdvantageEstimator, batch: Batch, rng: Random): Partial<AdvantagesOptions> {
  const n = batch.mask.length;
  const b = batch.seqOffsets.length - 1;
  switch (estimator) {
    case 'gae': return { values: rng.normals(n), gamma: 0.9, lam: 0.8 };
    case 'reinforce_plus_plus': return { gamma: 0.95 };
    case 'remax': return { rewardBaselines: rng.normals(b) };
    case 'gpg': return { fNorm: 2 };
    case 'optimal_token_baseline': case 'tir_optimal_token_baseline': {
      const oldLogp = Float32Array.from({ length: n }, () => Math.log(rng.uniform(0.01, 1)));
      const sumPiSquared = Float32Array.from(oldLogp, (lp) => Math.exp(2 * lp) + rng.uniform(0, 1 - Math.exp(2 * lp)));
      return { oldLogp, sumPiSquared, rolloutIsWeights: rng.floats(n, 0.5, 2) };
    }
    default: return {};
  }
}

interface Batch { mask: Uint8Array; seqOffsets: Int32Array; groupIds: Int32Array }

/**
 * Sequences with a masked-out prompt, action turns split by masked-out feedback, some fully
 * masked; groups of 1 to 5 under shuffled ids, listed in shuffled order.
 */
function makeBatch(rng: Random, groups: number): Batch {
  const ids: number[] = [];
  for (let g = 0; g < groups; g++) {
    const id = rng.int(-1_000_000, 1_000_000);
    const size = [1, 2, 3, 5][rng.int(0, 4)]!;
    for (let k = 0; k < size; k++) ids.push(id);
  }
  for (let i = ids.length - 1; i > 0; i--) {
    const j = rng.int(0, i + 1);
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  const mask: number[] = [];
  const offsets = [0];
  for (let i = 0; i < ids.length; i++) {
    const prompt = rng.int(0, 4);
    for (let t = 0; t < prompt; t++) mask.push(0);
    if (rng.next() > 0.1) {
      const turns = rng.int(1, 4);
      for (let turn = 0; turn < turns; turn++) {
        const action = rng.int(1, 8);
        for (let t = 0; t < action; t++) mask.push(1);
        if (turn + 1 < turns) for (let t = rng.int(1, 5); t > 0; t--) mask.push(0);
      }
    }
    offsets.push(mask.length);
  }
  return { mask: Uint8Array.from(mask), seqOffsets: Int32Array.from(offsets), groupIds: Int32Array.from(ids) };
}

function sequenceRewards(rng: Random, b: number, keys = 1): Float32Array {
  // Binary and continuous scores, so that groups with zero variance occur.
  return Float32Array.from({ length: b * keys }, () => (rng.next() < 0.5 ? Math.round(rng.next()) : rng.normal()));
}

function check(options: AdvantagesOptions, label: string): void {
  const got = advantages({ ...options, withReturns: true });
  const want = reference({ ...options, estimator: options.estimator ?? 'grpo' });
  assertClose(got.advantages, want.advantages, { rtol: 2e-5, atol: 2e-5 + 1e-6 * want.magnitude, label: `${label} advantages` });
  assertClose(got.returns!, want.returns, { rtol: 2e-5, atol: 2e-5, label: `${label} returns` });
}

/** check(), and the same bits on 1 thread and on 4; returns the one-thread result. */
function checkOnThreads(options: AdvantagesOptions, label: string): ReturnType<typeof advantages> {
  check(options, label);
  setThreads(1);
  const one = advantages({ ...options, withReturns: true });
  setThreads(4);
  const four = advantages({ ...options, withReturns: true });
  assertBitwiseEqual(one.advantages, four.advantages, `${label}, 1 vs 4 threads`);
  assertBitwiseEqual(one.returns!, four.returns!, `${label} returns, 1 vs 4 threads`);
  return one;
}

const GROUPED = new Set<AdvantageEstimator>(ADVANTAGE_ESTIMATORS.filter((e) => !['reinforce_plus_plus', 'remax', 'gae'].includes(e)));

describe('advantages', () => {
  it('matches the verl reference for every estimator, with sequence or token rewards', () => {
    const rng = new Random(16);
    for (const estimator of ADVANTAGE_ESTIMATORS) {
      for (const tokenLevel of [false, true]) {
        const batch = makeBatch(rng, 40);
        const b = batch.seqOffsets.length - 1;
        const rewards = tokenLevel
          ? { tokenRewards: Float32Array.from(batch.mask, () => (rng.next() < 0.2 ? rng.normal() : 0)) }
          : { rewards: sequenceRewards(rng, b) };
        const options: AdvantagesOptions = {
          estimator, ...rewards, mask: batch.mask, seqOffsets: batch.seqOffsets,
          ...(GROUPED.has(estimator) ? { groupIds: batch.groupIds } : {}), ...extras(estimator, batch, rng),
        };
        check(options, `${estimator} ${tokenLevel ? 'token' : 'sequence'} rewards`);
      }
    }
  });

  it('matches the reference on long sequences: whitening chunks, vector lanes and their remainders', () => {
    // 20 sequences of 300 to 3,000 tokens (~33,000: whitening chunks of 4,096 tokens with
    // sequences across their boundaries; two full sets of 8 recurrence lanes of unequal
    // lengths), masked-out runs as in a tool-use rollout, groups of 4.
    const rng = new Random(23);
    const mask: number[] = [];
    const offsets = [0];
    for (let s = 0; s < 20; s++) {
      const length = rng.int(300, 3001);
      let inside = rng.next() < 0.5;
      for (let t = 0; t < length;) {
        const run = Math.min(length - t, inside ? rng.int(20, 200) : rng.int(5, 90));
        for (let k = 0; k < run; k++) mask.push(inside ? 1 : 0);
        t += run;
        inside = !inside;
      }
      offsets.push(mask.length);
    }
    const batch: Batch = {
      mask: Uint8Array.from(mask), seqOffsets: Int32Array.from(offsets), groupIds: Int32Array.from({ length: 20 }, (_, i) => i >> 2),
    };
    for (const estimator of ADVANTAGE_ESTIMATORS) {
      for (const tokenLevel of [false, true]) {
        const rewards = tokenLevel
          ? { tokenRewards: Float32Array.from(batch.mask, () => (rng.next() < 0.02 ? rng.normal() : 0)) }
          : { rewards: sequenceRewards(rng, 20, estimator === 'gdpo' ? 2 : 1) };
        check({
          estimator, ...rewards, mask: batch.mask, seqOffsets: batch.seqOffsets,
          ...(GROUPED.has(estimator) ? { groupIds: batch.groupIds } : {}), ...extras(estimator, batch, rng),
        }, `${estimator} long ${tokenLevel ? 'token' : 'sequence'} rewards`);
      }
    }
    // reinforce_plus_plus at gamma 1 with sequence scores: its closed form (a constant per sequence).
    check({
      estimator: 'reinforce_plus_plus', rewards: sequenceRewards(rng, 20), mask: batch.mask, seqOffsets: batch.seqOffsets, gamma: 1,
    }, 'reinforce_plus_plus long, gamma 1');
    // Any non-zero mask byte is masked in: the optimal-token baselines find runs of them 8
    // bytes at a time (math/advantages.h, mask_run_end).
    const bytes = Uint8Array.from(batch.mask, (m) => (m !== 0 ? rng.int(1, 256) : 0));
    for (const estimator of ['optimal_token_baseline', 'tir_optimal_token_baseline'] as const) {
      check({
        estimator, rewards: sequenceRewards(rng, 20), mask: bytes, seqOffsets: batch.seqOffsets, groupIds: batch.groupIds,
        ...extras(estimator, batch, rng),
      }, `${estimator} long, mask bytes 1-255`);
    }
  });

  it('matches the reference where the recurrence lanes fetch the next set ahead, or a set is too large to', () => {
    // The token pass of gae and reinforce_plus_plus takes chunks of 4 sets of 8 sequences,
    // each set's walk fetching the next set of its chunk into L2 unless that set holds more
    // than 256 KiB of the walk's arrays (cpu/advantages.cc, WalkPrefetch): 70 sequences
    // (3 chunks, the last of 6 sequences), the first 24 of 200-1,200 tokens, then 40 of
    // 3,500-4,500 (sets of ~390 KiB with returns), then 6 short ones.
    const rng = new Random(47);
    const mask: number[] = [];
    const offsets = [0];
    const lengths = [
      ...Array.from({ length: 24 }, () => rng.int(200, 1201)),
      ...Array.from({ length: 40 }, () => rng.int(3500, 4501)),
      ...Array.from({ length: 6 }, () => rng.int(10, 40)),
    ];
    for (const length of lengths) {
      for (let t = 0; t < length; t++) mask.push(t >= 8 && rng.next() < 0.7 ? 1 : 0);
      offsets.push(mask.length);
    }
    const base = { mask: Uint8Array.from(mask), seqOffsets: Int32Array.from(offsets) };
    const b = lengths.length;
    const values = Float32Array.from(base.mask, () => rng.next() - 0.5);
    const cases: [string, AdvantagesOptions][] = [
      ['gae', { ...base, estimator: 'gae', rewards: sequenceRewards(rng, b), values, gamma: 0.99, lam: 0.95 }],
      ['gae, token rewards', { ...base, estimator: 'gae', tokenRewards: Float32Array.from(base.mask, () => (rng.next() < 0.05 ? rng.normal() : 0)), values, lam: 0.9 }],
      ['reinforce_plus_plus gamma 0.99', { ...base, estimator: 'reinforce_plus_plus', rewards: sequenceRewards(rng, b), gamma: 0.99 }],
    ];
    for (const [label, options] of cases) checkOnThreads(options, label);
  });

  it('whitens from chunks of tokens or of sequences, over several chunks', () => {
    // gdpo, reinforce_plus_plus_baseline and reinforce_plus_plus at gamma 1 take the
    // whitening statistics from each sequence's value and masked-in count, in chunks of
    // 1,024 sequences (math/advantages.h, sequence_values_sum): 3,000 short sequences,
    // some empty or fully masked; a NaN score on a fully masked sequence reaches no token.
    const rng = new Random(29);
    const b = 3000;
    const mask: number[] = [];
    const offsets = [0];
    for (let s = 0; s < b; s++) {
      const length = rng.int(0, 21);
      const masked = rng.next() < 0.1;
      for (let t = 0; t < length; t++) mask.push(!masked && t >= 2 && rng.next() < 0.8 ? 1 : 0);
      offsets.push(mask.length);
    }
    const base = { mask: Uint8Array.from(mask), seqOffsets: Int32Array.from(offsets), groupIds: Int32Array.from({ length: b }, (_, i) => Math.floor(i / 3)) };
    const hollow = offsets.findIndex((o, s) => s < b && base.mask.subarray(o, offsets[s + 1]).every((m) => m === 0) && offsets[s + 1]! > o);
    assert.ok(hollow >= 0, 'a fully masked sequence');
    const rewards = sequenceRewards(rng, b);
    const nan = Float32Array.from(rewards, (r, s) => (s === hollow ? NaN : r));
    const cases: [string, AdvantagesOptions][] = [
      ['gdpo', { ...base, estimator: 'gdpo', rewards: sequenceRewards(rng, b, 2), rewardWeights: Float32Array.of(1, 0.5) }],
      ['reinforce_plus_plus_baseline', { ...base, estimator: 'reinforce_plus_plus_baseline', rewards }],
      // Token chunks' moments about their own means, combined (math/advantages.h,
      // whitening_of): a mean far from 0 against a spread of 1.
      ['reinforce_plus_plus gamma 0.99, scores 10,000 + N(0, 1)', { mask: base.mask, seqOffsets: base.seqOffsets, estimator: 'reinforce_plus_plus', rewards: Float32Array.from(rewards, () => 1e4 + rng.normal()), gamma: 0.99 }],
      ['reinforce_plus_plus gamma 1, NaN on a fully masked sequence', { mask: base.mask, seqOffsets: base.seqOffsets, estimator: 'reinforce_plus_plus', rewards: nan, gamma: 1 }],
    ];
    for (const [label, options] of cases) {
      const one = checkOnThreads(options, label);
      assert.ok(one.advantages.every(Number.isFinite), `${label}: finite`);
    }
  });

  it('follows each estimator option', () => {
    const rng = new Random(7);
    const batch = makeBatch(rng, 30);
    const b = batch.seqOffsets.length - 1;
    const base = { mask: batch.mask, seqOffsets: batch.seqOffsets, groupIds: batch.groupIds };
    for (const estimator of ['grpo', 'grpo_passk', 'gdpo'] as const) {
      check({ ...base, estimator, rewards: sequenceRewards(rng, b), normAdvByStdInGrpo: false }, `${estimator} Dr.GRPO`);
      check({ ...base, estimator, rewards: sequenceRewards(rng, b), epsilon: 0.5 }, `${estimator} epsilon`);
    }
    check({ ...base, estimator: 'gdpo', rewards: sequenceRewards(rng, b, 3), rewardWeights: Float32Array.of(1, 0.5, -2) }, 'gdpo three weighted keys');
    check({ ...base, estimator: 'gdpo', rewards: sequenceRewards(rng, b, 2) }, 'gdpo two keys, weights 1');
    for (const estimator of ['optimal_token_baseline', 'tir_optimal_token_baseline'] as const) {
      const { oldLogp, sumPiSquared } = extras(estimator, batch, rng);
      const otb = { ...base, estimator, rewards: sequenceRewards(rng, b), oldLogp, sumPiSquared };
      check({ ...otb, handleZeroTail: false }, `${estimator} without zero tail`);
      check({ ...otb, epsilon: 0.25 }, `${estimator} epsilon`);
    }
    const { groupIds: _, ...ungrouped } = base;
    for (const [gamma, lam] of [[1, 1], [0, 0.5], [0.99, 0.95]]) {
      check({ ...ungrouped, estimator: 'gae', rewards: sequenceRewards(rng, b), values: rng.normals(batch.mask.length), gamma, lam }, `gae ${gamma} ${lam}`);
      check({ ...ungrouped, estimator: 'reinforce_plus_plus', rewards: sequenceRewards(rng, b), gamma }, `reinforce_plus_plus ${gamma}`);
    }
  });

  it('gives the hand-worked values of verl\'s conventions', () => {
    // One sequence of three action tokens after a prompt token, reward 1 on the last.
    const mask = Uint8Array.of(0, 1, 1, 1);
    const seqOffsets = Int32Array.of(0, 4);
    // GAE, gamma 0.5, lambda 1, values 0.5: deltas 0.5, -0.25, -0.25 (backwards), so the
    // lambda-returns are 0.5, 0, -0.25 and the returns A + V = 1, 0.5, 0.25 (the prompt
    // token carries the running advantage: -0.25 + 0.5).
    const gae = advantages({ estimator: 'gae', rewards: Float32Array.of(1), mask, seqOffsets, values: Float32Array.of(0.5, 0.5, 0.5, 0.5), gamma: 0.5, withReturns: true });
    assertClose(gae.returns!, [0.25, 0.25, 0.5, 1]);
    // Whitened: mean 1/12 of [-0.25, 0, 0.5], unbiased std sqrt(0.19792...).
    const raw = [-0.25, 0, 0.5];
    const mean = raw.reduce((s, x) => s + x) / 3;
    const std = Math.sqrt(raw.reduce((s, x) => s + (x - mean) ** 2, 0) / 2 + 1e-8);
    assertClose(gae.advantages, [0, ...raw.map((x) => (x - mean) / std)]);
    // RLOO [1, 0, 1]: 3/2 (s - 2/3); a lone score keeps its value (verl's 'rloo').
    const rloo = advantages({ estimator: 'rloo', rewards: Float32Array.of(1, 0, 1, 4), mask: new Uint8Array(4).fill(1), seqOffsets: Int32Array.of(0, 1, 2, 3, 4), groupIds: Int32Array.of(3, 3, 3, 8) });
    assertClose(rloo.advantages, [0.5, -1, 0.5, 4]);
    // Pass@k: only the best of each group, (r_max - r_second) / (std + eps).
    const passk = advantages({ estimator: 'grpo_passk', rewards: Float32Array.of(0, 3, 1), mask: new Uint8Array(3).fill(1), seqOffsets: Int32Array.of(0, 1, 2, 3), groupSize: 3, normAdvByStdInGrpo: false });
    assertClose(passk.advantages, [0, 2, 0]);
    // OPO: the length-weighted mean score; lengths 1 and 3.
    const opo = advantages({ estimator: 'opo', rewards: Float32Array.of(1, 0), mask: Uint8Array.of(1, 1, 1, 1), seqOffsets: Int32Array.of(0, 1, 4), groupSize: 2 });
    assertClose(opo.advantages, [0.75, -0.25, -0.25, -0.25]);
    // GPG: alpha = B / (non-zero scores) = 4 / 2.
    const gpg = advantages({ estimator: 'gpg', rewards: Float32Array.of(1, 0, 0, 3), mask: new Uint8Array(4).fill(1), seqOffsets: Int32Array.of(0, 1, 2, 3, 4), groupIds: Int32Array.of(0, 0, 1, 1) });
    assertClose(gpg.advantages, [1, -1, -3, 3]);
    // ReMax: reward-to-go minus the greedy baseline.
    const remax = advantages({ estimator: 'remax', tokenRewards: Float32Array.of(9, 1, 0, 2), mask, seqOffsets, rewardBaselines: Float32Array.of(0.5), withReturns: true });
    assertClose(remax.advantages, [0, 2.5, 1.5, 1.5]);
    assertClose(remax.returns!, [3, 3, 2, 2]);
  });

  it('handles the edge cases: empty batches, fully masked sequences, groups of one, zero variance', () => {
    for (const estimator of ADVANTAGE_ESTIMATORS) {
      const empty = advantages({ estimator, rewards: new Float32Array(0), mask: new Uint8Array(0), seqOffsets: Int32Array.of(0), withReturns: true, ...(GROUPED.has(estimator) ? { groupIds: new Int32Array(0) } : {}), ...extras(estimator, { mask: new Uint8Array(0), seqOffsets: Int32Array.of(0), groupIds: new Int32Array(0) }, new Random(1)) });
      assert.equal(empty.advantages.length, 0, estimator);
      assert.equal(empty.returns!.length, 0, estimator);
      // Sequences with no tokens or no masked-in token.
      const mask = Uint8Array.of(0, 0, 0);
      const seqOffsets = Int32Array.of(0, 0, 3, 3);
      const batch = { mask, seqOffsets, groupIds: Int32Array.of(1, 1, 2) };
      const out = advantages({ estimator, rewards: Float32Array.of(1, 2, 3), mask, seqOffsets, ...(GROUPED.has(estimator) ? { groupIds: batch.groupIds } : {}), ...extras(estimator, batch, new Random(2)) });
      assert.deepEqual([...out.advantages], [0, 0, 0], estimator);
    }
    const ones = new Uint8Array(5).fill(1);
    const offsets = Int32Array.of(0, 1, 2, 3, 4, 5);
    const rewards = Float32Array.of(0.7, 2, 2, 2, -3);
    const groupIds = Int32Array.of(5, 1, 1, 1, -9);
    const grpo = advantages({ estimator: 'grpo', rewards, mask: ones, seqOffsets: offsets, groupIds });
    assertClose(grpo.advantages, [0.7 / (1 + 1e-6), 0, 0, 0, -3 / (1 + 1e-6)]);
    const passk = advantages({ estimator: 'grpo_passk', rewards, mask: ones, seqOffsets: offsets, groupIds, epsilon: 0 });
    assert.deepEqual([...passk.advantages], [0, 0, 0, 0, 0]);
    // One masked-in token: variance 0 (verl raises), so the whitened advantage is 0.
    const single = advantages({ estimator: 'reinforce_plus_plus', rewards: Float32Array.of(5), mask: Uint8Array.of(0, 1), seqOffsets: Int32Array.of(0, 2) });
    assert.deepEqual([...single.advantages], [0, 0]);
  });

  it('propagates NaN and Inf within a group, and through the whitening to the batch', () => {
    const mask = new Uint8Array(4).fill(1);
    const seqOffsets = Int32Array.of(0, 1, 2, 3, 4);
    const groupIds = Int32Array.of(0, 0, 1, 1);
    for (const bad of [NaN, Infinity]) {
      const rewards = Float32Array.of(bad, 1, 0, 1);
      for (const estimator of ['grpo', 'rloo', 'opo', 'gpg'] as const) {
        const a = advantages({ estimator, rewards, mask, seqOffsets, groupIds }).advantages;
        assert.ok(Number.isNaN(a[0]!) || !Number.isFinite(a[0]!), `${estimator} ${bad}`);
        assert.ok(Number.isFinite(a[2]!) && Number.isFinite(a[3]!), `${estimator}: the other group stays finite`);
      }
      const whitened = advantages({ estimator: 'reinforce_plus_plus_baseline', rewards, mask, seqOffsets, groupIds }).advantages;
      assert.ok([...whitened].every(Number.isNaN), `whitening spreads ${bad}`);
      check({ estimator: 'grpo_passk', rewards, mask, seqOffsets, groupIds, normAdvByStdInGrpo: false }, `grpo_passk ${bad}`);
    }
  });

  it('does not depend on the order of the groups, their ids, groupSize or the thread count', () => {
    const rng = new Random(11);
    const batch = makeBatch(rng, 300);
    const b = batch.seqOffsets.length - 1;
    const rewards = sequenceRewards(rng, b);
    for (const estimator of ADVANTAGE_ESTIMATORS) {
      const options: AdvantagesOptions = {
        estimator, rewards, mask: batch.mask, seqOffsets: batch.seqOffsets,
        ...(GROUPED.has(estimator) ? { groupIds: batch.groupIds } : {}), ...extras(estimator, batch, new Random(5)),
      };
      setThreads(1);
      const one = advantages({ ...options, withReturns: true });
      setThreads(4);
      const four = advantages({ ...options, withReturns: true });
      assertBitwiseEqual(one.advantages, four.advantages, `${estimator} advantages, 1 vs 4 threads`);
      assertBitwiseEqual(one.returns!, four.returns!, `${estimator} returns, 1 vs 4 threads`);
      if (GROUPED.has(estimator)) {
        // Other ids for the same partition: the same bits (groups are visited by id, members in input order).
        const renamed = Int32Array.from(batch.groupIds, (id) => -id * 3 + 7);
        assertBitwiseEqual(advantages({ ...options, groupIds: renamed }).advantages, one.advantages, `${estimator} renamed ids`);
      }
    }
    // Contiguous groups: groupSize equals the same ids.
    const even = { mask: new Uint8Array(12).fill(1), seqOffsets: Int32Array.from({ length: 13 }, (_, i) => i), rewards: rng.normals(12) };
    assertBitwiseEqual(advantages({ ...even, groupSize: 4 }).advantages, advantages({ ...even, groupIds: Int32Array.from({ length: 12 }, (_, i) => i >> 2) }).advantages, 'groupSize');
  });

  it('runs off the event loop with the same result', async () => {
    const rng = new Random(3);
    const batch = makeBatch(rng, 50);
    const options: AdvantagesOptions = { estimator: 'gdpo', rewards: sequenceRewards(rng, batch.seqOffsets.length - 1, 2), mask: batch.mask, seqOffsets: batch.seqOffsets, groupIds: batch.groupIds, withReturns: true };
    const sync = advantages(options);
    const later = await advantagesAsync(options);
    assertBitwiseEqual(later.advantages, sync.advantages, 'async advantages');
    assertBitwiseEqual(later.returns!, sync.returns!, 'async returns');
    const out = { advantages: new Float32Array(batch.mask.length), returns: new Float32Array(batch.mask.length) };
    const written = advantages({ ...options, out });
    assert.equal(written.advantages, out.advantages);
    assert.equal(written.returns, out.returns);
  });

  it('refuses bad input with an error naming the argument', () => {
    const mask = Uint8Array.of(1, 1);
    const seqOffsets = Int32Array.of(0, 1, 2);
    const rewards = Float32Array.of(1, 2);
    const groupIds = Int32Array.of(0, 0);
    const ok = { mask, seqOffsets, rewards, groupIds };
    checkBadInputs([
      { name: 'unknown estimator', call: () => advantages({ ...ok, estimator: 'ppo' as AdvantageEstimator }), error: RangeError, message: 'estimator' },
      { name: 'both rewards', call: () => advantages({ ...ok, tokenRewards: Float32Array.of(1, 2) }), error: TypeError, message: 'tokenRewards' },
      { name: 'no rewards', call: () => advantages({ mask, seqOffsets, groupIds }), error: TypeError, message: 'rewards' },
      { name: 'short rewards', call: () => advantages({ ...ok, rewards: Float32Array.of(1) }), error: RangeError, message: 'rewards' },
      { name: 'gdpo rewards not K * B', call: () => advantages({ ...ok, estimator: 'gdpo', rewards: Float32Array.of(1, 2, 3) }), error: RangeError, message: 'rewards' },
      { name: 'gdpo weights', call: () => advantages({ ...ok, estimator: 'gdpo', rewardWeights: Float32Array.of(1, 2) }), error: RangeError, message: 'rewardWeights' },
      { name: 'short mask', call: () => advantages({ ...ok, tokenRewards: Float32Array.of(1), rewards: undefined }), error: RangeError, message: 'tokenRewards' },
      { name: 'unread option', call: () => advantages({ ...ok, gamma: 0.9 }), error: TypeError, message: /no gamma \(not read by estimator 'grpo'\)/ },
      { name: 'unread array', call: () => advantages({ ...ok, estimator: 'rloo', values: Float32Array.of(1, 2) }), error: TypeError, message: /no values \(not read by estimator 'rloo'\)/ },
      { name: 'groups for gae', call: () => advantages({ ...ok, estimator: 'gae', values: Float32Array.of(1, 2) }), error: TypeError, message: 'groupIds' },
      { name: 'no groups', call: () => advantages({ mask, seqOffsets, rewards }), error: RangeError, message: 'group' },
      { name: 'groupSize not dividing', call: () => advantages({ mask, seqOffsets, rewards, groupSize: 3 }), error: RangeError, message: 'group' },
      { name: 'both group forms', call: () => advantages({ ...ok, groupSize: 2 }), error: TypeError, message: 'groupSize' },
      { name: 'gae without values', call: () => advantages({ mask, seqOffsets, rewards, estimator: 'gae' }), error: TypeError, message: 'values' },
      { name: 'remax without baselines', call: () => advantages({ mask, seqOffsets, rewards, estimator: 'remax' }), error: TypeError, message: 'rewardBaselines' },
      { name: 'otb without sumPiSquared', call: () => advantages({ ...ok, estimator: 'optimal_token_baseline', oldLogp: Float32Array.of(0, 0) }), error: TypeError, message: 'sumPiSquared' },
      { name: 'gamma above 1', call: () => advantages({ mask, seqOffsets, rewards, estimator: 'reinforce_plus_plus', gamma: 1.5 }), error: RangeError, message: 'gamma' },
      { name: 'negative lam', call: () => advantages({ mask, seqOffsets, rewards, estimator: 'gae', values: Float32Array.of(0, 0), lam: -1 }), error: RangeError, message: 'lam' },
      { name: 'fNorm 0', call: () => advantages({ ...ok, estimator: 'gpg', fNorm: 0 }), error: RangeError, message: 'fNorm' },
      { name: 'negative epsilon', call: () => advantages({ ...ok, epsilon: -0.5 }), error: RangeError, message: 'epsilon' },
      { name: 'bad offsets', call: () => advantages({ ...ok, seqOffsets: Int32Array.of(0, 2, 1) }), error: RangeError, message: 'seqOffsets' },
      { name: 'offsets past the mask', call: () => advantages({ ...ok, seqOffsets: Int32Array.of(0, 1, 3) }), error: RangeError, message: 'seqOffsets' },
      { name: 'wrong mask type', call: () => advantages({ ...ok, mask: new Float32Array(2) as unknown as Uint8Array }), error: TypeError, message: 'mask' },
    ]);
  });
});
