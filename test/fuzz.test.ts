/**
 * A short deterministic run of the bindings fuzzer (test/fuzz/), in a child process so that
 * a crash fails the test instead of the suite, and the bugs it found, each pinned down.
 * Long runs: `node dist/test/fuzz/run.js --seed 1 --calls 1000000` (see test/fuzz/run.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { dpoLoss, feedbackMask, ppoLoss, sequenceLogprobs, tokenLogprobs, tokenLogprobsBackward } from '../lib/index.js';
import { native } from '../lib/native.js';
import { judgeError } from './fuzz/fuzz.js';
import { OP_NAMES, type OpName } from './fuzz/ops.js';
import { runIsolated, type RunReport } from './fuzz/run.js';

/** Asserts `call` throws a TypeError/RangeError of the one message shape naming an argument of `op`. */
function assertConformingError(op: OpName, call: () => unknown, kind: typeof TypeError | typeof RangeError, fragment: string): void {
  let thrown: unknown;
  try {
    call();
  } catch (error) {
    thrown = error;
  }
  assert.ok(thrown instanceof kind, `${op}: expected a ${kind.name}, got ${String(thrown)}`);
  const judged = judgeError(op, thrown);
  assert.equal(judged.problem, undefined, judged.problem);
  assert.ok((thrown as Error).message.includes(fragment), (thrown as Error).message);
}

// ArrayBuffer(n, { maxByteLength }) is ES2024: Node 20 has it, lib es2023 does not.
const ResizableArrayBuffer = ArrayBuffer as unknown as new (bytes: number, options: { maxByteLength: number }) => ArrayBuffer & { resize(bytes: number): void };

/** Every failure and crash of a fuzz run, one line each. */
function problemsOf(report: RunReport): string[] {
  return [
    ...report.failures.map((f) => `case ${f.index} ${f.op} (${f.call}; ${f.move}): ${f.problem}`),
    ...report.crashes.map((c) => `CRASH at case ${c.index}: ${c.signal ?? c.exitCode} ${c.stderr}`),
  ];
}

describe('bindings fuzzer', () => {
  it('survives a short deterministic run: every call correct or a named TypeError/RangeError, no crash', async () => {
    const report = await runIsolated({ seed: 1, cases: 80_000 });
    assert.deepEqual(problemsOf(report), []);
    for (const op of OP_NAMES) assert.ok(report.perOp[op] > 100, `${op} called ${report.perOp[op]} times`);
    for (const [outcome, count] of Object.entries(report.outcomes)) assert.ok(count > 50, `${outcome}: ${count}`);
  });

  it('survives buffers detached, transferred, resized or rewritten while Async calls run', async () => {
    // 40% of these cases change an Async call's inputs and out after it returns; before the
    // Async forms copied ordinary buffers this crashed within seconds.
    const report = await runIsolated({ seed: 2, cases: 30_000, inFlightMutation: true });
    assert.deepEqual(problemsOf(report), []);
  });

  it('refuses an array whose buffer a getter resized or detached while the options were read (was a segfault)', () => {
    for (const disturb of ['shrink', 'grow', 'detach'] as const) {
      const buffer = new ResizableArrayBuffer(4 * 50_000, { maxByteLength: 4 * 100_000 });
      const logp = new Float32Array(buffer);
      const n = logp.length;
      const options = {
        logp,
        oldLogp: new Float32Array(n),
        advantages: new Float32Array(n),
        mask: new Uint8Array(n).fill(1),
        get clipLow() {
          if (disturb === 'detach') structuredClone(buffer, { transfer: [buffer] });
          else buffer.resize(disturb === 'shrink' ? 0 : 4 * 100_000);
          return 0.2;
        },
      };
      assertConformingError('ppoLoss', () => ppoLoss(options), TypeError, 'for logp but received one whose buffer was detached or resized');
    }
    const buffer = new ResizableArrayBuffer(4 * 6, { maxByteLength: 4 * 12 });
    const labels = Int32Array.from([0, 1]);
    const options = {
      logits: new Float32Array(buffer),
      labels,
      get vocabSize() {
        buffer.resize(0);
        return 3;
      },
    };
    assertConformingError('tokenLogprobs', () => tokenLogprobs(options), TypeError, 'for logits but received one whose buffer was detached or resized');
    const late = new ResizableArrayBuffer(4 * 6, { maxByteLength: 4 * 12 });
    const gradLogp = new Float32Array(2);
    assertConformingError(
      'tokenLogprobsBackward',
      () =>
        native.tokenLogprobsBackward({
          logits: new Float32Array(late),
          vocabSize: 3,
          labels,
          gradLogp,
          get out() {
            late.resize(4 * 2);
            return undefined;
          },
        } as never),
      TypeError,
      'for logits but received one whose buffer was detached or resized',
    );
  });

  it('gives errors found in the kernels the one message shape, naming the argument', () => {
    const logits = new Float32Array(6);
    assertConformingError('tokenLogprobs', () => tokenLogprobs({ logits, vocabSize: 3, labels: Int32Array.from([0, 3]) }), RangeError, 'labels[1] = 3');
    const shared = new ArrayBuffer(64);
    assertConformingError(
      'tokenLogprobsBackward',
      () => tokenLogprobsBackward({ logits: new Float32Array(shared, 0, 6), vocabSize: 3, labels: Int32Array.from([0, 2]), gradLogp: new Float32Array(2), out: new Float32Array(shared, 4, 6) }),
      RangeError,
      'overlap',
    );
    assertConformingError('feedbackMask', () => feedbackMask({ roles: Uint8Array.from([0, 9, 1]), seqOffsets: Int32Array.from([0, 3]) }), RangeError, 'roles[1] = 9');
    const logp = new Float32Array(4);
    const mask = new Uint8Array(4);
    for (const [seqOffsets, fragment] of [
      [[1, 4], 'seqOffsets[0]'],
      [[0, 3, 2, 4], 'non-decreasing'],
      [[0, 3], 'end at the token count 4'],
    ] as const) {
      assertConformingError('sequenceLogprobs', () => sequenceLogprobs({ logp, mask, seqOffsets: Int32Array.from(seqOffsets) }), RangeError, fragment);
    }
  });

  it('gives GSPO a NaN loss for an infinite masked-in logp, as PyTorch (was finite)', () => {
    for (const infinity of [Infinity, -Infinity]) {
      const r = ppoLoss({
        logp: Float32Array.from([-1, infinity, -2, -1]),
        oldLogp: Float32Array.from([-1.1, -1, -2, -1]),
        advantages: Float32Array.from([1, -1, 0.5, 2]),
        mask: Uint8Array.from([1, 1, 1, 1]),
        seqOffsets: Int32Array.from([0, 3, 4]),
        ratioLevel: 'sequence',
      });
      assert.ok(Number.isNaN(r.loss), `logp ${infinity}: loss ${r.loss}`);
      assert.equal(r.nonFinite, 1);
      assert.ok(Number.isNaN(r.grad[1]));
      assert.ok(Number.isFinite(r.grad[3]), 'the other sequence keeps its gradient');
    }
  });

  it('refuses a dpoLoss beta outside the float32 range (was silently 0 or Inf in the f32 math)', () => {
    const pairs = { policyChosen: Float32Array.of(-1, -2), policyRejected: Float32Array.of(-2, -1), refChosen: Float32Array.of(-1.5, -1.5), refRejected: Float32Array.of(-1.5, -1.5) };
    for (const beta of [5e-324, 1e-39, 1e39, 1e300]) {
      assertConformingError('dpoLoss', () => dpoLoss({ ...pairs, beta }), RangeError, 'for beta');
    }
    assert.ok(Number.isFinite(dpoLoss({ ...pairs, beta: 1.2e-38 }).loss));
  });

  it('refuses options whose float32 scale would overflow (was a NaN result)', () => {
    const logits = Float32Array.from([0.5, -1, 2, 0.1]);
    for (const temperature of [5e-324, 1e-300, 1e-39, 1e38, 1e300]) {
      assertConformingError('tokenLogprobs', () => tokenLogprobs({ logits, vocabSize: 4, labels: Int32Array.of(1), temperature }), RangeError, 'for temperature');
    }
    assert.ok(Number.isFinite(tokenLogprobs({ logits, vocabSize: 4, labels: Int32Array.of(1), temperature: 1e-30 }).logp[0]));
    // A -Infinity logit times 1 / T = 0 was NaN: T = 1e37 still has a normal 1 / T.
    const masked = tokenLogprobs({ logits: Float32Array.from([0.5, -Infinity, 2, 0.1]), vocabSize: 4, labels: Int32Array.of(0), temperature: 1e37 });
    assert.ok(Math.abs(masked.logp[0] - Math.log(1 / 3)) < 1e-6, `${masked.logp[0]}`);
    const batch = { logp: Float32Array.of(-1, -2, -1, -1), oldLogp: Float32Array.of(-1.1, -2, -1, -1), advantages: Float32Array.of(1, 0, -1, 0.5), mask: Uint8Array.of(1, 1, 1, 0), seqOffsets: Int32Array.of(0, 2, 4) };
    const overflowing = [
      [{ tokenNormalizer: 1e-40 }, 'tokenNormalizer'],
      [{ tokenNormalizer: 1e-30, dpSize: 1e10 }, 'tokenNormalizer'],
      [{ aggregation: 'seq-mean-token-sum', seqNormalizer: 5e-324 }, 'seqNormalizer'],
      [{ aggregation: 'seq-mean-token-sum-norm', horizon: 1e-39 }, 'horizon'],
      [{ aggregation: 'seq-mean-token-sum-norm', seqNormalizer: 1e-20, horizon: 1e-20 }, 'horizon'],
      [{ aggregation: 'token-sum', dpSize: 1e39 }, 'dpSize'],
    ] as const;
    for (const [options, name] of overflowing) {
      assertConformingError('ppoLoss', () => ppoLoss({ ...batch, ...options }), RangeError, `for ${name}`);
    }
    assert.ok(Number.isFinite(ppoLoss({ ...batch, tokenNormalizer: 1e-30 }).loss));
  });

  it('makes a whole row of dlogits NaN for a NaN gradient, -Infinity logits included (was 0 there)', () => {
    const logits = Float32Array.from([0, -Infinity, 1, -1e4, 2, 0]);
    const cases: [Float32Array, Float32Array | undefined][] = [
      [Float32Array.of(NaN, 1), undefined],
      [Float32Array.of(1, 1), Float32Array.of(NaN, 0)],
    ];
    // Label 1 of the first row is its -Infinity logit.
    for (const label of [0, 1]) {
      for (const [gradLogp, gradEntropy] of cases) {
        const grad = tokenLogprobsBackward({ logits, vocabSize: 3, labels: Int32Array.of(label, 2), gradLogp, gradEntropy });
        assert.ok(grad.subarray(0, 3).every(Number.isNaN), `poisoned row: ${grad.subarray(0, 3)}`);
        assert.ok(grad.subarray(3).every(Number.isFinite), `other row: ${grad.subarray(3)}`);
      }
    }
  });

  it('accepts empty arrays with klCoef > 0 (an empty refLogp has no memory: was a RangeError)', () => {
    const empty = new Float32Array(0);
    const r = ppoLoss({ logp: empty, oldLogp: empty, advantages: empty, mask: new Uint8Array(0), refLogp: empty, klCoef: 0.1 });
    assert.equal(r.loss, 0);
    assert.equal(r.klLoss, 0);
    assert.equal(r.grad.length, 0);
  });
});
