/**
 * Inputs beyond 2^31 elements and 2^32 bytes from JavaScript: the logits of 16,384 tokens
 * over a 151,936-entry vocabulary as bf16 (a Uint16Array of 2.49e9 elements, 5 GB). A fresh
 * typed array is lazily zero-filled memory: read and never written, it stays the kernel's
 * zero page, so the test costs seconds and no resident memory. A few rows hold known
 * values, one of them beyond element 2^31 and the last beyond byte 2^32, where a 32-bit
 * index or byte count would wrap; every other row must give exactly the uniform -log(V).
 *
 * The backward of those logits writes 10 GB of f32 gradients: it runs only with
 * TIRL_SCALE_BACKWARD=1 and at least 14 GiB of available memory.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { freemem } from 'node:os';
import { describe, it } from 'node:test';

import { ppoLoss, tokenLogprobs, tokenLogprobsAsync, tokenLogprobsBackward } from '../lib/index.js';
import { assertClose, sanitizerRun } from './support.js';

const N = 16_384;
const V = 151_936;
const TWO_TO_31 = 2 ** 31;

/** bf16 bits of a float that bf16 holds exactly. */
function bf16(x: number): number {
  return new Uint32Array(Float32Array.of(x).buffer)[0] >>> 16;
}

/** Log-prob and entropy of a row of V logits, all 0 but x at the label (float64). */
function oneHotRow(x: number, v: number): { logp: number; entropy: number } {
  const sum = Math.exp(x) + (v - 1);
  const p = Math.exp(x) / sum;
  const q = 1 / sum;
  return { logp: x - Math.log(sum), entropy: -(p * Math.log(p) + (v - 1) * q * Math.log(q)) };
}

// The first row, the row holding element 2^31, and the last row (beyond byte 2^32).
const known = [
  { row: 0, column: 7, value: 10 },
  { row: Math.floor(TWO_TO_31 / V), column: TWO_TO_31 % V, value: 3 },
  { row: N - 1, column: V - 1, value: -2 },
];

function bigLogits(): { logits: Uint16Array; labels: Int32Array } {
  // On a SharedArrayBuffer, which the async form reads in place: an ordinary ArrayBuffer
  // would be copied (5 GB resident) so that JavaScript may transfer it during the call.
  const logits = new Uint16Array(new SharedArrayBuffer(N * V * 2));
  const labels = new Int32Array(N);
  for (let t = 0; t < N; t++) labels[t] = (t * 7919) % V;
  for (const k of known) {
    labels[k.row] = k.column;
    logits[k.row * V + k.column] = bf16(k.value);
  }
  return { logits, labels };
}

function expected(t: number, temperature = 1): { logp: number; entropy: number } {
  const k = known.find((entry) => entry.row === t);
  return k ? oneHotRow(k.value / temperature, V) : { logp: -Math.log(V), entropy: Math.log(V) };
}

describe('inputs beyond 2^31 elements', () => {
  it('tokenLogprobs reads 16,384 x 151,936 bf16 logits (5 GB): every row right, no resident cost', async () => {
    const rssBefore = process.memoryUsage().rss;
    const { logits, labels } = bigLogits();
    assert.ok(logits.length > TWO_TO_31 && logits.byteLength > 2 * TWO_TO_31);
    const start = performance.now();
    const r = tokenLogprobs({ logits, vocabSize: V, labels, dtype: 'bf16', withEntropy: true });
    const seconds = (performance.now() - start) / 1000;
    const want = Array.from({ length: N }, (_, t) => expected(t));
    assertClose(r.logp, want.map((w) => w.logp), { label: 'logp' });
    assertClose(r.entropy!, want.map((w) => w.entropy), { label: 'entropy' });
    // Async, at another temperature, without entropy.
    const a = await tokenLogprobsAsync({ logits, vocabSize: V, labels, dtype: 'bf16', temperature: 2 });
    assertClose(a.logp, Array.from({ length: N }, (_, t) => expected(t, 2).logp), { label: 'async logp T=2' });
    const grown = process.memoryUsage().rss - rssBefore;
    console.log(`# tokenLogprobs bf16 ${N} x ${V}: ${seconds.toFixed(2)} s; RSS grew ${(grown / 2 ** 20).toFixed(0)} MiB`);
    // Page tables of the 5 GB mapping and the small arrays; the logits themselves stay unbacked.
    assert.ok(grown < 256 * 2 ** 20, `RSS grew by ${grown} bytes`);
  });

  it('refuses more than 2^31 - 1 tokens with int32 seqOffsets, by name', () => {
    // Only allocated, never touched: no resident memory.
    const n = TWO_TO_31 + 16;
    const logp = new Float32Array(n);
    const o = { logp, oldLogp: logp, advantages: logp, mask: new Uint8Array(n), aggregation: 'seq-mean-token-mean' as const };
    assert.throws(() => ppoLoss({ ...o, seqOffsets: Int32Array.of(0, 2 ** 31 - 1) }), (error: Error) => {
      assert.equal(error.constructor, RangeError);
      assert.match(error.message, /^ppoLoss: Expected at most 2\^31 - 1 tokens with int32 seqOffsets but received 2147483664 tokens/);
      return true;
    });
  });

  it('meets typed-array lengths only up to what this Node allows, refused by Node itself', () => {
    // Node 20 (V8 11) caps a typed array at 2^32 elements: a larger input cannot reach us.
    assert.throws(() => new Uint8Array(2 ** 32 + 1), RangeError);
  });

  const noLimit = process.platform !== 'linux' ? 'needs ulimit -v' : sanitizerRun();
  it('turns an output the memory cannot hold into a RangeError naming it, not an abort', { skip: noLimit }, () => {
    // Under a 2 GB address-space limit the 512 MB of bf16 logits fit and their 1 GB of
    // gradients do not: napi_create_arraybuffer would end the process ("FATAL ERROR:
    // v8::ArrayBuffer::New Allocation failed"); the bindings allocate through JavaScript.
    // Run twice: ordinary logits (sync, then async, which copies them first), and logits on
    // a SharedArrayBuffer (async, in place); both sets would not fit under one limit.
    const script = `
      const { tokenLogprobsBackward, tokenLogprobsBackwardAsync } = await import(${JSON.stringify(new URL('../lib/index.js', import.meta.url).href)});
      const n = 2 ** 14, v = 2 ** 14;
      const shared = process.argv[1] === 'shared';
      const logits = new Uint16Array(shared ? new SharedArrayBuffer(n * v * 2) : new ArrayBuffer(n * v * 2));
      const o = { logits, vocabSize: v, labels: new Int32Array(n), dtype: 'bf16', gradLogp: new Float32Array(n) };
      const errors = [];
      if (!shared) try { tokenLogprobsBackward(o); } catch (e) { errors.push([e.constructor.name, e.message]); }
      try { await tokenLogprobsBackwardAsync(o); } catch (e) { errors.push([e.constructor.name, e.message]); }
      console.log(JSON.stringify(errors));`;
    const run = (mode: string): string[][] =>
      JSON.parse(execFileSync('/bin/sh', ['-c', 'ulimit -v 2000000 && exec "$0" --input-type=module -e "$1" "$2"', process.execPath, script, mode], { encoding: 'utf8' }));
    const expected = ['RangeError', `tokenLogprobsBackward: could not allocate out (a Float32Array of length ${2 ** 28}): Array buffer allocation failed`];
    const [sync, asyncCopied] = run('ordinary');
    assert.deepEqual(run('shared'), [expected]);
    assert.deepEqual(sync, expected);
    // Whichever allocation fails first, the logits' copy or out, is named.
    assert.equal(asyncCopied[0], 'RangeError');
    assert.match(asyncCopied[1], /^tokenLogprobsBackward: could not allocate (out \(a Float32Array|the async call's copy of logits \(536870912 bytes)/);
  });

  const backward = process.env.TIRL_SCALE_BACKWARD === '1';
  const roomy = freemem() >= 14 * 2 ** 30;
  it('tokenLogprobsBackward writes 2.49e9 f32 gradients (10 GB)', {
    skip: !backward ? 'set TIRL_SCALE_BACKWARD=1 to write 10 GB' : !roomy ? `needs 14 GiB available, ${(freemem() / 2 ** 30).toFixed(1)} GiB free` : false,
  }, () => {
    const { logits, labels } = bigLogits();
    const gradLogp = new Float32Array(N).fill(1);
    const start = performance.now();
    const grad = tokenLogprobsBackward({ logits, vocabSize: V, labels, dtype: 'bf16', gradLogp });
    console.log(`# tokenLogprobsBackward bf16 ${N} x ${V}: ${((performance.now() - start) / 1000).toFixed(2)} s`);
    assert.equal(grad.length, N * V);
    // Zero rows: 1 - 1/V at the label, -1/V elsewhere; checked on rows around the known ones.
    for (const t of [1, known[1].row - 1, known[1].row + 1, N - 2]) {
      const row = grad.subarray(t * V, (t + 1) * V);
      const want = new Float64Array(V).fill(-1 / V);
      want[labels[t]] += 1;
      assertClose(row, want, { label: `grad row ${t}` });
    }
    const last = known[2];
    const sum = Math.exp(last.value) + (V - 1);
    assertClose(grad[last.row * V + last.column], 1 - Math.exp(last.value) / sum, { label: 'last label' });
    assertClose(grad[last.row * V], -1 / sum, { label: 'last row' });
  });
});
