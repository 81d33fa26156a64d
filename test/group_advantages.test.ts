import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

import { groupAdvantages, groupAdvantagesAsync, info, setThreads } from '../lib/index.js';
import { reference } from './reference/group_advantages.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, detached, Random } from './support.js';

function contiguousIds(b: number, groupSize: number): Int32Array {
  return Int32Array.from({ length: b }, (_, i) => Math.floor(i / groupSize));
}

const CHILD = 'TIRL_GROUP_ADVANTAGES_TEST_CHILD';

/**
 * Groups of 8 by groupSize (the blocked SIMD paths: software-pipelined 8x8 blocks, the
 * division by 7 without the divider) against the same groups by ids (normalized one group
 * at a time with plain divisions), bit for bit: normal rewards, rounded ones, zero-variance
 * groups, NaN, Inf, -0, and groups at every magnitude a float reaches (subnormal to 1e38).
 */
function checkGroupsOf8Bits(): void {
  // 4,096 + 17 * 64 + 8 rewards: a chunk of 64 blocks of 64 rewards (four pipelined runs
  // of 16), a chunk of 17 blocks (16 and 1) and one lone group. The ids path (a group id
  // per reward, shuffled groups) normalizes one group at a time.
  const rng = new Random(8);
  const b = 4096 + 17 * 64 + 8;
  const rewards = rng.normals(b, 40);
  for (let i = 0; i < b; i += 97) rewards[i] = Math.round(rewards[i]);
  rewards.fill(3, 512, 520); // zero variance
  rewards.fill(0, 1024, 1032); // zero variance at 0: denominator 0 with epsilon 0
  rewards[1500] = NaN;
  rewards[1600] = Infinity;
  rewards[1700] = -Infinity;
  rewards[1800] = -0;
  for (let g = 0; g < 84; g++) {
    // Group 256 + g at magnitude 10^(g - 45): sums of squares from 1e-90 to 1e76.
    for (let k = 0; k < 8; k++) rewards[2048 + 8 * g + k] = rng.normals(1, 1)[0] * 10 ** (g - 45);
  }
  const order = Array.from({ length: b / 8 }, (_, g) => g).reverse();
  const perm = Int32Array.from(order.flatMap((g) => Array.from({ length: 8 }, (_, k) => 8 * g + k)));
  const moved = Float32Array.from(perm, (p) => rewards[p]);
  const ids = Int32Array.from(perm, (p) => p >> 3);
  for (const opts of [{}, { epsilon: 0 }, { scaleByStd: false }, { epsilon: 0.5 }]) {
    const contiguous = groupAdvantages({ rewards, groupSize: 8, ...opts });
    const byIds = groupAdvantages({ rewards: moved, groupIds: ids, ...opts });
    assertBitwiseEqual(byIds, Float32Array.from(perm, (p) => contiguous[p]), `groups of 8 ${JSON.stringify(opts)}`);
  }
}

/**
 * 196,608 + 13 rewards in groups of 8 and one of 5 by shuffled ids (dense, with unused ids
 * between them, also at either end of the int32 range; and sparse, numbered by the hash
 * table), on 1, 2 and 7 threads: above two threads' worth of rewards the groups are cut
 * into parts, one a thread, each listing its own rewards (the vectorised select_part of
 * each SIMD path, then its scalar tail for the last 13 rewards, as 196,621 is not a
 * multiple of 16 or 8). select_part finds a part's rewards by id - (low + first group)
 * in unsigned 32-bit arithmetic, which wraps for ids from INT32_MIN up. Every group's sums
 * run over its rewards in input order, so the result is, bit for bit, the contiguous
 * groups (24,577 blocked groups of 8, then the group of 5) on the rewards sorted stably by id.
 * (Two parts take at least 2 × 49,152 rewards: kMinScatteredRewardsPerThread.)
 */
function checkScatteredBits(): void {
  const rng = new Random(9);
  const b = 196_608 + 13;
  const rewards = rng.normals(b, 2);
  for (let i = 0; i < b; i += 89) rewards[i] = Math.round(rewards[i]);
  rewards[777] = NaN;
  const groups = Int32Array.from({ length: b }, (_, i) => i >> 3);
  const lastGroup = groups[b - 1];
  for (let i = b - 1; i > 0; i--) {
    const j = rng.int(0, i + 1);
    [groups[i], groups[j]] = [groups[j], groups[i]];
  }
  const order = Array.from({ length: b }, (_, i) => i).sort((x, y) => groups[x] - groups[y] || x - y);
  const sorted = Float32Array.from(order, (i) => rewards[i]);
  const threads = info().threads;
  try {
    for (const opts of [{}, { scaleByStd: false }]) {
      const eights = b - (b % 8);
      const contiguous = new Float32Array(b);
      contiguous.set(groupAdvantages({ rewards: sorted.subarray(0, eights), groupSize: 8, ...opts }));
      contiguous.set(groupAdvantages({ rewards: sorted.subarray(eights), groupSize: b - eights, ...opts }), eights);
      const want = new Float32Array(b);
      order.forEach((i, k) => (want[i] = contiguous[k]));
      for (const [name, groupIds] of [
        ['dense', Int32Array.from(groups, (g) => 3 * g - 7000)],
        ['dense from INT32_MIN', Int32Array.from(groups, (g) => -(2 ** 31) + 3 * g)],
        ['dense up to INT32_MAX', Int32Array.from(groups, (g) => 2 ** 31 - 1 - 3 * (lastGroup - g))],
        ['sparse', Int32Array.from(groups, (g) => g * 262_147 - 2 ** 30)],
      ] as const) {
        for (const t of [1, 2, 7]) {
          setThreads(t);
          assertBitwiseEqual(groupAdvantages({ rewards, groupIds, ...opts }), want, `${name} ids, ${t} threads ${JSON.stringify(opts)}`);
        }
      }
    }
  } finally {
    setThreads(threads);
  }
}

if (process.env[CHILD]) {
  checkGroupsOf8Bits();
  checkScatteredBits();
  process.stdout.write(info().simd);
  process.exit(0);
}

describe('groupAdvantages', () => {
  it('gives ±0.866 for the hand-worked group [1, 0, 0, 1]', () => {
    // mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735; 0.5 / 0.57735 = 0.866025
    const a = groupAdvantages({ rewards: Float32Array.from([1, 0, 0, 1]), groupSize: 4, epsilon: 0 });
    assertClose(a, [0.8660254, -0.8660254, -0.8660254, 0.8660254]);
    const drGrpo = groupAdvantages({ rewards: Float32Array.from([1, 0, 0, 1]), groupSize: 4, scaleByStd: false });
    assertClose(drGrpo, [0.5, -0.5, -0.5, 0.5]);
  });

  it('gives a group of one mean 0 and std 1, and a zero-variance group 0', () => {
    const rewards = Float32Array.from([0.7, 2, 2, 2, -3]);
    const groupIds = Int32Array.from([5, 1, 1, 1, -9]);
    const a = groupAdvantages({ rewards, groupIds });
    assertClose(a, [0.7 / (1 + 1e-6), 0, 0, 0, -3 / (1 + 1e-6)]);
    assert.deepEqual([...groupAdvantages({ rewards: Float32Array.from([4, 4]), groupSize: 2, epsilon: 0 })], [0, 0]);
    assertClose(groupAdvantages({ rewards, groupSize: 1, scaleByStd: false }), rewards);
  });

  it('matches the reference for contiguous, sorted and scattered groups', () => {
    const rng = new Random(3);
    for (const [b, groupSize] of [[1, 1], [8, 8], [64, 4], [5000, 8], [12_288, 16], [3200, 40], [10_000, 10_000]]) {
      const rewards = rng.normals(b, 2);
      const ids = contiguousIds(b, groupSize);
      for (const scaleByStd of [true, false]) {
        const want = reference(rewards, ids, scaleByStd);
        assertClose(groupAdvantages({ rewards, groupSize, scaleByStd }), want, { label: `groupSize ${groupSize}` });
        assertClose(groupAdvantages({ rewards, groupIds: ids, scaleByStd }), want, { label: `sorted ids ${groupSize}` });
      }
    }
    // Sorted ids with runs of varied length (some equal-size stretches, some singletons).
    const sizes = Array.from({ length: 700 }, (_, i) => (i % 50 < 30 ? 8 : rng.int(1, 40)));
    const sortedIds = Int32Array.from(sizes.flatMap((size, g) => Array(size).fill(g * 3 - 50)));
    const sortedRewards = rng.normals(sortedIds.length);
    assertClose(groupAdvantages({ rewards: sortedRewards, groupIds: sortedIds }), reference(sortedRewards, sortedIds), { label: 'sorted varied' });
    // Sorted until the very end, where the last group reuses the first id: the two merge.
    const lateIds = contiguousIds(9000, 8);
    lateIds.fill(0, 8992);
    const lateRewards = rng.normals(9000);
    assertClose(groupAdvantages({ rewards: lateRewards, groupIds: lateIds }), reference(lateRewards, lateIds), { label: 'late unsorted' });
    // Scattered: arbitrary (negative, sparse) ids in random order, groups of varied size.
    for (const b of [2, 100, 9000]) {
      const rewards = rng.normals(b, 3);
      const pool = Int32Array.from({ length: Math.max(1, b >> 3) }, () => rng.int(-(2 ** 31), 2 ** 31 - 1));
      const groupIds = Int32Array.from({ length: b }, () => pool[rng.int(0, pool.length)]);
      assertClose(groupAdvantages({ rewards, groupIds }), reference(rewards, groupIds), { label: `scattered ${b}` });
      assertClose(groupAdvantages({ rewards, groupIds, epsilon: 0.5, scaleByStd: true }), reference(rewards, groupIds, true, 0.5));
    }
  });

  it('gives shuffled ids the contiguous result, permuted', () => {
    const rng = new Random(4);
    const b = 4096;
    const rewards = rng.floats(b, 0, 1);
    const contiguous = groupAdvantages({ rewards, groupSize: 8 });
    const perm = Int32Array.from({ length: b }, (_, i) => i);
    for (let i = b - 1; i > 0; i--) {
      const j = rng.int(0, i + 1);
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    const shuffledRewards = Float32Array.from(perm, (p) => rewards[p]);
    const shuffledIds = Int32Array.from(perm, (p) => Math.floor(p / 8) * 7 - 1000);
    const shuffled = groupAdvantages({ rewards: shuffledRewards, groupIds: shuffledIds });
    assertClose(shuffled, Float32Array.from(perm, (p) => contiguous[p]));
    // Moving whole groups around keeps each group's input order: bitwise the same values.
    const reversedGroups = Int32Array.from({ length: b }, (_, i) => b - 8 * (Math.floor(i / 8) + 1) + (i % 8));
    const reversed = groupAdvantages({ rewards: Float32Array.from(reversedGroups, (p) => rewards[p]), groupIds: Int32Array.from(reversedGroups, (p) => p >> 3) });
    assertBitwiseEqual(reversed, Float32Array.from(reversedGroups, (p) => contiguous[p]), 'reordered groups');
  });

  it('gives groups of 8 (the blocked SIMD paths) the bits of one group at a time, edge values included', () => {
    checkGroupsOf8Bits();
  });

  it('gives groups by shuffled ids the bits of sorted contiguous groups on any thread count', () => {
    checkScatteredBits();
  });

  it('gives groups of 8 (and by shuffled ids) those bits on the avx2 and baseline paths too', () => {
    // Each path in a child process (TIRL_SIMD is read once per process). The avx2 path
    // divides by 7 without the divider (cpu/group_advantages_divide.h); a CPU that lacks a
    // path runs the widest it has, checked all the same.
    for (const path of ['avx2', 'baseline']) {
      const ran = execFileSync(process.execPath, [fileURLToPath(import.meta.url)], {
        env: { ...process.env, [CHILD]: '1', TIRL_SIMD: path },
        encoding: 'utf8',
      });
      assert.ok(ran.length > 0, `TIRL_SIMD=${path}`);
    }
  });

  it('handles empty input', () => {
    assert.equal(groupAdvantages({ rewards: new Float32Array(0), groupSize: 4 }).length, 0);
    assert.equal(groupAdvantages({ rewards: new Float32Array(0), groupIds: new Int32Array(0) }).length, 0);
  });

  it('propagates NaN and Inf within their group only', () => {
    const rewards = Float32Array.from([1, NaN, 2, 3, Infinity, 5, 6, 7, 1, 2, 3, 4]);
    for (const opts of [{ groupSize: 4 }, { groupIds: Int32Array.from([9, 9, 9, 9, 2, 2, 2, 2, 0, 0, 0, 0]) }]) {
      const a = groupAdvantages({ rewards, ...opts });
      assert.ok(a.slice(0, 8).every(Number.isNaN), `${[...a]}`);
      assertClose(a.slice(8), reference(rewards.slice(8), [0, 0, 0, 0]));
    }
  });

  it('is bitwise identical for any thread count, async agrees, out buffers work', async () => {
    const rng = new Random(5);
    const b = 65_536;
    const rewards = rng.normals(b);
    const scattered = Int32Array.from({ length: b }, () => rng.int(0, 5000));
    const threads = info().threads;
    try {
      for (const opts of [{ groupSize: 8 }, { groupIds: contiguousIds(b, 16) }, { groupIds: scattered }]) {
        setThreads(1);
        const one = groupAdvantages({ rewards, ...opts });
        setThreads(7);
        const seven = groupAdvantages({ rewards, ...opts });
        assertBitwiseEqual(one, seven, 'threads 1 vs 7');
        assertBitwiseEqual(one, await groupAdvantagesAsync({ rewards, ...opts }), 'async');
        const out = new Float32Array(b).fill(NaN);
        assert.equal(groupAdvantages({ rewards, ...opts, out }), out);
        assertBitwiseEqual(one, out, 'out');
      }
    } finally {
      setThreads(threads);
    }
  });

  it('rejects malformed calls with a named TypeError or RangeError', async () => {
    const rewards = Float32Array.from([1, 2, 3, 4]);
    const groupIds = Int32Array.from([0, 0, 1, 1]);
    const call = (o: unknown) => () => groupAdvantages(o as never);
    checkBadInputs([
      { name: 'no options', call: call(undefined), error: TypeError, message: 'options object' },
      { name: 'options is a string', call: call('x'), error: TypeError, message: 'options object' },
      { name: 'rewards missing', call: call({ groupSize: 2 }), error: TypeError, message: 'for rewards' },
      { name: 'rewards as Array', call: call({ rewards: [1, 2], groupSize: 2 }), error: TypeError, message: 'for rewards' },
      { name: 'rewards as Float64Array', call: call({ rewards: new Float64Array(4), groupSize: 2 }), error: TypeError, message: 'Float64Array' },
      { name: 'rewards detached', call: call({ rewards: detached((n) => new Float32Array(n)), groupSize: 2 }), error: TypeError, message: 'detached' },
      { name: 'neither groupIds nor groupSize', call: call({ rewards }), error: TypeError, message: 'exactly one of groupIds' },
      { name: 'both groupIds and groupSize', call: call({ rewards, groupIds, groupSize: 2 }), error: TypeError, message: 'both' },
      { name: 'groupIds as Uint32Array', call: call({ rewards, groupIds: new Uint32Array(4) }), error: TypeError, message: 'groupIds' },
      { name: 'groupIds as Float32Array', call: call({ rewards, groupIds: new Float32Array(4) }), error: TypeError, message: 'groupIds' },
      { name: 'groupIds too short', call: call({ rewards, groupIds: new Int32Array(3) }), error: RangeError, message: 'groupIds' },
      { name: 'groupIds detached', call: call({ rewards, groupIds: detached((n) => new Int32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'groupSize 0', call: call({ rewards, groupSize: 0 }), error: RangeError, message: 'groupSize' },
      { name: 'groupSize negative', call: call({ rewards, groupSize: -2 }), error: RangeError, message: 'groupSize' },
      { name: 'groupSize fractional', call: call({ rewards, groupSize: 1.5 }), error: RangeError, message: 'groupSize' },
      { name: 'groupSize NaN', call: call({ rewards, groupSize: NaN }), error: RangeError, message: 'groupSize' },
      { name: 'groupSize not dividing B', call: call({ rewards, groupSize: 3 }), error: RangeError, message: 'divides' },
      { name: 'groupSize larger than B', call: call({ rewards, groupSize: 8 }), error: RangeError, message: 'groupSize' },
      { name: 'groupSize as string', call: call({ rewards, groupSize: '2' }), error: TypeError, message: 'groupSize' },
      { name: 'scaleByStd as number', call: call({ rewards, groupSize: 2, scaleByStd: 1 }), error: TypeError, message: 'scaleByStd' },
      { name: 'epsilon negative', call: call({ rewards, groupSize: 2, epsilon: -1e-6 }), error: RangeError, message: 'epsilon' },
      { name: 'epsilon Infinity', call: call({ rewards, groupSize: 2, epsilon: Infinity }), error: RangeError, message: 'epsilon' },
      { name: 'epsilon as string', call: call({ rewards, groupSize: 2, epsilon: '0.1' }), error: TypeError, message: 'epsilon' },
      { name: 'out wrong length', call: call({ rewards, groupSize: 2, out: new Float32Array(3) }), error: RangeError, message: 'out' },
      { name: 'out wrong type', call: call({ rewards, groupSize: 2, out: new Float64Array(4) }), error: TypeError, message: 'out' },
      { name: 'out detached', call: call({ rewards, groupSize: 2, out: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
    ]);
    await assert.rejects(groupAdvantagesAsync({ rewards, groupSize: 3 }), RangeError);
    await assert.rejects(groupAdvantagesAsync({ rewards } as never), TypeError);
  });
});
