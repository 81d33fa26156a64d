import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  info,
  sequenceLogprobs,
  sequenceLogprobsAsync,
  sequenceLogprobsBackward,
  sequenceLogprobsBackwardAsync,
  setThreads,
} from '../lib/index.js';
import { finiteDifferenceBackward, reference, referenceBackward } from './reference/sequence_logprobs.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, detached, Random } from './support.js';

function randomBatch(rng: Random, b: number, minLen: number, maxLen: number, p = 0.6) {
  const seqOffsets = rng.seqOffsets(b, minLen, maxLen);
  const n = seqOffsets[b];
  return { logp: rng.floats(n, -12, 0), mask: rng.mask(n, p), seqOffsets };
}

describe('sequenceLogprobs', () => {
  it('sums and averages a hand-worked batch', () => {
    const logp = Float32Array.from([-1, -2, -3, -4, -5, -6]);
    const mask = Uint8Array.from([0, 1, 1, 7, 0, 0]); // any nonzero byte includes the token
    const seqOffsets = Int32Array.from([0, 3, 3, 6]);
    assert.deepEqual([...sequenceLogprobs({ logp, mask, seqOffsets })], [-5, 0, -4]);
    assert.deepEqual([...sequenceLogprobs({ logp, mask, seqOffsets, average: true })], [-2.5, 0, -4]);
    const gradSeq = Float32Array.from([2, 5, -1]);
    assert.deepEqual([...sequenceLogprobsBackward({ gradSeq, mask, seqOffsets })], [0, 2, 2, -1, 0, 0]);
    assert.deepEqual([...sequenceLogprobsBackward({ gradSeq, mask, seqOffsets, average: true })], [0, 1, 1, -1, 0, 0]);
  });

  it('matches the reference on ragged batches, including one giant sequence', () => {
    const rng = new Random(31);
    const shapes: [number, number, number][] = [[1, 0, 5], [17, 0, 40], [300, 0, 2000], [3, 40_000, 70_000]];
    for (const [b, minLen, maxLen] of shapes) {
      const { logp, mask, seqOffsets } = randomBatch(rng, b, minLen, maxLen);
      for (const average of [false, true]) {
        assertClose(sequenceLogprobs({ logp, mask, seqOffsets, average }), reference(logp, mask, seqOffsets, average), { label: `B=${b} average=${average}` });
        const gradSeq = rng.normals(b);
        const grad = sequenceLogprobsBackward({ gradSeq, mask, seqOffsets, average });
        const expected = referenceBackward(gradSeq, mask, seqOffsets, average);
        for (let t = 0; t < grad.length; t++) {
          const want = expected[t];
          if (Math.abs(grad[t] - want) > 1e-6 * Math.abs(want)) assert.fail(`grad[${t}] ${grad[t]} != ${want}`);
        }
      }
    }
    // Boundaries exactly on chunk edges and empty sequences on and after them.
    const n = 3 * 16384;
    const seqOffsets = Int32Array.from([0, 16384, 16384, 16385, 32768, n, n, n]);
    const logp = rng.floats(n, -1, 0);
    const mask = rng.mask(n, 0.5);
    for (const average of [false, true]) {
      assertClose(sequenceLogprobs({ logp, mask, seqOffsets, average }), reference(logp, mask, seqOffsets, average));
    }
  });

  it('has a backward equal to the transpose: finite differences and <J x, u> = <x, J^T u>', () => {
    const rng = new Random(32);
    const { logp, mask, seqOffsets } = randomBatch(rng, 9, 0, 12);
    for (const average of [false, true]) {
      const gradSeq = rng.normals(9);
      const grad = sequenceLogprobsBackward({ gradSeq, mask, seqOffsets, average });
      assertClose(grad, finiteDifferenceBackward(logp, mask, seqOffsets, average, gradSeq), { atol: 1e-6 });
    }
    const big = randomBatch(rng, 200, 0, 3000);
    for (const average of [false, true]) {
      const u = rng.normals(200);
      const jx = sequenceLogprobs({ ...big, average });
      const jtu = sequenceLogprobsBackward({ gradSeq: u, mask: big.mask, seqOffsets: big.seqOffsets, average });
      let left = 0;
      let right = 0;
      for (let i = 0; i < u.length; i++) left += u[i] * jx[i];
      for (let t = 0; t < jtu.length; t++) right += big.logp[t] * jtu[t];
      assertClose(left, right, { rtol: 1e-5 });
    }
  });

  it('gives fully masked sequences 0 (sum, mean and gradient) and handles empty batches', () => {
    const logp = Float32Array.from([-1, -2, -3]);
    const mask = new Uint8Array(3);
    const seqOffsets = Int32Array.from([0, 1, 3]);
    for (const average of [false, true]) {
      assert.deepEqual([...sequenceLogprobs({ logp, mask, seqOffsets, average })], [0, 0]);
      assert.deepEqual([...sequenceLogprobsBackward({ gradSeq: Float32Array.from([1, 2]), mask, seqOffsets, average })], [0, 0, 0]);
    }
    assert.equal(sequenceLogprobs({ logp: new Float32Array(0), mask: new Uint8Array(0), seqOffsets: Int32Array.of(0) }).length, 0);
    assert.deepEqual([...sequenceLogprobs({ logp: new Float32Array(0), mask: new Uint8Array(0), seqOffsets: Int32Array.of(0, 0, 0), average: true })], [0, 0]);
    assert.equal(sequenceLogprobsBackward({ gradSeq: new Float32Array(2), mask: new Uint8Array(0), seqOffsets: Int32Array.of(0, 0, 0) }).length, 0);
  });

  it('propagates NaN and Inf from masked tokens only', () => {
    const logp = Float32Array.from([NaN, -1, -Infinity, -2, NaN, -3]);
    const mask = Uint8Array.from([1, 1, 1, 1, 0, 1]);
    const seqOffsets = Int32Array.from([0, 2, 4, 6]);
    const r = sequenceLogprobs({ logp, mask, seqOffsets });
    assert.ok(Number.isNaN(r[0]));
    assert.equal(r[1], -Infinity);
    assert.equal(r[2], -3);
    const g = sequenceLogprobsBackward({ gradSeq: Float32Array.from([NaN, Infinity, 1]), mask, seqOffsets });
    assert.ok(Number.isNaN(g[0]) && Number.isNaN(g[1]));
    assert.deepEqual([...g.slice(2)], [Infinity, Infinity, 0, 1]);
  });

  it('is bitwise identical for any thread count, async agrees, out buffers work', async () => {
    const rng = new Random(33);
    const giant = randomBatch(rng, 3, 100_000, 200_000);
    const many = randomBatch(rng, 4000, 0, 300);
    const threads = info().threads;
    try {
      for (const batch of [giant, many]) {
        const b = batch.seqOffsets.length - 1;
        const gradSeq = rng.normals(b);
        for (const average of [false, true]) {
          const backward = { gradSeq, mask: batch.mask, seqOffsets: batch.seqOffsets, average };
          setThreads(1);
          const one = sequenceLogprobs({ ...batch, average });
          const oneGrad = sequenceLogprobsBackward(backward);
          setThreads(7);
          assertBitwiseEqual(one, sequenceLogprobs({ ...batch, average }), 'forward 1 vs 7 threads');
          assertBitwiseEqual(oneGrad, sequenceLogprobsBackward(backward), 'backward 1 vs 7 threads');
          assertBitwiseEqual(one, await sequenceLogprobsAsync({ ...batch, average }), 'forward async');
          assertBitwiseEqual(oneGrad, await sequenceLogprobsBackwardAsync(backward), 'backward async');
          const out = new Float32Array(b).fill(NaN);
          assert.equal(sequenceLogprobs({ ...batch, average, out }), out);
          assertBitwiseEqual(one, out, 'out');
          const gradOut = new Float32Array(batch.mask.length).fill(NaN);
          assert.equal(sequenceLogprobsBackward({ ...backward, out: gradOut }), gradOut);
          assertBitwiseEqual(oneGrad, gradOut, 'backward out');
        }
      }
    } finally {
      setThreads(threads);
    }
  });

  it('rejects malformed forward calls with a named TypeError or RangeError', async () => {
    const logp = new Float32Array(4);
    const mask = new Uint8Array(4);
    const seqOffsets = Int32Array.from([0, 1, 4]);
    const call = (o: unknown) => () => sequenceLogprobs(o as never);
    checkBadInputs([
      { name: 'no options', call: call(undefined), error: TypeError, message: 'options object' },
      { name: 'options is null', call: call(null), error: TypeError, message: 'options object' },
      { name: 'logp missing', call: call({ mask, seqOffsets }), error: TypeError, message: 'for logp' },
      { name: 'logp as Array', call: call({ logp: [0, 0, 0, 0], mask, seqOffsets }), error: TypeError, message: 'for logp' },
      { name: 'logp as Float64Array', call: call({ logp: new Float64Array(4), mask, seqOffsets }), error: TypeError, message: 'Float64Array' },
      { name: 'logp detached', call: call({ logp: detached((n) => new Float32Array(n)), mask, seqOffsets }), error: TypeError, message: 'detached' },
      { name: 'mask missing', call: call({ logp, seqOffsets }), error: TypeError, message: 'for mask' },
      { name: 'mask as Int8Array', call: call({ logp, mask: new Int8Array(4), seqOffsets }), error: TypeError, message: 'mask' },
      { name: 'mask too short', call: call({ logp, mask: new Uint8Array(3), seqOffsets }), error: RangeError, message: 'mask' },
      { name: 'mask detached', call: call({ logp, mask: detached((n) => new Uint8Array(n)), seqOffsets }), error: TypeError, message: 'detached' },
      { name: 'seqOffsets missing', call: call({ logp, mask }), error: TypeError, message: 'seqOffsets' },
      { name: 'seqOffsets as Uint32Array', call: call({ logp, mask, seqOffsets: new Uint32Array([0, 4]) }), error: TypeError, message: 'seqOffsets' },
      { name: 'seqOffsets empty', call: call({ logp, mask, seqOffsets: new Int32Array(0) }), error: RangeError, message: 'seqOffsets' },
      { name: 'seqOffsets not starting at 0', call: call({ logp, mask, seqOffsets: Int32Array.from([1, 4]) }), error: RangeError, message: 'seqOffsets[0]' },
      { name: 'seqOffsets decreasing', call: call({ logp, mask, seqOffsets: Int32Array.from([0, 3, 2, 4]) }), error: RangeError, message: 'non-decreasing' },
      { name: 'seqOffsets past N', call: call({ logp, mask, seqOffsets: Int32Array.from([0, 5]) }), error: RangeError, message: 'token count 4' },
      { name: 'seqOffsets short of N', call: call({ logp, mask, seqOffsets: Int32Array.from([0, 3]) }), error: RangeError, message: 'token count 4' },
      { name: 'seqOffsets negative', call: call({ logp, mask, seqOffsets: Int32Array.from([0, -2, 4]) }), error: RangeError, message: 'non-decreasing' },
      { name: 'average as number', call: call({ logp, mask, seqOffsets, average: 1 }), error: TypeError, message: 'average' },
      { name: 'average as string', call: call({ logp, mask, seqOffsets, average: 'true' }), error: TypeError, message: 'average' },
      { name: 'out wrong length', call: call({ logp, mask, seqOffsets, out: new Float32Array(4) }), error: RangeError, message: 'out' },
      { name: 'out wrong type', call: call({ logp, mask, seqOffsets, out: new Float64Array(2) }), error: TypeError, message: 'out' },
      { name: 'out as object', call: call({ logp, mask, seqOffsets, out: {} }), error: TypeError, message: 'out' },
    ]);
    await assert.rejects(sequenceLogprobsAsync({ logp, mask, seqOffsets: Int32Array.from([0, 3]) }), RangeError);
  });

  it('rejects malformed backward calls with a named TypeError or RangeError', async () => {
    const gradSeq = new Float32Array(2);
    const mask = new Uint8Array(4);
    const seqOffsets = Int32Array.from([0, 1, 4]);
    const call = (o: unknown) => () => sequenceLogprobsBackward(o as never);
    checkBadInputs([
      { name: 'no options', call: call(undefined), error: TypeError, message: 'options object' },
      { name: 'gradSeq missing', call: call({ mask, seqOffsets }), error: TypeError, message: 'gradSeq' },
      { name: 'gradSeq as Array', call: call({ gradSeq: [0, 0], mask, seqOffsets }), error: TypeError, message: 'gradSeq' },
      { name: 'gradSeq too long', call: call({ gradSeq: new Float32Array(4), mask, seqOffsets }), error: RangeError, message: 'gradSeq' },
      { name: 'gradSeq detached', call: call({ gradSeq: detached((n) => new Float32Array(n)), mask, seqOffsets }), error: TypeError, message: 'detached' },
      { name: 'mask missing', call: call({ gradSeq, seqOffsets }), error: TypeError, message: 'mask' },
      { name: 'mask as Float32Array', call: call({ gradSeq, mask: new Float32Array(4), seqOffsets }), error: TypeError, message: 'mask' },
      { name: 'seqOffsets missing', call: call({ gradSeq, mask }), error: TypeError, message: 'seqOffsets' },
      { name: 'seqOffsets empty', call: call({ gradSeq: new Float32Array(0), mask, seqOffsets: new Int32Array(0) }), error: RangeError, message: 'seqOffsets' },
      { name: 'seqOffsets short of N', call: call({ gradSeq, mask, seqOffsets: Int32Array.from([0, 1, 3]) }), error: RangeError, message: 'token count 4' },
      { name: 'seqOffsets decreasing', call: call({ gradSeq, mask, seqOffsets: Int32Array.from([0, 2, 1]) }), error: RangeError, message: 'non-decreasing' },
      { name: 'seqOffsets not starting at 0', call: call({ gradSeq, mask, seqOffsets: Int32Array.from([2, 3, 4]) }), error: RangeError, message: 'seqOffsets[0]' },
      { name: 'average as number', call: call({ gradSeq, mask, seqOffsets, average: 0 }), error: TypeError, message: 'average' },
      { name: 'out wrong length', call: call({ gradSeq, mask, seqOffsets, out: new Float32Array(2) }), error: RangeError, message: 'out' },
      { name: 'out wrong type', call: call({ gradSeq, mask, seqOffsets, out: new Uint8Array(4) }), error: TypeError, message: 'out' },
      { name: 'out detached', call: call({ gradSeq, mask, seqOffsets, out: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'options is null', call: call(null), error: TypeError, message: 'options object' },
      { name: 'gradSeq as Float64Array', call: call({ gradSeq: new Float64Array(2), mask, seqOffsets }), error: TypeError, message: 'Float64Array' },
      { name: 'mask detached', call: call({ gradSeq, mask: detached((n) => new Uint8Array(n)), seqOffsets }), error: TypeError, message: 'detached' },
      { name: 'seqOffsets as Array', call: call({ gradSeq, mask, seqOffsets: [0, 1, 4] }), error: TypeError, message: 'seqOffsets' },
      { name: 'seqOffsets past N', call: call({ gradSeq, mask, seqOffsets: Int32Array.from([0, 1, 9]) }), error: RangeError, message: 'token count 4' },
      { name: 'seqOffsets negative', call: call({ gradSeq, mask, seqOffsets: Int32Array.from([0, -1, 4]) }), error: RangeError, message: 'non-decreasing' },
      { name: 'average as string', call: call({ gradSeq, mask, seqOffsets, average: 'yes' }), error: TypeError, message: 'average' },
      { name: 'out as Array', call: call({ gradSeq, mask, seqOffsets, out: [0, 0, 0, 0] }), error: TypeError, message: 'out' },
    ]);
    await assert.rejects(sequenceLogprobsBackwardAsync({ gradSeq, mask, seqOffsets: Int32Array.from([0, 5, 4]) }), RangeError);
  });
});
