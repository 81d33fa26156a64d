/**
 * The Llama policy's GGUF export in llama.cpp (node-llama-cpp 3.21.1, CPU build): the file
 * round-trips through our reader; llama.cpp loads it and its next-token log-probs match the
 * tfjs forward on the same weights (f32 within 2e-5 nats (measured ~2e-6); f16 weights measured (~4e-3) and bounded by 2e-2).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { fromHalf, readGguf, toHalf, writeGguf, type GgufValue } from '../lib/gguf/gguf.js';
import { LlamaModel } from '../lib/training/llama.js';
import { LlamaCppEngine } from '../lib/chat_client/llama_cpp.js';
import { SeededRandom } from '../lib/training/random.js';

const VOCAB = Array.from({ length: 40 }, (_, i) => `t${i}`);
const vocabulary = { tokens: VOCAB, bos: 1, eos: 2, pad: 0 };

function model(seed: number, tiedEmbeddings = false) {
  const rng = new SeededRandom(seed);
  return new LlamaModel({ vocabSize: VOCAB.length, dModel: 64, layers: 2, heads: 4, ffnHidden: 128, contextLength: 64, tiedEmbeddings }, () => rng.next());
}

/** The tfjs forward's next-token log-probs after each prefix, float64. */
function tfjsLogprobs(m: LlamaModel, tokens: number[]): Float64Array[] {
  const logits = tf.tidy(() => tf.logSoftmax(m.logits(tf.tensor2d(tokens, [1, tokens.length], 'int32'))).dataSync());
  return tokens.map((_, t) => Float64Array.from(logits.subarray(t * VOCAB.length, (t + 1) * VOCAB.length)));
}

function maxAbsDiff(a: Float64Array[], b: Float64Array[]): number {
  let max = 0;
  a.forEach((row, t) => row.forEach((v, k) => { max = Math.max(max, Math.abs(v - b[t]![k]!)); }));
  return max;
}

describe('GGUF', () => {
  it('round-trips metadata of every type and f32/f16 tensors', () => {
    const metadata = new Map<string, GgufValue>([
      ['general.architecture', { type: 'string', value: 'llama' }],
      ['u8', { type: 'uint8', value: 200 }], ['i8', { type: 'int8', value: -5 }],
      ['u16', { type: 'uint16', value: 60000 }], ['i16', { type: 'int16', value: -3000 }],
      ['u32', { type: 'uint32', value: 4e9 }], ['i32', { type: 'int32', value: -2e9 }],
      ['f32', { type: 'float32', value: 0.5 }], ['f64', { type: 'float64', value: Math.PI }],
      ['b', { type: 'bool', value: true }], ['u64', { type: 'uint64', value: 2n ** 40n }], ['i64', { type: 'int64', value: -(2n ** 40n) }],
      ['s', { type: 'string', value: 'héllo ▁' }],
      ['arr', { type: 'array', itemType: 'string', value: ['a', '', 'ccc'] }],
      ['arrf', { type: 'array', itemType: 'float32', value: [1.5, -2] }],
    ]);
    const a = Float32Array.from({ length: 15 }, (_, i) => i * 0.1 - 0.7);
    const b = Float32Array.from({ length: 7 }, (_, i) => 1 / (i + 1));
    const file = readGguf(writeGguf(metadata, [
      { name: 'a', shape: [3, 5], type: 'f32', data: a },
      { name: 'b', shape: [7], type: 'f16', data: b },
    ]));
    assert.equal(file.version, 3);
    assert.deepEqual(file.metadata, metadata);
    assert.deepEqual(file.tensors.map((t) => [t.name, t.shape, t.type]), [['a', [3, 5], 'f32'], ['b', [7], 'f16']]);
    assert.deepEqual(file.tensors[0]!.data, a);
    assert.deepEqual([...file.tensors[1]!.data], [...b].map((v) => fromHalf(toHalf(v))));
  });

  it('converts to half with round-to-nearest-even, subnormals, overflow and NaN', () => {
    assert.equal(toHalf(1), 0x3c00);
    assert.equal(toHalf(-2), 0xc000);
    assert.equal(toHalf(65504), 0x7bff);
    assert.equal(toHalf(65520), 0x7c00); // rounds up past the largest half: +Inf
    assert.equal(toHalf(0.1), 0x2e66);
    assert.equal(toHalf(2 ** -24), 0x0001); // smallest subnormal
    assert.equal(toHalf(2 ** -26), 0x0000); // below half of it: zero
    assert.equal(toHalf(1 + 2 ** -11), 0x3c00); // a tie rounds to even
    assert.equal(toHalf(1 + 3 * 2 ** -11), 0x3c02);
    assert.ok(Number.isNaN(fromHalf(toHalf(NaN))));
    assert.equal(fromHalf(toHalf(-Infinity)), -Infinity);
    assert.equal(fromHalf(0x3555), 0.333251953125);
  });

  it('refuses malformed input with errors naming it', () => {
    assert.throws(() => writeGguf(new Map(), [{ name: 'x', shape: [2, 2], type: 'f32', data: new Float32Array(3) }]), { name: 'RangeError', message: /tensors\[0\]\.data\.length/ });
    assert.throws(() => writeGguf(new Map(), [{ name: 'x', shape: [0], type: 'f32', data: new Float32Array(0) }]), { name: 'RangeError', message: /tensors\[0\]\.shape\[0\]/ });
    assert.throws(() => readGguf(new Uint8Array(8)), { name: 'RangeError', message: /gguf magic/ });
    const bytes = writeGguf(new Map(), [{ name: 'x', shape: [4], type: 'f32', data: new Float32Array(4) }]);
    assert.throws(() => readGguf(bytes.subarray(0, bytes.length - 24)), { name: 'RangeError' });
  });

  it('writes the llama.cpp tensor names and shapes of the model (ggml rows: [out, in])', async () => {
    const m = model(3);
    const file = readGguf(await m.toGguf(vocabulary));
    const byName = new Map(file.tensors.map((t) => [t.name, t]));
    assert.equal(file.tensors.length, 1 + 2 * 9 + 2);
    assert.deepEqual(byName.get('token_embd.weight')!.shape, [40, 64]);
    assert.deepEqual(byName.get('blk.1.ffn_gate.weight')!.shape, [128, 64]);
    assert.deepEqual(byName.get('blk.1.ffn_down.weight')!.shape, [64, 128]);
    assert.deepEqual(byName.get('output.weight')!.shape, [40, 64]);
    // W[in][out] is written transposed: row `out` of the file holds column `out` of W.
    const w = (await m.blocks[0]!.gate.data()) as Float32Array;
    assert.equal(byName.get('blk.0.ffn_gate.weight')!.data[5 * 64 + 7], w[7 * 128 + 5]);
    assert.equal((file.metadata.get('llama.attention.head_count') as { value: number }).value, 4);
    assert.equal(readGguf(await model(3, true).toGguf(vocabulary)).tensors.some((t) => t.name === 'output.weight'), false);
    m.dispose();
  });
});

let engineAvailable = true;
try {
  await import('node-llama-cpp' as string);
} catch {
  engineAvailable = false;
}

describe('llama.cpp runs the exported policy', { skip: engineAvailable ? false : 'node-llama-cpp is not installed' }, () => {
  let dir = '';
  before(async () => {
    await tf.setBackend('cpu');
    dir = await mkdtemp(join(tmpdir(), 'tirl-gguf-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('gives the tfjs forward\'s next-token log-probs (f32 within 2e-5; f16 within 2e-2)', async () => {
    const tokens = [1, 5, 9, 13, 22, 3, 3, 17, 30, 39, 0, 8, 11, 4, 27, 35, 2, 6, 19, 24];
    for (const tied of [false, true]) {
      const m = model(tied ? 12 : 11, tied);
      const want = tfjsLogprobs(m, tokens);
      const diffs: Record<string, number> = {};
      for (const type of ['f32', 'f16'] as const) {
        const path = join(dir, `model-${tied}-${type}.gguf`);
        await writeFile(path, await m.toGguf(vocabulary, type));
        const engine = await LlamaCppEngine.open({ modelPath: path, sequences: 1, contextSize: 64 });
        try {
          diffs[type] = maxAbsDiff(await engine.nextTokenLogprobs(tokens, VOCAB.length), want);
        } finally {
          await engine.close();
        }
      }
      console.log(`tied ${tied}: max |logp_llama.cpp - logp_tfjs| f32 ${diffs.f32!.toExponential(2)}, f16 ${diffs.f16!.toExponential(2)} nats`);
      assert.ok(diffs.f32! < 2e-5, `f32 ${diffs.f32}`);
      assert.ok(diffs.f16! < 2e-2, `f16 ${diffs.f16}`);
      assert.ok(diffs.f16! > diffs.f32!, 'f16 weights should cost precision');
      m.dispose();
    }
  });
});
