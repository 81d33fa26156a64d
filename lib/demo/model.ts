/**
 * The demo's policy network: a one-layer GRU language model over the demo vocabulary,
 * written with TensorFlow.js ops that have gradients on both the cpu and wasm backends
 * (token inputs go through a one-hot matmul, not `gather`).
 */
import * as tf from '@tensorflow/tfjs';

import type { Random } from './random.js';

export interface GruShape {
  vocabSize: number;
  hidden: number;
}

export class GruLanguageModel {
  readonly shape: GruShape;
  /** Input weights for the z, r and n gates of every token, [V, 3H]. */
  readonly input: tf.Variable<tf.Rank.R2>;
  /** Recurrent weights, [H, 3H]. */
  readonly recurrent: tf.Variable<tf.Rank.R2>;
  readonly inputBias: tf.Variable<tf.Rank.R1>;
  readonly recurrentBias: tf.Variable<tf.Rank.R1>;
  /** Output projection to logits, [H, V]. */
  readonly output: tf.Variable<tf.Rank.R2>;
  readonly outputBias: tf.Variable<tf.Rank.R1>;

  constructor(shape: GruShape, rng: Random) {
    this.shape = shape;
    const { vocabSize: v, hidden: h } = shape;
    const init = (rows: number, cols: number, scale: number) => {
      const values = new Float32Array(rows * cols);
      for (let i = 0; i < values.length; i++) values[i] = (rng.next() * 2 - 1) * scale;
      return tf.variable(tf.tensor2d(values, [rows, cols]));
    };
    this.input = init(v, 3 * h, 1 / Math.sqrt(h));
    this.recurrent = init(h, 3 * h, 1 / Math.sqrt(h));
    this.inputBias = tf.variable(tf.zeros([3 * h]));
    this.recurrentBias = tf.variable(tf.zeros([3 * h]));
    this.output = init(h, v, 1 / Math.sqrt(h));
    this.outputBias = tf.variable(tf.zeros([v]));
  }

  get variables(): tf.Variable[] {
    return [this.input, this.recurrent, this.inputBias, this.recurrentBias, this.output, this.outputBias];
  }

  /** The zero initial state for `batch` sequences, [B, H]. */
  initialState(batch: number): tf.Tensor2D {
    return tf.zeros([batch, this.shape.hidden]);
  }

  /** One GRU step (PyTorch's gate layout): inputs [B, 3H] already projected, state [B, H]. */
  private cell(projected: tf.Tensor2D, state: tf.Tensor2D): tf.Tensor2D {
    const h = this.shape.hidden;
    const recurrent = tf.add(tf.matMul(state, this.recurrent), this.recurrentBias) as tf.Tensor2D;
    const [xz, xr, xn] = tf.split(projected, [h, h, h], 1);
    const [hz, hr, hn] = tf.split(recurrent, [h, h, h], 1);
    const z = tf.sigmoid(tf.add(xz, hz));
    const r = tf.sigmoid(tf.add(xr, hr));
    const n = tf.tanh(tf.add(xn, tf.mul(r, hn)));
    return tf.add(tf.mul(tf.sub(1, z), n), tf.mul(z, state)) as tf.Tensor2D;
  }

  private project(tokens: tf.Tensor1D): tf.Tensor2D {
    const oneHot = tf.oneHot(tokens, this.shape.vocabSize).toFloat() as tf.Tensor2D;
    return tf.add(tf.matMul(oneHot, this.input), this.inputBias) as tf.Tensor2D;
  }

  /**
   * Teacher-forced logits of a padded batch of token ids `[B, T]` (row-major): row
   * b * T + t holds the logits after reading tokens 0..t of sequence b, [B * T, V].
   */
  logits(tokens: Int32Array, batch: number, steps: number): tf.Tensor2D {
    const h = this.shape.hidden;
    const projected = this.project(tf.tensor1d(tokens, 'int32')).reshape([batch, steps, 3 * h]);
    const perStep = tf.unstack(projected, 1) as tf.Tensor2D[];
    let state = this.initialState(batch);
    const states: tf.Tensor2D[] = [];
    for (const x of perStep) {
      state = this.cell(x, state);
      states.push(state);
    }
    const hidden = tf.stack(states, 1).reshape([batch * steps, h]) as tf.Tensor2D;
    return tf.add(tf.matMul(hidden, this.output), this.outputBias) as tf.Tensor2D;
  }

  /** Feeds one token per sequence: returns the next-token logits [B, V] and the new state. */
  step(tokens: Int32Array, state: tf.Tensor2D): { logits: tf.Tensor2D; state: tf.Tensor2D } {
    return tf.tidy(() => {
      const next = this.cell(this.project(tf.tensor1d(tokens, 'int32')), state);
      const logits = tf.add(tf.matMul(next, this.output), this.outputBias) as tf.Tensor2D;
      return { logits, state: next };
    });
  }
}
