/**
 * The update batch of a GRPO step: the episode (and THOR step-level) sequences packed
 * back to back with their masks and advantages, the counts each optimizer step normalises
 * by, and the gathering of micro-batches out of it.
 */
import { feedbackMask } from '../../kernels/index.js';
import { tokenAdvantages, type AdvantageSettings } from '../losses.js';
import { packSequences } from '../rollout.js';
import type { PolicyBatch } from '../trainable_policy.js';

/** A sequence of the update batch, with what the loss needs of it. */
export interface TrainingSequence {
  tokens: Int32Array;
  roles: Uint8Array;
  behaviourLogp: Float32Array;
  /** The sequence's outcome reward, and its advantage group (ids are per kind). */
  reward: number;
  group: number;
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
  /** Action tokens of every sequence, kept or filtered: the tokens the advantages are for. */
  actionMask: Uint8Array;
  /** Advantage of each token (0 off `actionMask`), set once the old log-probs are scored. */
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
export function packUpdate(
  sequences: TrainingSequence[],
): Omit<UpdateBatch, 'oldLogp' | 'rolloutLogp' | 'refLogp' | 'advantages'> & { behaviourLogp: Float32Array } {
  const batch = packSequences(sequences.map((s) => s.tokens));
  const n = batch.tokens.length;
  const roles = new Uint8Array(n);
  const behaviourLogp = new Float32Array(n);
  sequences.forEach((s, i) => {
    const start = batch.seqOffsets[i];
    roles.set(s.roles, start);
    behaviourLogp.set(s.behaviourLogp, start);
  });
  const { mask } = feedbackMask({
    roles,
    seqOffsets: batch.seqOffsets,
    keep: Uint8Array.from(sequences, (s) => (s.keep ? 1 : 0)),
  });
  const { mask: actionMask } = feedbackMask({ roles, seqOffsets: batch.seqOffsets, keep: new Uint8Array(sequences.length).fill(1) });
  const episodeMask = new Uint8Array(n);
  const stepMask = new Uint8Array(n);
  sequences.forEach((s, i) => {
    const target = s.kind === 'episode' ? episodeMask : stepMask;
    for (let t = batch.seqOffsets[i]; t < batch.seqOffsets[i + 1]; t++) target[t] = mask[t];
  });
  return { sequences, batch, mask, episodeMask, stepMask, actionMask, behaviourLogp };
}

/**
 * The advantages of the update batch, `[N]`: the estimator over the episodes (prompt
 * groups, filtered episodes included, as the group statistics always were) and, apart,
 * over THOR's step-level sequences (one group per failure point), each on its action tokens.
 * `sumPiSquared` is the policy's Σπ² when the estimator reads it.
 */
export function updateAdvantages(
  settings: AdvantageSettings,
  update: Omit<UpdateBatch, 'advantages'>,
  sumPiSquared: Float32Array | undefined,
): Float32Array {
  const { sequences, batch } = update;
  const out = new Float32Array(batch.tokens.length);
  for (const kind of ['episode', 'step'] as const) {
    // Episodes come first, then the step-level sequences: each kind is a contiguous range.
    const first = sequences.findIndex((s) => s.kind === kind);
    if (first < 0) continue;
    let end = first;
    while (end < sequences.length && sequences[end].kind === kind) end++;
    const start = batch.seqOffsets[first];
    const stop = batch.seqOffsets[end];
    const range = sequences.slice(first, end);
    const values = tokenAdvantages(settings, {
      rewards: Float32Array.from(range, (s) => s.reward),
      groupIds: Int32Array.from(range, (s) => s.group),
      mask: update.actionMask.subarray(start, stop),
      seqOffsets: Int32Array.from(batch.seqOffsets.subarray(first, end + 1), (o) => o - start),
      oldLogp: update.oldLogp.subarray(start, stop),
      ...(sumPiSquared ? { sumPiSquared: sumPiSquared.subarray(start, stop) } : {}),
    });
    out.set(values, start);
  }
  return out;
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
