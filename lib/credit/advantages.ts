/** Outcome-level advantages of a batch: GRPO, RLOO and REINFORCE++-baseline, all from the kernels. */
import { advantages, groupAdvantages } from '../kernels/index.js';
import type { TokenBatch } from '../trajectory/batch.js';
import { broadcastToTokens } from './broadcast.js';
import { rangeError, typeError } from '../check.js';

function checkRewards(rewards: Float32Array, groupIds: Int32Array): void {
  if (!(rewards instanceof Float32Array)) throw typeError('rewards', 'a Float32Array', rewards);
  if (!(groupIds instanceof Int32Array) || groupIds.length !== rewards.length) {
    throw typeError('groupIds', `an Int32Array of length ${rewards.length}`, groupIds);
  }
}

function checkBatchRewards(batch: TokenBatch): void {
  for (let i = 0; i < batch.size; i++) {
    if (Number.isNaN(batch.rewards[i]!)) throw rangeError(`batch.trajectories[${i}].reward`, 'a reward for every trajectory', batch.trajectories[i]?.reward);
  }
}

/**
 * RLOO advantages: each reward minus the mean of the other rewards of its group,
 * A_i = n/(n-1)·(s_i − μ_g), from the `advantages` kernel (estimator `'rloo'`). A group of
 * one has no baseline and keeps its reward, as verl's `'rloo'` does. Sums in float64.
 * @param rewards Float32Array[B]; @param groupIds Int32Array[B], any values, any order.
 */
export function rlooAdvantages(rewards: Float32Array, groupIds: Int32Array): Float32Array {
  checkRewards(rewards, groupIds);
  // One masked-in token per sequence: the token advantages are the sequence advantages.
  return advantages({
    estimator: 'rloo', rewards, groupIds,
    mask: new Uint8Array(rewards.length).fill(1),
    seqOffsets: Int32Array.from({ length: rewards.length + 1 }, (_, i) => i),
  }).advantages;
}

/** Options for `grpoTokenAdvantages`. */
export interface GrpoOptions {
  /** Divide by the group's std (GRPO); false only centres (Dr.GRPO). Default true. */
  scaleByStd?: boolean;
  /** Added to the std. Default 1e-6. */
  epsilon?: number;
}

/**
 * GRPO per-token advantages of a batch: the `groupAdvantages` kernel over `batch.rewards`
 * and `batch.groupIds`, broadcast to the masked action tokens.
 * @param mask Uint8Array[N] from `feedbackMask`. @returns Float32Array[N] for `ppoLoss`.
 * @throws RangeError if a trajectory has no reward.
 */
export function grpoTokenAdvantages(batch: TokenBatch, mask: Uint8Array, options: GrpoOptions = {}): Float32Array {
  checkBatchRewards(batch);
  const sequenceAdvantages = groupAdvantages({
    rewards: batch.rewards, groupIds: batch.groupIds,
    scaleByStd: options.scaleByStd ?? true, epsilon: options.epsilon ?? 1e-6,
  });
  return broadcastToTokens(sequenceAdvantages, mask, batch.seqOffsets);
}

/** RLOO per-token advantages of a batch (see `rlooAdvantages`), on the masked action tokens. */
export function rlooTokenAdvantages(batch: TokenBatch, mask: Uint8Array): Float32Array {
  checkBatchRewards(batch);
  return advantages({ estimator: 'rloo', rewards: batch.rewards, groupIds: batch.groupIds, mask, seqOffsets: batch.seqOffsets }).advantages;
}

/**
 * REINFORCE++-baseline (the `advantages` kernel, estimator `'reinforce_plus_plus_baseline'`):
 * rewards centred on their group mean (a group of one keeps its reward), broadcast to the
 * action tokens, then whitened over all masked tokens of the batch as verl's
 * `masked_whiten` does: (x − mean) / sqrt(unbiased variance + 1e-8).
 */
export function reinforcePlusPlusBaselineAdvantages(batch: TokenBatch, mask: Uint8Array): Float32Array {
  checkBatchRewards(batch);
  return advantages({
    estimator: 'reinforce_plus_plus_baseline', rewards: batch.rewards, groupIds: batch.groupIds, mask, seqOffsets: batch.seqOffsets,
  }).advantages;
}
