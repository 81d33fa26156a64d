import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { feedbackMask, feedbackMaskAsync, setThreads, info } from '../lib/index.js';
import { reference } from './reference/feedback_mask.js';
import { assertBitwiseEqual, checkBadInputs, detached, Random } from './support.js';

function randomBatch(rng: Random, b: number, maxLen: number) {
  const seqOffsets = rng.seqOffsets(b, 0, maxLen);
  const n = seqOffsets[b];
  const roles = new Uint8Array(n);
  for (let i = 0; i < n; i++) roles[i] = rng.int(0, 4);
  const keep = rng.mask(b, 0.7);
  return { roles, seqOffsets, keep };
}

describe('feedbackMask', () => {
  it('masks a hand-worked two-turn episode', () => {
    // prompt | action (code) | feedback (tool output) | action (answer) | padding
    const roles = Uint8Array.from([0, 0, 1, 1, 1, 2, 2, 1, 1, 3, 3]);
    const seqOffsets = Int32Array.from([0, 11]);
    const { mask, actionTokens } = feedbackMask({ roles, seqOffsets });
    assert.deepEqual([...mask], [0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0]);
    assert.deepEqual([...actionTokens], [5]);
  });

  it('drops sequences that are not kept', () => {
    const roles = Uint8Array.from([1, 1, 0, 1, 2, 1]);
    const seqOffsets = Int32Array.from([0, 2, 6]);
    const r = feedbackMask({ roles, seqOffsets, keep: Uint8Array.from([0, 1]) });
    assert.deepEqual([...r.mask], [0, 0, 0, 1, 0, 1]);
    assert.deepEqual([...r.actionTokens], [0, 2]);
  });

  it('matches the reference on random ragged batches', () => {
    const rng = new Random(7);
    for (const [b, maxLen] of [[1, 1], [3, 10], [100, 300], [2000, 50]]) {
      const { roles, seqOffsets, keep } = randomBatch(rng, b, maxLen);
      for (const k of [undefined, keep]) {
        const got = feedbackMask({ roles, seqOffsets, keep: k });
        const want = reference(roles, seqOffsets, k);
        assert.deepEqual(got.mask, want.mask);
        assert.deepEqual(got.actionTokens, want.actionTokens);
      }
    }
  });

  it('handles empty batches and empty sequences', () => {
    const empty = feedbackMask({ roles: new Uint8Array(0), seqOffsets: Int32Array.from([0]) });
    assert.equal(empty.mask.length, 0);
    assert.equal(empty.actionTokens.length, 0);
    const r = feedbackMask({ roles: Uint8Array.from([1]), seqOffsets: Int32Array.from([0, 0, 1, 1]) });
    assert.deepEqual([...r.actionTokens], [0, 1, 0]);
  });

  it('matches the reference and finds the first bad role around every vector boundary', () => {
    // Sequence lengths on both sides of 32 and 64 tokens (the avx2 and avx512 vectors).
    const lengths = [1, 31, 32, 33, 63, 64, 65, 130];
    const seqOffsets = Int32Array.from([0, ...lengths.map((_, i) => lengths.slice(0, i + 1).reduce((a, b) => a + b))]);
    const n = seqOffsets[lengths.length];
    const rng = new Random(11);
    const roles = new Uint8Array(n).map(() => rng.int(0, 4));
    const keep = Uint8Array.from(lengths, (_, s) => (s % 2 === 0 ? 1 : 0));
    const got = feedbackMask({ roles, seqOffsets, keep });
    const want = reference(roles, seqOffsets, keep);
    assert.deepEqual(got.mask, want.mask);
    assert.deepEqual(got.actionTokens, want.actionTokens);
    for (let at = 0; at < n; at++) {
      const role = [4, 127, 128, 255][at % 4];
      const bad = roles.slice();
      bad[at] = role;
      if (at + 1 < n) bad[at + 1] = 9;
      assert.throws(() => feedbackMask({ roles: bad, seqOffsets, keep }), {
        name: 'RangeError',
        message: new RegExp(`roles\\[${at}\\] = ${role}$`),
      });
    }
  });

  it('writes into out buffers', () => {
    const roles = Uint8Array.from([1, 0, 1]);
    const seqOffsets = Int32Array.from([0, 3]);
    const out = { mask: new Uint8Array(3).fill(9), actionTokens: new Int32Array(1) };
    const r = feedbackMask({ roles, seqOffsets, out });
    assert.equal(r.mask, out.mask);
    assert.equal(r.actionTokens, out.actionTokens);
    assert.deepEqual([...out.mask], [1, 0, 1]);
  });

  it('is bitwise identical for any thread count, and async agrees with sync', async () => {
    const rng = new Random(11);
    const { roles, seqOffsets, keep } = randomBatch(rng, 5000, 400);
    const threads = info().threads;
    try {
      setThreads(1);
      const one = feedbackMask({ roles, seqOffsets, keep });
      setThreads(7);
      const seven = feedbackMask({ roles, seqOffsets, keep });
      const async = await feedbackMaskAsync({ roles, seqOffsets, keep });
      assertBitwiseEqual(one.mask, seven.mask, 'mask');
      assertBitwiseEqual(one.actionTokens, seven.actionTokens, 'actionTokens');
      assertBitwiseEqual(one.mask, async.mask, 'async mask');
    } finally {
      setThreads(threads);
    }
  });

  it('rejects malformed calls with a named TypeError or RangeError', async () => {
    const roles = Uint8Array.from([0, 1, 2]);
    const seqOffsets = Int32Array.from([0, 3]);
    const call = (o: unknown) => () => feedbackMask(o as never);
    checkBadInputs([
      { name: 'no options', call: call(undefined), error: TypeError, message: 'options object' },
      { name: 'options is a number', call: call(3), error: TypeError, message: 'options object' },
      { name: 'roles missing', call: call({ seqOffsets }), error: TypeError, message: 'for roles' },
      { name: 'roles as Array', call: call({ roles: [0, 1, 2], seqOffsets }), error: TypeError, message: 'an Array of length 3' },
      { name: 'roles as Int8Array', call: call({ roles: new Int8Array(3), seqOffsets }), error: TypeError, message: 'Int8Array' },
      { name: 'roles detached', call: call({ roles: detached((n) => new Uint8Array(n)), seqOffsets }), error: TypeError, message: 'detached' },
      { name: 'seqOffsets as Float32Array', call: call({ roles, seqOffsets: new Float32Array([0, 3]) }), error: TypeError, message: 'seqOffsets' },
      { name: 'seqOffsets empty', call: call({ roles, seqOffsets: new Int32Array(0) }), error: RangeError, message: 'seqOffsets' },
      { name: 'seqOffsets short of N', call: call({ roles, seqOffsets: Int32Array.from([0, 2]) }), error: RangeError, message: 'end at the token count 3' },
      { name: 'seqOffsets decreasing', call: call({ roles, seqOffsets: Int32Array.from([0, 2, 1, 3]) }), error: RangeError, message: 'non-decreasing' },
      { name: 'seqOffsets not starting at 0', call: call({ roles, seqOffsets: Int32Array.from([1, 3]) }), error: RangeError, message: 'seqOffsets[0]' },
      { name: 'seqOffsets negative', call: call({ roles, seqOffsets: Int32Array.from([0, -1, 3]) }), error: RangeError, message: 'non-decreasing' },
      { name: 'role out of range', call: call({ roles: Uint8Array.from([0, 9, 1]), seqOffsets }), error: RangeError, message: 'roles[1] = 9' },
      { name: 'keep wrong length', call: call({ roles, seqOffsets, keep: new Uint8Array(2) }), error: RangeError, message: 'keep' },
      { name: 'keep wrong type', call: call({ roles, seqOffsets, keep: [1] }), error: TypeError, message: 'keep' },
      { name: 'out not an object', call: call({ roles, seqOffsets, out: 5 }), error: TypeError, message: 'for out' },
      { name: 'out.mask wrong length', call: call({ roles, seqOffsets, out: { mask: new Uint8Array(2) } }), error: RangeError, message: 'out.mask' },
      { name: 'out.mask wrong type', call: call({ roles, seqOffsets, out: { mask: new Float32Array(3) } }), error: TypeError, message: 'out.mask' },
      { name: 'out.actionTokens wrong length', call: call({ roles, seqOffsets, out: { actionTokens: new Int32Array(5) } }), error: RangeError, message: 'out.actionTokens' },
    ]);
    await assert.rejects(feedbackMaskAsync({ roles: Uint8Array.from([7]), seqOffsets: Int32Array.from([0, 1]) }), RangeError);
    await assert.rejects(feedbackMaskAsync(null as never), TypeError);
  });
});
