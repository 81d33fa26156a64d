/**
 * TfjsPolicy: token-aligned log-probs of ragged batches, sampling consistent with scoring,
 * gradient accumulation and clipping, frozen copies, and state round trips.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { SeededRandom } from '../lib/training/index.js';
import { TfjsPolicy } from '../lib/training/tfjs.js';
import { Token, tokenizer, VOCAB_SIZE } from '../examples/training/arithmetic.js';
import { assertClose, Random } from './support.js';

let count = 0;

/** A bigram policy with a random table, so every row differs. */
function randomBigram(options: { temperature?: number; stopTokens?: number[]; optimizer?: tf.Optimizer; seed?: number } = {}) {
  count += 1;
  const rng = new Random(options.seed ?? count);
  const table = tf.variable(tf.tensor2d(rng.normals(VOCAB_SIZE * VOCAB_SIZE), [VOCAB_SIZE, VOCAB_SIZE]), true, `policy-test-${count}`);
  const policy = new TfjsPolicy({
    model: (tokens) => {
      const [rows, width] = tokens.shape;
      const oneHot = tf.cast(tf.oneHot(tf.reshape(tokens, [-1]), VOCAB_SIZE), 'float32');
      return tf.reshape(tf.matMul(oneHot, table), [rows, width, VOCAB_SIZE]) as tf.Tensor3D;
    },
    variables: [table],
    optimizer: options.optimizer ?? tf.train.sgd(1),
    tokenizer,
    ...(options.temperature ? { temperature: options.temperature } : {}),
    ...(options.stopTokens ? { stopTokens: options.stopTokens } : {}),
  });
  return { policy, table };
}

/** log softmax(table[previous] / T)[token], in float64. */
function bigramLogp(table: Float32Array, previous: number, token: number, temperature = 1): number {
  const row = Array.from(table.subarray(previous * VOCAB_SIZE, (previous + 1) * VOCAB_SIZE), (z) => z / temperature);
  const max = Math.max(...row);
  const lse = max + Math.log(row.reduce((s, z) => s + Math.exp(z - max), 0));
  return row[token] - lse;
}

const batch = {
  tokens: Int32Array.of(0, 1, 6, 2, /**/ 0, /**/ 0, 3, 7, 3, 7, 1, 6),
  seqOffsets: Int32Array.of(0, 4, 5, 12),
};

describe('TfjsPolicy', () => {
  before(async () => {
    await tf.setBackend('cpu');
  });

  it('scores each token given its own sequence prefix, 0 at sequence starts', async () => {
    const { policy, table } = randomBigram({ temperature: 0.8 });
    const values = table.dataSync() as Float32Array;
    const { logp, entropy } = await policy.logprobs(batch, { withEntropy: true });
    for (let s = 0; s < 3; s++) {
      const start = batch.seqOffsets[s];
      assert.equal(logp[start], 0);
      assert.equal(entropy![start], 0);
      for (let t = start + 1; t < batch.seqOffsets[s + 1]; t++) {
        assertClose(logp[t], bigramLogp(values, batch.tokens[t - 1], batch.tokens[t], 0.8), { label: `logp[${t}]` });
      }
    }
  });

  it('samples with the log-probs it scores, and stops at a stop token', async () => {
    const { policy } = randomBigram({ temperature: 0.7, stopTokens: [Token.answer] });
    const contexts = [Int32Array.of(0), Int32Array.of(0, 1, 6), Int32Array.of(0, 3, 7)];
    const sample = () => {
      const random = new SeededRandom(3);
      return policy.sampleTurns(contexts, { maxTokens: 6, random: () => random.next() });
    };
    const turns = await sample();
    for (const [i, turn] of turns.entries()) {
      const stop = turn.tokens.indexOf(Token.answer);
      assert.ok(stop === -1 ? turn.tokens.length === 6 : stop === turn.tokens.length - 1, `turn ${i}: ${turn.tokens}`);
      assert.equal(turn.text, tokenizer.decode(turn.tokens));
      const tokens = Int32Array.from([...contexts[i], ...turn.tokens]);
      const { logp } = await policy.logprobs({ tokens, seqOffsets: Int32Array.of(0, tokens.length) });
      assertClose(turn.logprobs, logp.subarray(contexts[i].length), { rtol: 1e-5, atol: 1e-6, label: `turn ${i}` });
    }
    // The same generator state samples the same turns.
    assert.deepEqual((await sample()).map((t) => t.tokens), turns.map((t) => t.tokens));
  });

  it('accumulates gradients across calls, clips their global norm, and discards non-finite ones', async () => {
    const { policy, table } = randomBigram({ seed: 100 });
    const initial = table.dataSync().slice();
    const gradLogp = Float32Array.from(batch.tokens, (_, t) => (t % 3) - 1);
    const once = async () => policy.accumulateGradients(batch, () => ({ gradLogp }));
    await once();
    await once();
    const { gradNorm } = await policy.applyGradients({ maxGradNorm: 1e-3 });
    // SGD at rate 1: the step is minus the clipped gradient, whose norm is then 1e-3.
    const step = (table.dataSync() as Float32Array).map((v, i) => v - initial[i]);
    assertClose(Math.hypot(...step), 1e-3, { rtol: 1e-3, label: 'clipped norm' });
    assert.ok(gradNorm > 1e-3);

    // The unclipped gradient of two identical calls is twice that of one.
    const { policy: other } = randomBigram({ seed: 100 });
    await other.accumulateGradients(batch, () => ({ gradLogp }));
    assertClose((await other.applyGradients()).gradNorm, gradNorm / 2, { rtol: 1e-5, label: 'one call' });

    const before = table.dataSync().slice();
    await policy.accumulateGradients(batch, () => ({ gradLogp: gradLogp.map((g) => g * NaN) }));
    assert.ok(Number.isNaN((await policy.applyGradients()).gradNorm));
    assert.deepEqual(table.dataSync(), before, 'a NaN gradient is not applied');
  });

  it('keeps a frozen copy fixed while the live policy trains', async () => {
    const { policy } = randomBigram();
    const frozen = await policy.frozenCopy();
    const start = (await policy.logprobs(batch)).logp;
    await policy.accumulateGradients(batch, () => ({ gradLogp: new Float32Array(batch.tokens.length).fill(-1) }));
    await policy.applyGradients();
    const trained = (await policy.logprobs(batch)).logp;
    assert.ok(trained.some((v, i) => Math.abs(v - start[i]) > 1e-3), 'the live policy moved');
    assert.deepEqual((await frozen.logprobs(batch)).logp, start, 'the frozen copy did not');
    assert.deepEqual((await policy.logprobs(batch)).logp, trained, 'scoring the frozen copy leaves the live policy as it was');
    await assert.rejects(frozen.accumulateGradients(batch, () => ({ gradLogp: new Float32Array(12) })), /frozen/);
  });

  it('saves and restores its parameters and optimizer state', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tirl-policy-'));
    try {
      const { policy, table } = randomBigram({ optimizer: tf.train.adam(0.05) });
      const gradLogp = Float32Array.from(batch.tokens, (_, t) => Math.sin(t));
      await policy.accumulateGradients(batch, () => ({ gradLogp }));
      await policy.applyGradients();
      await policy.saveState(dir);
      const saved = table.dataSync().slice();
      const step = async () => {
        await policy.accumulateGradients(batch, () => ({ gradLogp }));
        await policy.applyGradients();
        return table.dataSync().slice();
      };
      const continued = await step();
      await step();
      await policy.loadState(dir);
      assert.deepEqual(table.dataSync(), saved);
      assert.deepEqual(await step(), continued, 'the optimizer state came back too');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
