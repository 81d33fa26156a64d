/**
 * The update batch of a GRPO step: the episode (and THOR step-level) sequences packed
 * back to back with their masks and advantages, the counts each optimizer step normalises
 * by, and the gathering of micro-batches out of it.
 */
import { feedbackMask } from '../../kernels/index.js';
import { packSequences } from '../rollout.js';
import type { PolicyBatch } from '../trainable_policy.js';

/** A sequence of the update batch, with what the loss needs of it. */
export interface TrainingSequence {
  tokens: Int32Array;
  roles: Uint8Array;
  behaviourLogp: Float32Array;
  advantage: number;
  /** Per-token advantages (the sequence's length), replacing `advantage` where given (turn-level credit). */
  tokenAdvantages?: Float32Array;
  /** Episode sequences are kept or filtered; step-level ones carry the THOR loss. */
  kind: 'episode' | 'step';
  keep: boolean;
}

/** Flat arrays of the whole update batch. */
export interface UpdateBatch {
  sequences: TrainingSequence[];
  batch: PolicyBatch;
  mask: Uint8Array;
  /** Mask of episode tokens and of step-level tokens: the two losses. */
  episodeMask: Uint8Array;
  stepMask: Uint8Array;
  advantages: Float32Array;
  oldLogp: Float32Array;
  /** The rollout engine's (the sampler's) log-probs of the same tokens, next to the trainer's `oldLogp`. */
  rolloutLogp: Float32Array;
  /** Rollout-correction weights of the episode tokens, when the correction is on. */
  weights?: Float32Array;
  refLogp?: Float32Array;
}

/**
 * Flattens the sequences into one batch and builds its masks: the kept action tokens
 * (`feedbackMask`), split into those of the episode loss and those of the step-level loss.
 * The behaviour log-probs come along for a trainer that does not recompute them.
 */
export function packUpdate(sequences: TrainingSequence[]): Omit<UpdateBatch, 'oldLogp' | 'rolloutLogp' | 'refLogp'> & { behaviourLogp: Float32Array } {
  const batch = packSequences(sequences.map((s) => s.tokens));
  const n = batch.tokens.length;
  const roles = new Uint8Array(n);
  const behaviourLogp = new Float32Array(n);
  const advantages = new Float32Array(n);
  sequences.forEach((s, i) => {
    const start = batch.seqOffsets[i];
    roles.set(s.roles, start);
    behaviourLogp.set(s.behaviourLogp, start);
    if (s.tokenAdvantages) advantages.set(s.tokenAdvantages, start);
    else advantages.fill(s.advantage, start, batch.seqOffsets[i + 1]);
  });
  const { mask } = feedbackMask({
    roles,
    seqOffsets: batch.seqOffsets,
    keep: Uint8Array.from(sequences, (s) => (s.keep ? 1 : 0)),
  });
  const episodeMask = new Uint8Array(n);
  const stepMask = new Uint8Array(n);
  sequences.forEach((s, i) => {
    const target = s.kind === 'episode' ? episodeMask : stepMask;
    for (let t = batch.seqOffsets[i]; t < batch.seqOffsets[i + 1]; t++) target[t] = mask[t];
  });
  return { sequences, batch, mask, episodeMask, stepMask, advantages, behaviourLogp };
}

/** The global counts of one optimizer step, which every micro-batch's loss divides by. */
export interface Normalizers {
  /** Trained tokens of episodes, and episodes with any (at least 1). */
  episodeTokens: number;
  episodeSequences: number;
  /** Trained tokens of THOR's step-level sequences. */
  stepTokens: number;
  /** Longest episode sequence (at least 1). */
  horizon: number;
}

/** The global normalisers of one optimizer step: counts over its whole mini-batch. */
export function stepNormalizers(update: UpdateBatch, mini: readonly number[]): Normalizers {
  let episodeTokens = 0;
  let episodeSequences = 0;
  let stepTokens = 0;
  let horizon = 0;
  for (const i of mini) {
    const start = update.batch.seqOffsets[i];
    const end = update.batch.seqOffsets[i + 1];
    let count = 0;
    for (let t = start; t < end; t++) count += update.mask[t];
    if (update.sequences[i].kind === 'episode') {
      episodeTokens += count;
      if (count > 0) episodeSequences += 1;
      horizon = Math.max(horizon, end - start);
    } else {
      stepTokens += count;
    }
  }
  return { episodeTokens, episodeSequences: Math.max(episodeSequences, 1), stepTokens, horizon: Math.max(horizon, 1) };
}

/** A sub-batch of whole sequences and where its tokens sit in the full batch. */
export interface SubBatch {
  batch: PolicyBatch;
  positions: Int32Array;
}

/** The sequences `indices` of `batch` as a {@link SubBatch}. */
export function gatherSequences(batch: PolicyBatch, indices: readonly number[]): SubBatch {
  const sequences = indices.map((i) => batch.tokens.subarray(batch.seqOffsets[i], batch.seqOffsets[i + 1]));
  const sub = packSequences(sequences);
  const positions = new Int32Array(sub.tokens.length);
  indices.forEach((i, k) => {
    for (let t = 0; t < sequences[k].length; t++) positions[sub.seqOffsets[k] + t] = batch.seqOffsets[i] + t;
  });
  return { batch: sub, positions };
}

/** The values of `source` at `positions`. */
export function gatherValues<T extends Float32Array | Uint8Array>(source: T, positions: Int32Array): T {
  const out = new (source.constructor as new (n: number) => T)(positions.length);
  for (let t = 0; t < positions.length; t++) out[t] = source[positions[t]];
  return out;
}

/** Writes `values` to `target` at `positions`. */
export function scatter(target: Float32Array, values: Float32Array, positions: Int32Array): void {
  for (let t = 0; t < positions.length; t++) target[positions[t]] = values[t];
}
