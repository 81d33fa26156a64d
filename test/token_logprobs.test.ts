import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  info,
  setThreads,
  tokenLogprobs,
  tokenLogprobsAsync,
  tokenLogprobsBackward,
  tokenLogprobsBackwardAsync,
} from '../lib/index.js';
import { fromBf16, reference, referenceGrad, referenceLoss, toBf16 } from './reference/token_logprobs.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, detached, Random } from './support.js';

function randomCase(rng: Random, n: number, vocabSize: number, scale = 3) {
  const logits = rng.normals(n * vocabSize, scale);
  const labels = new Int32Array(n);
  for (let t = 0; t < n; t++) labels[t] = rng.int(0, vocabSize);
  const gradLogp = rng.normals(n);
  const gradEntropy = rng.normals(n);
  return { logits, labels, gradLogp, gradEntropy };
}

/** Tolerances of the brief: 1e-5 relative for f32 inputs (atol covers values near 0). */
const F32 = { rtol: 1e-5, atol: 1e-6 };

// ---------------------------------------------------------------- tests

describe('tokenLogprobs', () => {
  it('matches hand-worked values', () => {
    // Two equal logits: p = 1/2 each, lp = -ln 2, H = ln 2; dL/dlogits = (1 - 1/2, -1/2) / T.
    const logits = Float32Array.from([0, 0, 3, 3]);
    const labels = Int32Array.from([0, 1]);
    for (const temperature of [1, 2]) {
      const r = tokenLogprobs({ logits, vocabSize: 2, labels, temperature, withEntropy: true });
      assertClose(r.logp, [-Math.LN2, -Math.LN2], F32);
      assertClose(r.entropy!, [Math.LN2, Math.LN2], F32);
      const g = tokenLogprobsBackward({ logits, vocabSize: 2, labels, temperature, gradLogp: Float32Array.from([1, 2]) });
      assertClose(g, [0.5 / temperature, -0.5 / temperature, -1 / temperature, 1 / temperature], F32);
    }
    // logits (ln 1, ln 3) at T = 1: p = (1/4, 3/4).
    const r = tokenLogprobs({ logits: Float32Array.from([0, Math.log(3)]), vocabSize: 2, labels: Int32Array.from([1]), withEntropy: true });
    assertClose(r.logp, [Math.log(0.75)], F32);
    assertClose(r.entropy!, [-(0.25 * Math.log(0.25) + 0.75 * Math.log(0.75))], F32);
    assert.equal(tokenLogprobs({ logits: new Float32Array(3), vocabSize: 3, labels: Int32Array.from([2]) }).entropy, undefined);
  });

  it('matches the float64 reference (f32, several shapes and temperatures)', () => {
    const rng = new Random(1);
    for (const [n, v] of [[1, 1], [3, 7], [5, 100], [4, 2048], [3, 2049], [2, 5000], [3, 4096 + 17]]) {
      for (const temperature of [0.7, 1, 2]) {
        const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, n, v);
        const want = reference(logits, v, labels, temperature);
        const got = tokenLogprobs({ logits, vocabSize: v, labels, temperature, withEntropy: true });
        assertClose(got.logp, want.logp, { ...F32, label: `logp ${n}x${v} T=${temperature}` });
        assertClose(got.entropy!, want.entropy, { ...F32, label: `entropy ${n}x${v} T=${temperature}` });
        const noEntropy = tokenLogprobs({ logits, vocabSize: v, labels, temperature });
        assertBitwiseEqual(noEntropy.logp, got.logp, 'logp with and without entropy');
        for (const ge of [undefined, gradEntropy]) {
          const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature, gradLogp, gradEntropy: ge });
          assertClose(grad, referenceGrad(logits, v, labels, temperature, gradLogp, ge), {
            ...F32,
            label: `grad ${n}x${v} T=${temperature} entropy=${ge !== undefined}`,
          });
        }
      }
    }
  });

  it('gives the gradient of the loss: central finite differences', () => {
    const rng = new Random(2);
    for (const [n, v, temperature] of [[2, 5, 1], [3, 9, 0.7], [1, 33, 2]] as const) {
      const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, n, v, 2);
      const x = Float64Array.from(logits);
      const got = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature, gradLogp, gradEntropy });
      const closedForm = referenceGrad(x, v, labels, temperature, gradLogp, gradEntropy);
      const fd = new Float64Array(x.length);
      const h = 1e-5;
      for (let i = 0; i < x.length; i++) {
        const keep = x[i];
        x[i] = keep + h;
        const up = referenceLoss(x, v, labels, temperature, gradLogp, gradEntropy);
        x[i] = keep - h;
        const down = referenceLoss(x, v, labels, temperature, gradLogp, gradEntropy);
        x[i] = keep;
        fd[i] = (up - down) / (2 * h);
      }
      assertClose(closedForm, fd, { rtol: 1e-6, atol: 1e-8, label: 'closed form vs finite differences' });
      assertClose(got, fd, { rtol: 1e-5, atol: 1e-6, label: 'kernel vs finite differences' });
    }
  });

  it('reads bf16 logits: exact against the bf16-rounded reference, close to the f32 one', () => {
    const rng = new Random(3);
    for (const [n, v] of [[4, 10], [3, 3000], [2, 4100]]) {
      for (const temperature of [0.7, 1, 2]) {
        const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, n, v);
        const bits = toBf16(logits);
        const rounded = fromBf16(bits);
        const got = tokenLogprobs({ logits: bits, dtype: 'bf16', vocabSize: v, labels, temperature, withEntropy: true });
        const exact = reference(rounded, v, labels, temperature);
        assertClose(got.logp, exact.logp, { ...F32, label: 'bf16 logp vs rounded reference' });
        assertClose(got.entropy!, exact.entropy, { ...F32, label: 'bf16 entropy vs rounded reference' });
        const unrounded = reference(logits, v, labels, temperature);
        assertClose(got.logp, unrounded.logp, { rtol: 2e-2, atol: 2e-2, label: 'bf16 logp vs f32 reference' });
        assertClose(got.entropy!, unrounded.entropy, { rtol: 2e-2, atol: 2e-2, label: 'bf16 entropy vs f32 reference' });
        const grad = tokenLogprobsBackward({ logits: bits, dtype: 'bf16', vocabSize: v, labels, temperature, gradLogp, gradEntropy });
        assertClose(grad, referenceGrad(rounded, v, labels, temperature, gradLogp, gradEntropy), { ...F32, label: 'bf16 grad' });
        // The f32 kernel on the rounded values computes the same thing.
        const f32Grad = tokenLogprobsBackward({ logits: rounded, vocabSize: v, labels, temperature, gradLogp, gradEntropy });
        assertClose(grad, f32Grad, { rtol: 1e-6, atol: 1e-9, label: 'bf16 vs f32 kernel on rounded values' });
      }
    }
  });

  it('handles a 151,936-entry vocabulary in one row (f32 and bf16)', () => {
    const rng = new Random(4);
    const v = 151936;
    const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, 1, v, 4);
    const want = reference(logits, v, labels, 1);
    const got = tokenLogprobs({ logits, vocabSize: v, labels, withEntropy: true });
    assertClose(got.logp, want.logp, F32);
    assertClose(got.entropy!, want.entropy, F32);
    for (const ge of [undefined, gradEntropy]) {
      const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, gradLogp, gradEntropy: ge });
      assertClose(grad, referenceGrad(logits, v, labels, 1, gradLogp, ge), { rtol: 1e-5, atol: 1e-8 });
    }
    const bits = toBf16(logits);
    const bf = tokenLogprobs({ logits: bits, dtype: 'bf16', vocabSize: v, labels, temperature: 0.7, withEntropy: true });
    const wantBf = reference(fromBf16(bits), v, labels, 0.7);
    assertClose(bf.logp, wantBf.logp, F32);
    assertClose(bf.entropy!, wantBf.entropy, F32);
  });

  it('handles rows longer than 256 blocks of 2048 (the two-exp backward)', () => {
    const rng = new Random(8);
    const v = 256 * 2048 + 5;
    const { logits, labels, gradLogp } = randomCase(rng, 1, v, 2);
    const want = reference(logits, v, labels, 0.7);
    assertClose(tokenLogprobs({ logits, vocabSize: v, labels, temperature: 0.7 }).logp, want.logp, F32);
    const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature: 0.7, gradLogp });
    assertClose(grad, referenceGrad(logits, v, labels, 0.7, gradLogp), { rtol: 1e-5, atol: 1e-9 });
    const inPlace = logits.slice();
    tokenLogprobsBackward({ logits: inPlace, vocabSize: v, labels, temperature: 0.7, gradLogp, out: inPlace });
    assertBitwiseEqual(inPlace, grad, 'in place');
  });

  it('gives the same answer whatever the first entries of a row (its first block is summed from their max)', () => {
    // The kernel sums a row's first block relative to the max of its first 64 entries, and
    // redoes it relative to the block's own max when the rest lies far above (more than
    // 2^64 in exp). Rows here: first entries far below the rest (the redo), a little below
    // (one pass, exps up to ~2^58 at T = 0.5), -inf (no estimate), far above the rest.
    const v = 5000;
    const rng = new Random(21);
    for (const temperature of [0.5, 1, 2]) {
      for (const [head, offset] of [[64, -200], [64, -40], [3, -40], [64, -Infinity], [70, 30], [64, 0]]) {
        const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, 3, v);
        for (let t = 0; t < 3; t++) for (let i = 0; i < head; i++) logits[t * v + i] += offset;
        labels[2] = offset === -Infinity ? head + 1 : 1;  // a label among the shifted entries (finite)
        const want = reference(logits, v, labels, temperature);
        const label = `first ${head} entries ${offset}, T=${temperature}`;
        const got = tokenLogprobs({ logits, vocabSize: v, labels, temperature, withEntropy: true });
        // A label 200 below the rest has logp ~ -200: the relative tolerance covers it.
        assertClose(got.logp, want.logp, { ...F32, label: `${label} logp` });
        assertClose(got.entropy!, want.entropy, { ...F32, label: `${label} entropy` });
        assertBitwiseEqual(tokenLogprobs({ logits, vocabSize: v, labels, temperature }).logp, got.logp, `${label} logp without entropy`);
        const grad = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature, gradLogp, gradEntropy });
        assertClose(grad, referenceGrad(logits, v, labels, temperature, gradLogp, gradEntropy), { ...F32, label: `${label} grad` });
        const bits = toBf16(logits);
        const rounded = fromBf16(bits);
        const exact = reference(rounded, v, labels, temperature);
        const gotBf16 = tokenLogprobs({ logits: bits, dtype: 'bf16', vocabSize: v, labels, temperature, withEntropy: true });
        assertClose(gotBf16.logp, exact.logp, { ...F32, label: `${label} bf16 logp` });
        assertClose(gotBf16.entropy!, exact.entropy, { ...F32, label: `${label} bf16 entropy` });
      }
    }
  });

  it('stays exact for rows offset by hundreds (the fused exponents and their correction)', () => {
    // On AVX2/AVX-512 the forward's exponents are x * c - hi with hi = shift * c in float,
    // up to |hi| < 1024; the rounding of hi (up to 2^-15 here) shifts every exp alike and is
    // taken back from the sum. A label far above the rest has logp near 0, where an
    // uncorrected shift (up to ~2e-5 nats) would exceed the tolerance.
    const v = 4100;
    const rng = new Random(22);
    for (const temperature of [0.7, 1, 1.5]) {
      for (const offset of [300, 700, -650, 2000]) {
        const { logits, labels } = randomCase(rng, 2, v, 1);
        for (let i = 0; i < logits.length; i++) logits[i] += offset;
        // Among the first 64 entries, so that the row's reference is its logit (exponents
        // near 0 for it; a label 2^40 above the reference would lose 1e-6 to float exponents).
        labels[0] = 5;
        logits[5] += 25;  // logp ~ -1e-12 at T = 0.7, -3e-5 at T = 1.5
        const want = reference(logits, v, labels, temperature);
        const got = tokenLogprobs({ logits, vocabSize: v, labels, temperature, withEntropy: true });
        const label = `offset ${offset} T=${temperature}`;
        assertClose(got.logp, want.logp, { ...F32, label: `${label} logp` });
        assertClose(got.entropy!, want.entropy, { ...F32, label: `${label} entropy` });
        const bits = toBf16(logits);
        const exact = reference(fromBf16(bits), v, labels, temperature);
        const gotBf16 = tokenLogprobs({ logits: bits, dtype: 'bf16', vocabSize: v, labels, temperature, withEntropy: true });
        assertClose(gotBf16.logp, exact.logp, { ...F32, label: `${label} bf16 logp` });
        assertClose(gotBf16.entropy!, exact.entropy, { ...F32, label: `${label} bf16 entropy` });
      }
    }
  });

  it('stays exact for huge and tiny logits', () => {
    const labels = Int32Array.from([0, 1, 2, 3]);
    const cases: [number[], number][] = [
      [[1e4, -1e4, 0, 1e4 - 1], 1],
      [[1e4, -1e4, 0, 1e4 - 1], 0.7],
      [[3e38, -3e38, 0, 3e38], 1],
      [[3e38, -3e38, 0, 3e38], 2],
      [[-3e38, -3e38, -3e38, -3e38], 1],
      [[1e-30, -1e-30, 1e-40, 0], 1],
      [[1e-40, 1e-40, 1e-40, 1e-40], 0.7],
    ];
    for (const [row, temperature] of cases) {
      const logits = Float32Array.from([...row, ...row, ...row, ...row]);
      const got = tokenLogprobs({ logits, vocabSize: 4, labels, temperature, withEntropy: true });
      const want = reference(logits, 4, labels, temperature);
      // Compare with the reference rounded to f32, as a value like -6e38 overflows there.
      const label = `row [${row}] T=${temperature}`;
      assertClose(got.logp, Float32Array.from(want.logp), { ...F32, label: `${label} logp` });
      assertClose(got.entropy!, Float32Array.from(want.entropy), { ...F32, label: `${label} entropy` });
      const gradLogp = Float32Array.from([1, -1, 0.5, 2]);
      const gradEntropy = Float32Array.from([0.3, 1, -2, 0.1]);
      for (const ge of [undefined, gradEntropy]) {
        const grad = tokenLogprobsBackward({ logits, vocabSize: 4, labels, temperature, gradLogp, gradEntropy: ge });
        assertClose(grad, referenceGrad(logits, 4, labels, temperature, gradLogp, ge), { ...F32, label: `${label} grad` });
      }
    }
  });

  it('treats -Infinity logits as probability 0, without NaN', () => {
    const inf = Infinity;
    const logits = Float32Array.from([-inf, 0, 1, -inf, -inf, 2, -inf, -inf, -inf, -inf, -inf, 5]);
    const labels = Int32Array.from([1, 0, 3]);
    const got = tokenLogprobs({ logits, vocabSize: 4, labels, withEntropy: true });
    const want = reference(logits, 4, labels, 1);
    assertClose(got.logp, want.logp, F32);
    assert.equal(got.logp[1], -Infinity, 'a -Infinity label has log-probability -Infinity');
    assert.equal(got.logp[2], 0, 'the only finite logit has probability 1');
    assertClose(got.entropy!, want.entropy, F32);
    assert.equal(got.entropy![2], 0);
    const gradLogp = Float32Array.from([1, 0.5, 1]);
    const gradEntropy = Float32Array.from([1, 1, 1]);
    const grad = tokenLogprobsBackward({ logits, vocabSize: 4, labels, gradLogp, gradEntropy });
    assert.ok(grad.every(Number.isFinite), `finite gradient: ${grad}`);
    assertClose(grad, referenceGrad(logits, 4, labels, 1, gradLogp, gradEntropy), F32);
    // -Infinity entries across a block boundary (blocks of 2048) and a whole -Infinity block.
    const v = 5000;
    const wide = new Float32Array(2 * v).fill(-inf);
    wide[4500] = 1;
    wide[4501] = 2;
    wide[v + 7] = 3;
    wide[v + 3000] = 3;
    const wideLabels = Int32Array.from([4501, 7]);
    const r = tokenLogprobs({ logits: wide, vocabSize: v, labels: wideLabels, withEntropy: true });
    assertClose(r.logp, reference(wide, v, wideLabels, 1).logp, F32);
    assertClose(r.entropy!, [-(Math.log(1 / (1 + Math.E)) / (1 + Math.E) + Math.log(Math.E / (1 + Math.E)) * Math.E / (1 + Math.E)), Math.LN2], F32);
    const wideGradLogp = Float32Array.from([1, -2]);
    for (const ge of [undefined, Float32Array.from([0.5, 1])]) {
      const g = tokenLogprobsBackward({ logits: wide, vocabSize: v, labels: wideLabels, gradLogp: wideGradLogp, gradEntropy: ge });
      assert.ok(g.every(Number.isFinite), 'finite gradient with -Infinity blocks');
      assertClose(g, referenceGrad(wide, v, wideLabels, 1, wideGradLogp, ge), F32);
    }
  });

  it('propagates NaN and +Infinity to their row only (as PyTorch)', () => {
    const logits = Float32Array.from([0, NaN, 1, 0, 1, 2, Infinity, 0, 1, -Infinity, -Infinity, -Infinity]);
    const labels = Int32Array.from([0, 2, 1, 0]);
    const got = tokenLogprobs({ logits, vocabSize: 3, labels, withEntropy: true });
    assert.ok(Number.isNaN(got.logp[0]) && Number.isNaN(got.entropy![0]), 'NaN row');
    assertClose(got.logp[1], reference(logits, 3, labels, 1).logp[1], F32);
    assert.ok(Number.isNaN(got.logp[2]) && Number.isNaN(got.entropy![2]), '+Infinity row');
    assert.ok(Number.isNaN(got.logp[3]) && Number.isNaN(got.entropy![3]), 'all -Infinity row');
    const grad = tokenLogprobsBackward({ logits, vocabSize: 3, labels, gradLogp: new Float32Array(4).fill(1), gradEntropy: new Float32Array(4).fill(1) });
    assert.ok(grad.subarray(0, 3).every(Number.isNaN), 'NaN row gradient');
    assert.ok(grad.subarray(3, 6).every(Number.isFinite), 'finite row gradient');
    // NaN in a gradient input poisons only its row.
    const g2 = tokenLogprobsBackward({ logits: logits.subarray(3, 6), vocabSize: 3, labels: Int32Array.from([1]), gradLogp: Float32Array.from([NaN]) });
    assert.ok(g2.every(Number.isNaN));
  });

  it('propagates a NaN met by the vectorised loops, of either sign, f32 and bf16', () => {
    // Rows of two whole blocks plus a tail, so the NaN sits in the SIMD part of a block
    // (the block max ignores NaN; the NaN must still reach the sum and every result).
    const v = 2 * 2048 + 37;
    const rng = new Random(11);
    const logits = rng.normals(4 * v, 3);
    logits[v + 2048 + 100] = NaN; // row 1, second block
    new Uint32Array(logits.buffer)[2 * v + 5] = 0xffc00000; // row 2: a NaN with the sign bit
    const labels = Int32Array.from([3, 4, 5, 6]);
    const gradLogp = rng.normals(4);
    const gradEntropy = rng.normals(4);
    const ref = reference(logits, v, labels, 1);
    for (const [dtype, input] of [['f32', logits], ['bf16', toBf16(logits)]] as const) {
      const tol = dtype === 'f32' ? F32 : { rtol: 2e-2, atol: 2e-2 };
      const got = tokenLogprobs({ logits: input, vocabSize: v, labels, dtype, withEntropy: true });
      for (const t of [1, 2]) {
        assert.ok(Number.isNaN(got.logp[t]) && Number.isNaN(got.entropy![t]), `${dtype} NaN row ${t}`);
      }
      for (const t of [0, 3]) assertClose(got.logp[t], ref.logp[t], tol);
      for (const ge of [undefined, gradEntropy]) {
        const grad = tokenLogprobsBackward({ logits: input, vocabSize: v, labels, dtype, gradLogp, gradEntropy: ge });
        assert.ok(grad.subarray(v, 3 * v).every(Number.isNaN), `${dtype} NaN rows' gradient`);
        assert.ok(grad.subarray(0, v).every(Number.isFinite), `${dtype} finite row gradient`);
        assert.ok(grad.subarray(3 * v).every(Number.isFinite), `${dtype} finite row gradient`);
      }
    }
  });

  it('handles V = 1 and N = 0', () => {
    const one = tokenLogprobs({ logits: Float32Array.from([5, -3]), vocabSize: 1, labels: Int32Array.from([0, 0]), withEntropy: true, temperature: 0.7 });
    assert.deepEqual([...one.logp], [0, 0]);
    assert.deepEqual([...one.entropy!], [0, 0]);
    const g = tokenLogprobsBackward({ logits: Float32Array.from([5, -3]), vocabSize: 1, labels: Int32Array.from([0, 0]), gradLogp: Float32Array.from([1, 2]), gradEntropy: Float32Array.from([1, 1]) });
    assertClose(g, [0, 0], F32);
    const empty = tokenLogprobs({ logits: new Float32Array(0), vocabSize: 32000, labels: new Int32Array(0), withEntropy: true });
    assert.equal(empty.logp.length, 0);
    assert.equal(empty.entropy!.length, 0);
    const emptyBf = tokenLogprobs({ logits: new Uint16Array(0), dtype: 'bf16', vocabSize: 1, labels: new Int32Array(0) });
    assert.equal(emptyBf.logp.length, 0);
    const emptyGrad = tokenLogprobsBackward({ logits: new Float32Array(0), vocabSize: 5, labels: new Int32Array(0), gradLogp: new Float32Array(0) });
    assert.equal(emptyGrad.length, 0);
  });

  it('writes into out buffers, and backward in place over the f32 logits', () => {
    const rng = new Random(5);
    const v = 3000;
    const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, 6, v);
    const out = { logp: new Float32Array(6).fill(9), entropy: new Float32Array(6).fill(9) };
    const r = tokenLogprobs({ logits, vocabSize: v, labels, withEntropy: true, out });
    assert.equal(r.logp, out.logp);
    assert.equal(r.entropy, out.entropy);
    const fresh = tokenLogprobs({ logits, vocabSize: v, labels, withEntropy: true });
    assertBitwiseEqual(out.logp, fresh.logp);
    assertBitwiseEqual(out.entropy, fresh.entropy!);
    // out.entropy is left alone without withEntropy.
    const untouched = new Float32Array(6).fill(7);
    const r2 = tokenLogprobs({ logits, vocabSize: v, labels, out: { logp: out.logp, entropy: untouched } });
    assert.equal(r2.entropy, undefined);
    assert.ok(untouched.every((x) => x === 7));

    for (const ge of [undefined, gradEntropy]) {
      const separate = tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature: 0.7, gradLogp, gradEntropy: ge });
      const outGrad = new Float32Array(6 * v).fill(NaN);
      assert.equal(tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature: 0.7, gradLogp, gradEntropy: ge, out: outGrad }), outGrad);
      assertBitwiseEqual(outGrad, separate, 'out');
      const inPlace = logits.slice();
      const result = tokenLogprobsBackward({ logits: inPlace, vocabSize: v, labels, temperature: 0.7, gradLogp, gradEntropy: ge, out: inPlace });
      assert.equal(result, inPlace);
      // The exps are kept in scratch, not over the logits, so in place is the same path.
      assertBitwiseEqual(inPlace, separate, ge === undefined ? 'in place' : 'in place with entropy');
    }
  });

  it('streams a large gradient out with the same bits, at any alignment of out', () => {
    // 2^24 gradients: the size from which the backward uses non-temporal stores
    // (kMinStreamedFloats, cpu/token_logprobs.cc); rows computed alone are not streamed.
    const v = 16_384;
    const n = 1024;
    const bits = new Uint16Array(n * v);
    let state = 12345;
    for (let i = 0; i < bits.length; i++) {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      bits[i] = 0x3f80 + ((state >>> 16) % 0x180) - 0xc0; // bf16 in about ±[0.5, 4)
    }
    bits.fill(0xff80, 5 * v, 6 * v); // a row of -inf: NaN gradients, as in PyTorch
    bits[9 * v + 7] = 0x7fc0; // a NaN logit
    const labels = new Int32Array(n).map((_, t) => (t * 7919) % v);
    const gradLogp = new Float32Array(n).map((_, t) => ((t % 13) - 6) / 4);
    const base = { logits: bits, dtype: 'bf16', vocabSize: v, labels, gradLogp } as const;
    const aligned = tokenLogprobsBackward(base);
    const shifted = new Float32Array(n * v + 1);
    tokenLogprobsBackward({ ...base, out: shifted.subarray(1) });
    assertBitwiseEqual(shifted.subarray(1), aligned, 'misaligned out');
    for (const t of [0, 5, 9, n - 1]) {
      const row = tokenLogprobsBackward({
        ...base,
        logits: bits.subarray(t * v, (t + 1) * v),
        labels: labels.subarray(t, t + 1),
        gradLogp: gradLogp.subarray(t, t + 1),
      });
      assertBitwiseEqual(aligned.subarray(t * v, (t + 1) * v), row, `row ${t}`);
    }
    assert.ok(aligned.subarray(5 * v, 6 * v).every(Number.isNaN));
  });

  it('is bitwise identical for any thread count, and async agrees with sync', async () => {
    const rng = new Random(6);
    const v = 3001;
    const n = 40;
    const { logits, labels, gradLogp, gradEntropy } = randomCase(rng, n, v);
    const bits = toBf16(logits);
    const threads = info().threads;
    try {
      const run = () => [
        tokenLogprobs({ logits, vocabSize: v, labels, temperature: 0.7, withEntropy: true }),
        tokenLogprobs({ logits: bits, dtype: 'bf16', vocabSize: v, labels, withEntropy: true }),
        tokenLogprobsBackward({ logits, vocabSize: v, labels, temperature: 0.7, gradLogp, gradEntropy }),
        tokenLogprobsBackward({ logits: bits, dtype: 'bf16', vocabSize: v, labels, gradLogp }),
      ] as const;
      setThreads(1);
      const one = run();
      setThreads(7);
      const seven = run();
      for (const i of [0, 1] as const) {
        assertBitwiseEqual(one[i].logp, seven[i].logp, 'logp');
        assertBitwiseEqual(one[i].entropy!, seven[i].entropy!, 'entropy');
      }
      assertBitwiseEqual(one[2], seven[2], 'grad f32');
      assertBitwiseEqual(one[3], seven[3], 'grad bf16');
      const forward = await tokenLogprobsAsync({ logits, vocabSize: v, labels, temperature: 0.7, withEntropy: true });
      assertBitwiseEqual(forward.logp, one[0].logp, 'async logp');
      assertBitwiseEqual(forward.entropy!, one[0].entropy!, 'async entropy');
      const backward = await tokenLogprobsBackwardAsync({ logits: bits, dtype: 'bf16', vocabSize: v, labels, gradLogp });
      assertBitwiseEqual(backward, one[3], 'async grad');
      const inPlace = logits.slice();
      const syncInPlace = logits.slice();
      tokenLogprobsBackward({ logits: syncInPlace, vocabSize: v, labels, temperature: 0.7, gradLogp, gradEntropy, out: syncInPlace });
      await tokenLogprobsBackwardAsync({ logits: inPlace, vocabSize: v, labels, temperature: 0.7, gradLogp, gradEntropy, out: inPlace });
      assertBitwiseEqual(inPlace, syncInPlace, 'async in place');
    } finally {
      setThreads(threads);
    }
  });

  it('rejects malformed calls with a named TypeError or RangeError', async () => {
    const logits = new Float32Array(6);
    const bits = new Uint16Array(6);
    const labels = Int32Array.from([0, 2]);
    const gradLogp = new Float32Array(2);
    const base = { logits, vocabSize: 3, labels };
    const fwd = (o: unknown) => () => tokenLogprobs(o as never);
    const bwd = (o: unknown) => () => tokenLogprobsBackward(o as never);
    // Logits and an out array sharing some bytes of one buffer, without being the same array.
    const shared = new ArrayBuffer(64);
    const sharedBits = new Uint16Array(shared, 0, 6);
    const sharedLogits = new Float32Array(shared, 0, 6);
    const shiftedOut = new Float32Array(shared, 4, 6);
    checkBadInputs([
      { name: 'no options', call: fwd(undefined), error: TypeError, message: 'options object' },
      { name: 'options is an array', call: fwd([logits]), error: TypeError, message: 'options object' },
      { name: 'logits missing', call: fwd({ vocabSize: 3, labels }), error: TypeError, message: 'for logits' },
      { name: 'logits as Array', call: fwd({ ...base, logits: [0, 0, 0, 0, 0, 0] }), error: TypeError, message: 'for logits' },
      { name: 'logits as Float64Array', call: fwd({ ...base, logits: new Float64Array(6) }), error: TypeError, message: 'Float64Array' },
      { name: 'bf16 dtype with a Float32Array', call: fwd({ ...base, dtype: 'bf16' }), error: TypeError, message: 'Uint16Array for logits' },
      { name: 'f32 dtype with a Uint16Array', call: fwd({ ...base, logits: bits }), error: TypeError, message: 'Float32Array for logits' },
      { name: 'unknown dtype', call: fwd({ ...base, dtype: 'f16' }), error: RangeError, message: 'for dtype' },
      { name: 'dtype not a string', call: fwd({ ...base, dtype: 1 }), error: TypeError, message: 'for dtype' },
      { name: 'logits detached', call: fwd({ ...base, logits: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'vocabSize missing', call: fwd({ logits, labels }), error: TypeError, message: 'vocabSize' },
      { name: 'vocabSize a string', call: fwd({ ...base, vocabSize: '3' }), error: TypeError, message: 'vocabSize' },
      { name: 'vocabSize 0', call: fwd({ ...base, vocabSize: 0 }), error: RangeError, message: 'vocabSize' },
      { name: 'vocabSize fractional', call: fwd({ ...base, vocabSize: 2.5 }), error: RangeError, message: 'vocabSize' },
      { name: 'vocabSize NaN', call: fwd({ ...base, vocabSize: NaN }), error: RangeError, message: 'vocabSize' },
      { name: 'logits length not N * V', call: fwd({ ...base, vocabSize: 2 }), error: RangeError, message: 'logits to have length 2 * 2' },
      { name: 'labels missing', call: fwd({ logits, vocabSize: 3 }), error: TypeError, message: 'for labels' },
      { name: 'labels as Uint32Array', call: fwd({ ...base, labels: new Uint32Array(2) }), error: TypeError, message: 'for labels' },
      { name: 'labels too short for logits', call: fwd({ ...base, labels: Int32Array.from([0]) }), error: RangeError, message: 'labels.length * vocabSize' },
      { name: 'label = vocabSize', call: fwd({ ...base, labels: Int32Array.from([0, 3]) }), error: RangeError, message: 'labels[1] = 3' },
      { name: 'label negative', call: fwd({ ...base, labels: Int32Array.from([-1, 0]) }), error: RangeError, message: 'labels[0] = -1' },
      { name: 'temperature 0', call: fwd({ ...base, temperature: 0 }), error: RangeError, message: 'temperature' },
      { name: 'temperature negative', call: fwd({ ...base, temperature: -1 }), error: RangeError, message: 'temperature' },
      { name: 'temperature Infinity', call: fwd({ ...base, temperature: Infinity }), error: RangeError, message: 'temperature' },
      { name: 'temperature NaN', call: fwd({ ...base, temperature: NaN }), error: RangeError, message: 'temperature' },
      { name: 'temperature a string', call: fwd({ ...base, temperature: '1' }), error: TypeError, message: 'temperature' },
      { name: 'withEntropy a number', call: fwd({ ...base, withEntropy: 1 }), error: TypeError, message: 'withEntropy' },
      { name: 'out not an object', call: fwd({ ...base, out: 3 }), error: TypeError, message: 'for out' },
      { name: 'out.logp wrong length', call: fwd({ ...base, out: { logp: new Float32Array(3) } }), error: RangeError, message: 'out.logp' },
      { name: 'out.logp wrong type', call: fwd({ ...base, out: { logp: new Float64Array(2) } }), error: TypeError, message: 'out.logp' },
      { name: 'out.entropy wrong length', call: fwd({ ...base, withEntropy: true, out: { entropy: new Float32Array(1) } }), error: RangeError, message: 'out.entropy' },
      { name: 'backward: gradLogp missing', call: bwd(base), error: TypeError, message: 'gradLogp' },
      { name: 'backward: gradLogp wrong length', call: bwd({ ...base, gradLogp: new Float32Array(3) }), error: RangeError, message: 'gradLogp' },
      { name: 'backward: gradLogp as Float64Array', call: bwd({ ...base, gradLogp: new Float64Array(2) }), error: TypeError, message: 'gradLogp' },
      { name: 'backward: gradEntropy wrong length', call: bwd({ ...base, gradLogp, gradEntropy: new Float32Array(1) }), error: RangeError, message: 'gradEntropy' },
      { name: 'backward: gradEntropy detached', call: bwd({ ...base, gradLogp, gradEntropy: detached((n) => new Float32Array(n)) }), error: TypeError, message: 'detached' },
      { name: 'backward: out wrong length', call: bwd({ ...base, gradLogp, out: new Float32Array(5) }), error: RangeError, message: 'out' },
      { name: 'backward: out a Uint16Array', call: bwd({ ...base, gradLogp, out: new Uint16Array(6) }), error: TypeError, message: 'for out' },
      { name: 'backward: out overlapping bf16 logits', call: bwd({ ...base, logits: sharedBits, dtype: 'bf16', gradLogp, out: shiftedOut }), error: RangeError, message: 'overlap' },
      { name: 'backward: out overlapping f32 logits', call: bwd({ ...base, logits: sharedLogits, gradLogp, out: shiftedOut }), error: RangeError, message: 'overlap' },
      { name: 'backward: label out of range', call: bwd({ ...base, labels: Int32Array.from([5, 0]), gradLogp }), error: RangeError, message: 'labels[0] = 5' },
      { name: 'backward: temperature 0', call: bwd({ ...base, gradLogp, temperature: 0 }), error: RangeError, message: 'temperature' },
    ]);
    await assert.rejects(tokenLogprobsAsync({ ...base, labels: Int32Array.from([0, 9]) }), RangeError);
    await assert.rejects(tokenLogprobsBackwardAsync(null as never), TypeError);
  });
});
