/**
 * The tfjs adapter: each custom op's value and gradient against tfjs's own autodiff of the
 * same math (log_softmax + one-hot, clip/exp/max chains, log-sigmoid, a segment matmul), on
 * the cpu backend and on the wasm backend, and a tiny model that trains with them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';
import '@tensorflow/tfjs-backend-wasm';

import { dpoLoss, ppoLoss, sequenceLogprobs, tokenLogprobs } from '../lib/training/tfjs.js';
import { assertClose, Random } from './support.js';

/** Activates `name`; returns why it cannot run, or undefined when it runs. */
async function useBackend(name: string): Promise<string | undefined> {
  try {
    if (!(await tf.setBackend(name))) return `tfjs backend '${name}' failed to initialise`;
    await tf.ready();
    return undefined;
  } catch (error) {
    return `tfjs backend '${name}' failed to initialise: ${(error as Error).message}`;
  }
}

/** Gradient of `f` at each of `inputs`, with its value. */
function valueAndGrads(f: (...xs: tf.Tensor[]) => tf.Scalar, inputs: tf.Tensor[]) {
  const { value, grads } = tf.valueAndGrads(f)(inputs);
  return { value: value.dataSync()[0], grads: grads.map((g) => g.dataSync() as Float32Array) };
}

const rng = new Random(11);

/** The backend-independent assertions, run once per backend. */
function customGradientTests(backend: string, skip: () => string | undefined) {
  it(`tokenLogprobs matches log_softmax + one-hot, value and gradient (${backend})`, (t) => {
    if (skip()) return t.skip(skip());
    const n = 9;
    const vocab = 13;
    const temperature = 0.7;
    const logits = tf.tensor2d(rng.normals(n * vocab, 3), [n, vocab]);
    const labels = Int32Array.from({ length: n }, () => rng.int(0, vocab));
    const weightLogp = tf.tensor1d(rng.normals(n));
    const weightEntropy = tf.tensor1d(rng.normals(n));
    const ours = valueAndGrads((x) => {
      const { logp, entropy } = tokenLogprobs(x as tf.Tensor2D, labels, { temperature, withEntropy: true });
      return tf.add(tf.sum(tf.mul(logp, weightLogp)), tf.sum(tf.mul(entropy!, weightEntropy)));
    }, [logits]);
    const reference = valueAndGrads((x) => {
      const logSoftmax = tf.logSoftmax(tf.div(x, temperature));
      const logp = tf.sum(tf.mul(logSoftmax, tf.oneHot(tf.tensor1d(labels, 'int32'), vocab)), 1);
      const entropy = tf.neg(tf.sum(tf.mul(tf.exp(logSoftmax), logSoftmax), 1));
      return tf.add(tf.sum(tf.mul(logp, weightLogp)), tf.sum(tf.mul(entropy, weightEntropy)));
    }, [logits]);
    assertClose(ours.value, reference.value, { rtol: 1e-5, atol: 1e-5, label: 'value' });
    assertClose(ours.grads[0], reference.grads[0], { rtol: 1e-4, atol: 1e-6, label: 'dlogits' });

    // Without entropy, with labels as a tensor: logp alone.
    const logpOnly = valueAndGrads((x) => {
      const { logp, entropy } = tokenLogprobs(x as tf.Tensor2D, tf.tensor1d(labels, 'int32'));
      assert.equal(entropy, undefined);
      return tf.sum(tf.mul(logp, weightLogp));
    }, [logits]);
    const logpReference = valueAndGrads((x) => {
      const logp = tf.sum(tf.mul(tf.logSoftmax(x), tf.oneHot(tf.tensor1d(labels, 'int32'), vocab)), 1);
      return tf.sum(tf.mul(logp, weightLogp));
    }, [logits]);
    assertClose(logpOnly.value, logpReference.value, { rtol: 1e-5, atol: 1e-5, label: 'value' });
    assertClose(logpOnly.grads[0], logpReference.grads[0], { rtol: 1e-4, atol: 1e-6, label: 'dlogits' });
  });

  it(`ppoLoss matches the clip/exp/max chain with dual clip and a k3 KL (${backend})`, (t) => {
    if (skip()) return t.skip(skip());
    const n = 40;
    const logp = tf.tensor1d(rng.floats(n, -3, -0.1));
    const oldLogp = Float32Array.from(logp.dataSync(), (x) => x + rng.uniform(-0.5, 0.5));
    const refLogp = Float32Array.from(logp.dataSync(), (x) => x + rng.uniform(-0.3, 0.3));
    const advantages = rng.normals(n);
    const mask = rng.mask(n, 0.8);
    const clipLow = 0.2;
    const clipHigh = 0.28;
    const dualClip = 3;
    const klCoef = 0.05;
    const ours = valueAndGrads((x) => {
      const { loss, stats } = ppoLoss(x as tf.Tensor1D, {
        oldLogp, advantages, mask, clipLow, clipHigh, dualClip, refLogp, klCoef, klEstimator: 'k3',
      });
      assert.ok(stats.clipFraction > 0 && stats.clipFraction < 1, `clipFraction ${stats.clipFraction}`);
      return loss;
    }, [logp]);
    const reference = valueAndGrads((x) => {
      const a = tf.tensor1d(advantages);
      const m = tf.tensor1d(Float32Array.from(mask));
      const ratio = tf.exp(tf.clipByValue(tf.sub(x, tf.tensor1d(oldLogp)), -20, 20));
      const unclipped = tf.mul(tf.neg(a), ratio);
      const clipped = tf.mul(tf.neg(a), tf.clipByValue(ratio, 1 - clipLow, 1 + clipHigh));
      const surrogate = tf.maximum(unclipped, clipped);
      const dual = tf.where(tf.less(a, 0), tf.minimum(surrogate, tf.mul(tf.neg(a), dualClip)), surrogate);
      const diff = tf.sub(x, tf.tensor1d(refLogp));
      const k3 = tf.sub(tf.add(tf.exp(tf.neg(diff)), diff), 1);
      const perToken = tf.add(dual, tf.mul(k3, klCoef));
      return tf.div(tf.sum(tf.mul(perToken, m)), tf.sum(m));
    }, [logp]);
    assertClose(ours.value, reference.value, { rtol: 1e-5, atol: 1e-6, label: 'loss' });
    assertClose(ours.grads[0], reference.grads[0], { rtol: 1e-4, atol: 1e-6, label: 'dlogp' });
  });

  it(`dpoLoss matches -log sigmoid(beta * margin), with label smoothing (${backend})`, (t) => {
    if (skip()) return t.skip(skip());
    const pairs = 6;
    const beta = 0.3;
    const labelSmoothing = 0.1;
    const chosen = tf.tensor1d(rng.floats(pairs, -30, -5));
    const rejected = tf.tensor1d(rng.floats(pairs, -30, -5));
    const refChosen = rng.floats(pairs, -30, -5);
    const refRejected = rng.floats(pairs, -30, -5);
    const ours = valueAndGrads((c, r) => {
      const { loss, stats } = dpoLoss(c as tf.Tensor1D, r as tf.Tensor1D, { refChosen, refRejected, beta, labelSmoothing });
      assert.equal(stats.chosenRewards.length, pairs);
      return loss;
    }, [chosen, rejected]);
    const reference = valueAndGrads((c, r) => {
      const margin = tf.sub(tf.sub(c, tf.tensor1d(refChosen)), tf.sub(r, tf.tensor1d(refRejected)));
      const x = tf.mul(margin, beta);
      // tf.logSigmoid's own gradient reads a disposed tensor in tfjs 4.22; write it out.
      const logSigmoid = (z: tf.Tensor) => tf.sub(tf.minimum(z, 0), tf.log1p(tf.exp(tf.neg(tf.abs(z)))));
      const perPair = tf.sub(tf.mul(logSigmoid(x), -(1 - labelSmoothing)), tf.mul(logSigmoid(tf.neg(x)), labelSmoothing));
      return tf.mean(perPair);
    }, [chosen, rejected]);
    assertClose(ours.value, reference.value, { rtol: 1e-5, atol: 1e-6, label: 'loss' });
    assertClose(ours.grads[0], reference.grads[0], { rtol: 1e-4, atol: 1e-7, label: 'dchosen' });
    assertClose(ours.grads[1], reference.grads[1], { rtol: 1e-4, atol: 1e-7, label: 'drejected' });
  });

  it(`sequenceLogprobs matches a masked segment matmul, sum and average (${backend})`, (t) => {
    if (skip()) return t.skip(skip());
    const seqOffsets = Int32Array.from([0, 4, 4, 9, 12]);
    const n = 12;
    const b = 4;
    const mask = Uint8Array.from([1, 1, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0]);
    const logp = tf.tensor1d(rng.floats(n, -4, 0));
    const weights = tf.tensor1d(rng.normals(b));
    for (const average of [false, true]) {
      const segments = new Float32Array(b * n);
      for (let s = 0; s < b; s++) {
        let count = 0;
        for (let i = seqOffsets[s]; i < seqOffsets[s + 1]; i++) count += mask[i];
        for (let i = seqOffsets[s]; i < seqOffsets[s + 1]; i++) {
          segments[s * n + i] = mask[i] / (average ? Math.max(count, 1) : 1);
        }
      }
      const ours = valueAndGrads((x) => tf.sum(tf.mul(sequenceLogprobs(x as tf.Tensor1D, { mask, seqOffsets, average }), weights)), [logp]);
      const reference = valueAndGrads(
        (x) => tf.sum(tf.mul(tf.reshape(tf.matMul(tf.tensor2d(segments, [b, n]), tf.reshape(x, [n, 1])), [b]), weights)),
        [logp],
      );
      assertClose(ours.value, reference.value, { rtol: 1e-5, atol: 1e-6, label: `value (average ${average})` });
      assertClose(ours.grads[0], reference.grads[0], { rtol: 1e-5, atol: 1e-7, label: `dlogp (average ${average})` });
    }
  });

  it(`a tiny softmax model trains with tokenLogprobs + ppoLoss (${backend})`, (t) => {
    if (skip()) return t.skip(skip());
    const n = 32;
    const features = 6;
    const vocab = 8;
    const local = new Random(5);
    const inputs = tf.tensor2d(local.normals(n * features), [n, features]);
    const labels = Int32Array.from({ length: n }, () => local.int(0, vocab));
    const advantages = Float32Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1 : -1));
    const mask = new Uint8Array(n).fill(1);
    const weights = tf.variable(tf.tensor2d(local.normals(features * vocab, 0.1), [features, vocab]));
    const optimizer = tf.train.adam(0.05);
    const logpNow = () => tf.tidy(() => tokenLogprobs(tf.matMul(inputs, weights), labels).logp.dataSync() as Float32Array);
    const oldLogp = logpNow().slice();
    const losses: number[] = [];
    for (let step = 0; step < 8; step++) {
      tf.tidy(() => {
        optimizer.minimize(() => {
          const { logp, entropy } = tokenLogprobs(tf.matMul(inputs, weights), labels, { withEntropy: true });
          const { loss, stats } = ppoLoss(logp, { oldLogp, advantages, mask, clipLow: 10, clipHigh: 10 });
          losses.push(stats.loss);
          return tf.sub(loss, tf.mul(tf.mean(entropy!), 1e-3));
        });
      });
    }
    const after = logpNow();
    let gain = 0;
    for (let i = 0; i < n; i++) gain += advantages[i] * (after[i] - oldLogp[i]);
    assert.ok(gain > 0, `advantage-weighted log-prob change ${gain}`);
    assert.ok(losses[losses.length - 1] < losses[0] - 0.1, `loss ${losses[0]} -> ${losses[losses.length - 1]}`);
    weights.dispose();
    optimizer.dispose();
  });

  it(`rejects tensors of the wrong rank or dtype, naming the argument (${backend})`, (t) => {
    if (skip()) return t.skip(skip());
    assert.throws(() => tokenLogprobs(tf.zeros([3]) as unknown as tf.Tensor2D, new Int32Array(3)), {
      name: 'RangeError',
      message: /tokenLogprobs: Expected a tensor of rank 2 for logits/,
    });
    assert.throws(() => tokenLogprobs([1, 2] as unknown as tf.Tensor2D, new Int32Array(3)), {
      name: 'TypeError',
      message: /tokenLogprobs: Expected a tf.Tensor for logits/,
    });
    assert.throws(
      () => ppoLoss(tf.zeros([2], 'int32') as tf.Tensor1D, {
        oldLogp: new Float32Array(2), advantages: new Float32Array(2), mask: new Uint8Array(2),
      }),
      { name: 'TypeError', message: /ppoLoss: Expected a float32 tensor for logp/ },
    );
    assert.throws(
      () => sequenceLogprobs(tf.zeros([2, 2]) as unknown as tf.Tensor1D, { mask: new Uint8Array(4), seqOffsets: Int32Array.from([0, 4]) }),
      { name: 'RangeError', message: /sequenceLogprobs: Expected a tensor of rank 1 for logp/ },
    );
  });
}

describe('tfjs adapter on the cpu backend', () => {
  let reason: string | undefined;
  before(async () => {
    reason = await useBackend('cpu');
    assert.equal(reason, undefined, reason);
  });
  customGradientTests('cpu', () => reason);
});

describe('tfjs adapter on the wasm backend', () => {
  let reason: string | undefined;
  before(async () => {
    reason = await useBackend('wasm');
  });
  after(async () => {
    await tf.setBackend('cpu');
  });
  customGradientTests('wasm', () => reason);
});
