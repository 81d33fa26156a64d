/**
 * The TensorFlow.js kernel adapters of `tirl/tfjs`: tirl's kernels as tfjs ops with custom
 * gradients, so a tfjs model trains with them. Each op's forward AND backward run in the
 * native kernels; tfjs only sees a tensor in and a tensor out, so the ops work on any
 * backend that can read its tensors synchronously (`cpu`, `wasm`). The losses are chosen
 * in the losses seam (`losses.ts`), as the trainers' are.
 */
import * as tf from '@tensorflow/tfjs';

import {
  sequenceLogprobs as sequenceLogprobsKernel,
  sequenceLogprobsBackward,
  tokenLogprobs as tokenLogprobsKernel,
  tokenLogprobsBackward,
} from '../kernels/index.js';
import type { DpoLossOptions, DpoLossResult, PpoLossOptions, PpoLossResult, SequenceLogprobsOptions } from '../kernels/index.js';
import { policyLoss, preferenceLoss } from './losses.js';

/** Options of {@link tokenLogprobs}. */
export interface TfjsTokenLogprobsOptions {
  /** Softmax temperature T in [1e-37, 1e37]: log-probs are taken under softmax(logits / T). Default 1. */
  temperature?: number;
  /** Also return the entropy of each row's distribution (differentiable too). Default false. */
  withEntropy?: boolean;
}

/** Result of {@link tokenLogprobs}. */
export interface TfjsTokenLogprobsResult {
  /** Log-probability of each row's label, `[N]`, in nats. */
  logp: tf.Tensor1D;
  /** Entropy of each row's distribution, `[N]`, in nats; present when `withEntropy`. */
  entropy?: tf.Tensor1D;
}

/** Options of {@link ppoLoss}: those of the `ppoLoss` kernel except `logp`, which is the tensor. */
export type TfjsPpoLossOptions = Omit<PpoLossOptions, 'logp' | 'out'>;

/** Options of {@link dpoLoss}: the reference log-probs (constants) and the loss settings. */
export type TfjsDpoLossOptions = Omit<DpoLossOptions, 'policyChosen' | 'policyRejected' | 'out'>;

/** Options of {@link sequenceLogprobs}: mask `[N]`, seqOffsets `[B + 1]`, average (default false). */
export type TfjsSequenceLogprobsOptions = Omit<SequenceLogprobsOptions, 'logp' | 'out'>;

function checkTensor(tensor: tf.Tensor, op: string, name: string, rank: number): void {
  if (!(tensor instanceof tf.Tensor)) {
    throw new TypeError(`${op}: Expected a tf.Tensor for ${name} but received ${describe(tensor)}`);
  }
  if (tensor.rank !== rank) {
    throw new RangeError(`${op}: Expected a tensor of rank ${rank} for ${name} but received shape [${tensor.shape}]`);
  }
}

/** The tensor's values, read synchronously (works on the cpu and wasm backends). */
function float32Data(tensor: tf.Tensor, op: string, name: string, rank: number): Float32Array {
  checkTensor(tensor, op, name, rank);
  if (tensor.dtype !== 'float32') {
    throw new TypeError(`${op}: Expected a float32 tensor for ${name} but received dtype ${tensor.dtype}`);
  }
  return tensor.dataSync() as Float32Array;
}

function describe(value: unknown): string {
  return value === null ? 'null' : `a value of type ${typeof value}`;
}

/**
 * Log-probability of each row's label under softmax(logits / temperature), and optionally
 * the entropy of each row, as a differentiable tfjs op. Forward: the `tokenLogprobs`
 * kernel; gradient w.r.t. the logits (through both outputs): `tokenLogprobsBackward`.
 *
 * @param logits `[N, V]` float32: one row per token.
 * @param labels `[N]` token ids in [0, V): an `Int32Array` or an int32 tensor (no gradient).
 */
export function tokenLogprobs(
  logits: tf.Tensor2D,
  labels: Int32Array | tf.Tensor1D,
  options: TfjsTokenLogprobsOptions = {},
): TfjsTokenLogprobsResult {
  const op = 'tokenLogprobs';
  checkTensor(logits, op, 'logits', 2);
  const [numTokens, vocabSize] = logits.shape;
  const labelIds = labels instanceof tf.Tensor ? Int32Array.from(labels.dataSync()) : labels;
  const temperature = options.temperature ?? 1;
  const withEntropy = options.withEntropy ?? false;
  const forward = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const input = args[0] as tf.Tensor2D;
    const save = args[1] as tf.GradSaveFunc;
    const { logp, entropy } = tokenLogprobsKernel({
      logits: float32Data(input, op, 'logits', 2),
      vocabSize,
      labels: labelIds,
      temperature,
      withEntropy,
    });
    save([input]);
    let value: tf.Tensor;
    if (entropy === undefined) {
      value = tf.tensor1d(logp);
    } else {
      const packed = new Float32Array(2 * numTokens);
      packed.set(logp, 0);
      packed.set(entropy, numTokens);
      value = tf.tensor2d(packed, [2, numTokens]);
    }
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const upstream = dy.dataSync() as Float32Array;
        const gradLogits = tokenLogprobsBackward({
          logits: saved[0].dataSync() as Float32Array,
          vocabSize,
          labels: labelIds,
          temperature,
          gradLogp: withEntropy ? upstream.subarray(0, numTokens) : upstream,
          gradEntropy: withEntropy ? upstream.subarray(numTokens) : undefined,
        });
        return tf.tensor2d(gradLogits, [numTokens, vocabSize]);
      },
    };
  });
  const output = forward(logits);
  if (!withEntropy) return { logp: output as tf.Tensor1D };
  const [logp, entropy] = tf.unstack(output) as tf.Tensor1D[];
  return { logp, entropy };
}

/**
 * The PPO clipped surrogate of the `ppoLoss` kernel as a differentiable tfjs op: the loss
 * is a scalar whose gradient w.r.t. `logp` is the kernel's fused gradient. Everything
 * else (old log-probs, advantages, mask, reference log-probs, weights) is a constant.
 *
 * @param logp `[N]` float32: current-policy log-probs, e.g. from {@link tokenLogprobs}.
 * @returns the loss and the kernel's statistics (pgLoss, klLoss, clip fractions, approxKl,
 *   nonFinite) of this forward pass.
 */
export function ppoLoss(
  logp: tf.Tensor1D,
  options: TfjsPpoLossOptions,
): { loss: tf.Scalar; stats: Omit<PpoLossResult, 'grad'> } {
  let stats: Omit<PpoLossResult, 'grad'> | undefined;
  const forward = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const { grad, ...rest } = policyLoss({
      ...options,
      logp: float32Data(args[0] as tf.Tensor, 'ppoLoss', 'logp', 1),
    });
    stats = rest;
    return {
      value: tf.scalar(rest.loss),
      gradFunc: (dy: tf.Tensor) => tf.mul(dy, tf.tensor1d(grad)),
    };
  });
  const loss = forward(logp) as tf.Scalar;
  return { loss, stats: stats! };
}

/**
 * The DPO-family loss of the `dpoLoss` kernel as a differentiable tfjs op over the policy's
 * summed (for IPO: averaged) completion log-probs, e.g. from {@link sequenceLogprobs}.
 *
 * @param policyChosen `[P]` float32.
 * @param policyRejected `[P]` float32.
 * @returns the loss and the kernel's statistics (rewards, reward accuracy).
 */
export function dpoLoss(
  policyChosen: tf.Tensor1D,
  policyRejected: tf.Tensor1D,
  options: TfjsDpoLossOptions,
): { loss: tf.Scalar; stats: Omit<DpoLossResult, 'gradChosen' | 'gradRejected'> } {
  let stats: Omit<DpoLossResult, 'gradChosen' | 'gradRejected'> | undefined;
  const forward = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const { gradChosen, gradRejected, ...rest } = preferenceLoss(options, {
      refChosen: options.refChosen,
      refRejected: options.refRejected,
      policyChosen: float32Data(args[0] as tf.Tensor, 'dpoLoss', 'policyChosen', 1),
      policyRejected: float32Data(args[1] as tf.Tensor, 'dpoLoss', 'policyRejected', 1),
    });
    stats = rest;
    return {
      value: tf.scalar(rest.loss),
      gradFunc: (dy: tf.Tensor) => [tf.mul(dy, tf.tensor1d(gradChosen)), tf.mul(dy, tf.tensor1d(gradRejected))],
    };
  });
  const loss = forward(policyChosen, policyRejected) as tf.Scalar;
  return { loss, stats: stats! };
}

/**
 * Per-sequence sum (or mean, with `average`) of masked token log-probs as a differentiable
 * tfjs op. Forward: the `sequenceLogprobs` kernel; gradient: `sequenceLogprobsBackward`.
 *
 * @param logp `[N]` float32 token log-probs.
 * @returns `[B]` float32, B = seqOffsets.length - 1.
 */
export function sequenceLogprobs(logp: tf.Tensor1D, options: TfjsSequenceLogprobsOptions): tf.Tensor1D {
  const forward = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const sums = sequenceLogprobsKernel({
      ...options,
      logp: float32Data(args[0] as tf.Tensor, 'sequenceLogprobs', 'logp', 1),
    });
    return {
      value: tf.tensor1d(sums),
      gradFunc: (dy: tf.Tensor) =>
        tf.tensor1d(
          sequenceLogprobsBackward({
            gradSeq: dy.dataSync() as Float32Array,
            mask: options.mask,
            seqOffsets: options.seqOffsets,
            average: options.average,
          }),
        ),
    };
  });
  return forward(logp) as tf.Tensor1D;
}
