/**
 * The demo's policy network: a one-layer GRU language model over the demo vocabulary,
 * written with TensorFlow.js ops that have gradients on both the cpu and wasm backends
 * (token inputs go through a one-hot matmul, not `gather`).
 */
import * as tf from '@tensorflow/tfjs';

import type { SeededRandom } from '../../lib/index.js';

export interface GruShape {
  vocabSize: number;
  hidden: number;
}

let instances = 0;

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

  constructor(shape: GruShape, rng: SeededRandom) {
    this.shape = shape;
    const { vocabSize: v, hidden: h } = shape;
    // tfjs variable names are global: each model gets its own prefix.
    const prefix = `gru${instances++}`;
    const init = (rows: number, cols: number, scale: number, name: string) => {
      const values = new Float32Array(rows * cols);
      for (let i = 0; i < values.length; i++) values[i] = (rng.next() * 2 - 1) * scale;
      return tf.variable(tf.tensor2d(values, [rows, cols]), true, name);
    };
    this.input = init(v, 3 * h, 1 / Math.sqrt(h), `${prefix}/input`);
    this.recurrent = init(h, 3 * h, 1 / Math.sqrt(h), `${prefix}/recurrent`);
    this.inputBias = tf.variable(tf.zeros([3 * h]), true, `${prefix}/input_bias`);
    this.recurrentBias = tf.variable(tf.zeros([3 * h]), true, `${prefix}/recurrent_bias`);
    this.output = init(h, v, 1 / Math.sqrt(h), `${prefix}/output`);
    this.outputBias = tf.variable(tf.zeros([v]), true, `${prefix}/output_bias`);
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
   * Teacher-forced logits of a padded batch of token ids `[B, T]` int32: entry [b, t]
   * holds the next-token logits after reading tokens 0..t of sequence b, `[B, T, V]`.
   */
  logits(tokens: tf.Tensor2D): tf.Tensor3D {
    const [batch, steps] = tokens.shape;
    const h = this.shape.hidden;
    const projected = this.project(tokens.reshape([-1]) as tf.Tensor1D).reshape([batch, steps, 3 * h]);
    let state = this.initialState(batch);
    const states: tf.Tensor2D[] = [];
    for (const x of tf.unstack(projected, 1) as tf.Tensor2D[]) {
      state = this.cell(x, state);
      states.push(state);
    }
    const hidden = tf.stack(states, 1).reshape([batch * steps, h]) as tf.Tensor2D;
    const logits = tf.add(tf.matMul(hidden, this.output), this.outputBias);
    return logits.reshape([batch, steps, this.shape.vocabSize]);
  }

  /**
   * The state after reading each context (contexts may differ in length; shorter ones
   * stop updating once read), `[B, H]`.
   */
  readContexts(contexts: readonly Int32Array[]): tf.Tensor2D {
    return tf.tidy(() => {
      const steps = Math.max(0, ...contexts.map((c) => c.length));
      let state = this.initialState(contexts.length);
      for (let t = 0; t < steps; t++) {
        const inputs = Int32Array.from(contexts, (c) => (t < c.length ? c[t] : 0));
        const live = tf.tensor2d(Float32Array.from(contexts, (c) => (t < c.length ? 1 : 0)), [contexts.length, 1]);
        const next = this.cell(this.project(tf.tensor1d(inputs, 'int32')), state);
        state = tf.add(tf.mul(live, next), tf.mul(tf.sub(1, live), state)) as tf.Tensor2D;
      }
      return state;
    });
  }

  /** Feeds one token per sequence: returns the next-token logits `[B, V]` and the new state. */
  step(tokens: Int32Array, state: tf.Tensor2D): { logits: tf.Tensor2D; state: tf.Tensor2D } {
    return tf.tidy(() => {
      const next = this.cell(this.project(tf.tensor1d(tokens, 'int32')), state);
      const logits = tf.add(tf.matMul(next, this.output), this.outputBias) as tf.Tensor2D;
      return { logits, state: next };
    });
  }
}
