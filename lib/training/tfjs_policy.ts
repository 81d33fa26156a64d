/**
 * `TfjsPolicy` (`tirl/tfjs`): a TensorFlow.js causal language model as the trainers'
 * `Policy`, whose log-probs and their gradients run in tirl's kernels through the adapters
 * of `tfjs_ops.ts`.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import * as tf from '@tensorflow/tfjs';

import type {
  ObservationRole,
  Policy,
  PolicyBatch,
  PolicyLogprobs,
  PolicyOutputGradient,
  SampledTurn,
  SampleOptions,
} from './trainable_policy.js';
import { tokenLogprobs, type TfjsTokenLogprobsResult } from './tfjs_ops.js';

/** Tokenizer of a {@link TfjsPolicy}: text in and out of token ids. */
export interface TfjsTokenizer {
  /** Tokens of an observation, with any template the model expects around that role. */
  encode(text: string, role: ObservationRole): Int32Array;
  /** Text of sampled tokens (what the environment receives). */
  decode(tokens: Int32Array): string;
}

/** Options of {@link TfjsPolicy}. */
export interface TfjsPolicyOptions {
  /**
   * A causal language model over a padded batch: token ids `[B, T]` int32 to logits
   * `[B, T, V]` float32 where row t scores the token AFTER position t and sees no later
   * position (padding sits at the end, so it never leaks into real rows). It must compute
   * from {@link TfjsPolicyOptions.variables}. For a `tf.LayersModel` `m`:
   * `(tokens) => m.apply(tokens) as tf.Tensor3D`.
   */
  model: (tokens: tf.Tensor2D) => tf.Tensor3D;
  /**
   * The trainable parameters the model reads (optimised, checkpointed, frozen by
   * {@link TfjsPolicy.frozenCopy}); names must be unique. For a `tf.LayersModel` `m`:
   * `m.trainableWeights.map((w) => w.read() as tf.Variable)`.
   */
  variables: tf.Variable[];
  /** The optimizer applying the accumulated gradients, e.g. `tf.train.adam(1e-3)`. */
  optimizer: tf.Optimizer;
  /** Turns observations into tokens and sampled tokens into text. */
  tokenizer: TfjsTokenizer;
  /** Tokens that end a turn when sampled (kept in the turn). Default none: turns end at `maxTokens`. */
  stopTokens?: readonly number[];
  /** Softmax temperature used for sampling AND for the log-probs trained on, in [1e-37, 1e37]. Default 1. */
  temperature?: number;
  /** Token id used to pad batches; its rows are never read. Default 0. */
  padToken?: number;
}

/** A padded view of a ragged batch: which padded row scores which token. */
interface PaddedBatch {
  tokens: Int32Array;
  /** Next-token label of each padded row (the pad token where a row scores nothing). */
  labels: Int32Array;
  /** For each padded row, the ragged index of the token it scores, or -1. */
  target: Int32Array;
  rows: number;
  width: number;
}

function padBatch(batch: PolicyBatch, padToken: number): PaddedBatch {
  const rows = batch.seqOffsets.length - 1;
  let width = 1;
  for (let b = 0; b < rows; b++) width = Math.max(width, batch.seqOffsets[b + 1] - batch.seqOffsets[b]);
  const tokens = new Int32Array(rows * width).fill(padToken);
  const labels = new Int32Array(rows * width).fill(padToken);
  const target = new Int32Array(rows * width).fill(-1);
  for (let b = 0; b < rows; b++) {
    const start = batch.seqOffsets[b];
    const length = batch.seqOffsets[b + 1] - start;
    tokens.set(batch.tokens.subarray(start, start + length), b * width);
    for (let j = 0; j + 1 < length; j++) {
      labels[b * width + j] = batch.tokens[start + j + 1];
      target[b * width + j] = start + j + 1;
    }
  }
  return { tokens, labels, target, rows, width };
}

/** Moves padded per-row values onto the tokens they score (0 for first tokens). */
function toTokens(rowValues: Float32Array, padded: PaddedBatch, numTokens: number): Float32Array {
  const out = new Float32Array(numTokens);
  for (let r = 0; r < padded.target.length; r++) if (padded.target[r] >= 0) out[padded.target[r]] = rowValues[r];
  return out;
}

/** The inverse of {@link toTokens} for gradients: token values onto the rows that score them. */
function toRows(tokenValues: Float32Array, padded: PaddedBatch): Float32Array {
  const out = new Float32Array(padded.target.length);
  for (let r = 0; r < padded.target.length; r++) if (padded.target[r] >= 0) out[r] = tokenValues[padded.target[r]];
  return out;
}

/** A named tensor, as `tf.io.encodeWeights` and `Optimizer.getWeights` pass them. */
interface NamedTensor {
  name: string;
  tensor: tf.Tensor;
}

/** A tfjs weights manifest and its binary, as tfjs's own `model.json` + `.bin` format holds them. */
async function writeWeights(dir: string, name: string, tensors: NamedTensor[]): Promise<void> {
  const { data, specs } = await tf.io.encodeWeights(tensors);
  const manifest: tf.io.WeightsManifestConfig = [{ paths: [`${name}.bin`], weights: specs }];
  await writeFile(join(dir, `${name}.bin`), new Uint8Array(data as ArrayBuffer));
  await writeFile(join(dir, `${name}.json`), JSON.stringify({ format: 'tfjs-weights', weightsManifest: manifest }));
}

async function readWeights(dir: string, name: string): Promise<NamedTensor[]> {
  const { weightsManifest } = JSON.parse(await readFile(join(dir, `${name}.json`), 'utf8')) as {
    weightsManifest: tf.io.WeightsManifestConfig;
  };
  const bytes = await readFile(join(dir, `${name}.bin`));
  const data = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const decoded = tf.io.decodeWeights(data, weightsManifest[0].weights);
  return weightsManifest[0].weights.map((spec) => ({ name: spec.name, tensor: decoded[spec.name] }));
}

/**
 * A {@link Policy} over a tfjs causal language model: samples turns token by token, scores
 * batches with {@link tokenLogprobs} (our kernel, forward and backward), accumulates
 * gradients with `tf.variableGrads`, clips their global norm and applies them with its
 * optimizer, and checkpoints its variables and optimizer state in tfjs's weights format.
 */
export class TfjsPolicy implements Policy {
  readonly temperature: number;
  private readonly options: TfjsPolicyOptions;
  private readonly stopTokens: ReadonlySet<number>;
  private readonly padToken: number;
  private accumulated: Map<string, tf.Tensor> = new Map();
  /** Parameter values of a frozen copy; undefined for the live policy. */
  private readonly frozen: tf.Tensor[] | undefined;

  constructor(options: TfjsPolicyOptions, frozen?: tf.Tensor[]) {
    this.options = options;
    this.temperature = options.temperature ?? 1;
    this.stopTokens = new Set(options.stopTokens ?? []);
    this.padToken = options.padToken ?? 0;
    this.frozen = frozen;
  }

  encode(text: string, role: ObservationRole): Int32Array {
    return this.options.tokenizer.encode(text, role);
  }

  async sampleTurns(contexts: readonly Int32Array[], options: SampleOptions): Promise<SampledTurn[]> {
    const sampled = contexts.map(() => ({ tokens: [] as number[], logprobs: [] as number[], open: true }));
    for (let step = 0; step < options.maxTokens; step++) {
      const active = sampled.flatMap((s, i) => (s.open ? [i] : []));
      if (active.length === 0) break;
      const sequences = active.map((i) => Int32Array.from([...contexts[i], ...sampled[i].tokens]));
      const lastLogits = this.withParameters(() =>
        tf.tidy(() => {
          const width = Math.max(...sequences.map((s) => s.length));
          const tokens = new Int32Array(sequences.length * width).fill(this.padToken);
          sequences.forEach((s, b) => tokens.set(s, b * width));
          const logits = this.options.model(tf.tensor2d(tokens, [sequences.length, width], 'int32'));
          const vocab = logits.shape[2];
          const lastRows = Int32Array.from(sequences, (s, b) => b * width + s.length - 1);
          return tf.gather(tf.reshape(logits, [-1, vocab]), lastRows).dataSync() as Float32Array;
        }),
      );
      const vocab = lastLogits.length / active.length;
      active.forEach((i, b) => {
        const { token, logprob } = sampleToken(lastLogits.subarray(b * vocab, (b + 1) * vocab), this.temperature, options.random);
        sampled[i].tokens.push(token);
        sampled[i].logprobs.push(logprob);
        if (this.stopTokens.has(token)) sampled[i].open = false;
      });
    }
    return sampled.map((s) => {
      const tokens = Int32Array.from(s.tokens);
      return { tokens, logprobs: Float32Array.from(s.logprobs), text: this.options.tokenizer.decode(tokens) };
    });
  }

  async logprobs(batch: PolicyBatch, options: { withEntropy?: boolean; withSumPiSquared?: boolean } = {}): Promise<PolicyLogprobs> {
    const numTokens = batch.tokens.length;
    const padded = padBatch(batch, this.padToken);
    const result: PolicyLogprobs = { logp: new Float32Array(0) };
    this.withParameters(() =>
      tf.tidy(() => {
        const { logp, entropy, sumPiSquared } = this.rowLogprobs(padded, options.withEntropy ?? false, options.withSumPiSquared ?? false);
        result.logp = toTokens(logp.dataSync() as Float32Array, padded, numTokens);
        if (entropy) result.entropy = toTokens(entropy.dataSync() as Float32Array, padded, numTokens);
        if (sumPiSquared) result.sumPiSquared = toTokens(sumPiSquared.dataSync() as Float32Array, padded, numTokens);
      }),
    );
    return result;
  }

  async accumulateGradients(
    batch: PolicyBatch,
    lossGradient: (outputs: PolicyLogprobs) => PolicyOutputGradient,
    options: { withEntropy?: boolean } = {},
  ): Promise<PolicyLogprobs> {
    if (this.frozen) throw new Error('TfjsPolicy: a frozen copy cannot be trained');
    const numTokens = batch.tokens.length;
    const padded = padBatch(batch, this.padToken);
    let outputs: PolicyLogprobs | undefined;
    const grads = tf.tidy(() => {
      const { grads: step } = tf.variableGrads(() => {
        const { logp, entropy } = this.rowLogprobs(padded, options.withEntropy ?? false);
        outputs = { logp: toTokens(logp.dataSync() as Float32Array, padded, numTokens) };
        if (entropy) outputs.entropy = toTokens(entropy.dataSync() as Float32Array, padded, numTokens);
        const gradient = lossGradient(outputs);
        // A surrogate whose parameter gradient is (dLoss/dlogp)·(dlogp/dθ) + the same for entropy.
        let surrogate = tf.sum(tf.mul(logp, tf.tensor1d(toRows(gradient.gradLogp, padded))));
        if (entropy && gradient.gradEntropy) {
          surrogate = tf.add(surrogate, tf.sum(tf.mul(entropy, tf.tensor1d(toRows(gradient.gradEntropy, padded)))));
        }
        return surrogate as tf.Scalar;
      }, this.options.variables);
      const summed: Record<string, tf.Tensor> = {};
      for (const [name, grad] of Object.entries(step)) {
        const previous = this.accumulated.get(name);
        summed[name] = previous ? tf.add(previous, grad) : grad;
      }
      return summed;
    });
    for (const [name, grad] of Object.entries(grads)) {
      this.accumulated.get(name)?.dispose();
      this.accumulated.set(name, grad);
    }
    return outputs!;
  }

  async applyGradients(options: { maxGradNorm?: number } = {}): Promise<{ gradNorm: number }> {
    const grads = this.accumulated;
    this.accumulated = new Map();
    if (grads.size === 0) return { gradNorm: 0 };
    const gradNorm = tf.tidy(() =>
      Math.sqrt([...grads.values()].reduce((sum, g) => sum + tf.sum(tf.square(g)).dataSync()[0], 0)),
    );
    if (Number.isFinite(gradNorm)) {
      const scale = options.maxGradNorm !== undefined && gradNorm > options.maxGradNorm ? options.maxGradNorm / gradNorm : 1;
      tf.tidy(() => {
        const scaled: tf.NamedTensorMap = {};
        for (const [name, g] of grads) scaled[name] = scale === 1 ? g : tf.mul(g, scale);
        this.options.optimizer.applyGradients(scaled);
      });
    }
    for (const g of grads.values()) g.dispose();
    return { gradNorm };
  }

  async frozenCopy(): Promise<Policy> {
    const values = this.parameterValues().map((v) => tf.keep(v.clone()));
    return new TfjsPolicy(this.options, values);
  }

  async saveState(dir: string): Promise<void> {
    const values = this.parameterValues();
    await writeWeights(dir, 'weights', this.options.variables.map((v, i) => ({ name: v.name, tensor: values[i] })));
    const optimizerWeights = await this.options.optimizer.getWeights();
    await writeWeights(dir, 'optimizer', optimizerWeights);
    for (const w of optimizerWeights) if (!(w.tensor instanceof tf.Variable)) w.tensor.dispose();
    await writeWeights(dir, 'optimizer-scalars', optimizerScalars(this.options.optimizer));
  }

  async loadState(dir: string): Promise<void> {
    const weights = new Map((await readWeights(dir, 'weights')).map((w) => [w.name, w.tensor]));
    this.options.variables.forEach((v, i) => {
      const value = weights.get(v.name);
      if (!value) throw new Error(`TfjsPolicy: the checkpoint in ${dir} has no weights for variable '${v.name}'`);
      if (this.frozen) {
        this.frozen[i].dispose();
        this.frozen[i] = value;
      } else {
        v.assign(value);
        value.dispose();
      }
    });
    const optimizer = this.options.optimizer;
    await optimizer.setWeights(await readWeights(dir, 'optimizer'));
    for (const { name, tensor } of await readWeights(dir, 'optimizer-scalars')) {
      (optimizer as unknown as Record<string, tf.Variable>)[name].assign(tensor);
      tensor.dispose();
    }
  }

  dispose(): void {
    for (const g of this.accumulated.values()) g.dispose();
    this.accumulated.clear();
    for (const v of this.frozen ?? []) v.dispose();
  }

  /** Padded-row log-probs (and entropies, Σπ²) of the next tokens, `[rows * width]`. */
  private rowLogprobs(
    padded: PaddedBatch,
    withEntropy: boolean,
    withSumPiSquared = false,
  ): TfjsTokenLogprobsResult & { sumPiSquared?: tf.Tensor1D } {
    const logits = this.options.model(tf.tensor2d(padded.tokens, [padded.rows, padded.width], 'int32'));
    const vocab = logits.shape[2];
    const rows = tf.reshape(logits, [-1, vocab]) as tf.Tensor2D;
    const result = tokenLogprobs(rows, padded.labels, { temperature: this.temperature, withEntropy });
    if (!withSumPiSquared) return result;
    // Σ_v π_v² of softmax(logits / temperature), the distribution the log-probs are of (no gradient).
    const sumPiSquared = tf.sum(tf.square(tf.softmax(tf.div(rows, this.temperature))), -1) as tf.Tensor1D;
    return { ...result, sumPiSquared };
  }

  /** The parameter values this policy computes with (its own snapshot when frozen). */
  private parameterValues(): tf.Tensor[] {
    return this.frozen ?? this.options.variables;
  }

  /** Runs `compute` with this policy's parameters loaded into the shared variables. */
  private withParameters<T>(compute: () => T): T {
    if (!this.frozen) return compute();
    const live = this.options.variables.map((v) => tf.keep(v.clone()));
    this.options.variables.forEach((v, i) => v.assign(this.frozen![i]));
    try {
      return compute();
    } finally {
      this.options.variables.forEach((v, i) => {
        v.assign(live[i]);
        live[i].dispose();
      });
    }
  }
}

/**
 * Scalar variables an optimizer keeps outside `getWeights()`, by property name: Adam's
 * running powers of beta1/beta2, which `setWeights` recomputes with `pow` and so restores
 * only to the last bit. Saving them makes a resumed run bitwise equal to an uninterrupted one.
 */
function optimizerScalars(optimizer: tf.Optimizer): NamedTensor[] {
  return Object.entries(optimizer)
    .filter(([, value]) => value instanceof tf.Variable && value.rank === 0)
    .map(([name, value]) => ({ name, tensor: value as tf.Variable }));
}

/** Draws a token from softmax(logits / temperature); returns it with its log-probability. */
function sampleToken(logits: Float32Array, temperature: number, random: () => number): { token: number; logprob: number } {
  let max = -Infinity;
  for (const z of logits) max = Math.max(max, z / temperature);
  let total = 0;
  for (const z of logits) total += Math.exp(z / temperature - max);
  const logTotal = Math.log(total);
  let u = random() * total;
  let token = logits.length - 1;
  for (let v = 0; v < logits.length; v++) {
    u -= Math.exp(logits[v] / temperature - max);
    if (u < 0) {
      token = v;
      break;
    }
  }
  return { token, logprob: logits[token] / temperature - max - logTotal };
}
