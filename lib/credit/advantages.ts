/** Outcome-level advantages: GRPO (from the kernel), RLOO and REINFORCE++-baseline. */
import { groupAdvantages } from '../kernels/index.js';
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
 * A_i = n/(n-1)·(s_i − μ_g). A group of one has no baseline and gets 0. Sums in float64.
 * @param rewards Float32Array[B]; @param groupIds Int32Array[B], any values, any order.
 */
export function rlooAdvantages(rewards: Float32Array, groupIds: Int32Array): Float32Array {
  checkRewards(rewards, groupIds);
  const sums = new Map<number, { sum: number; count: number }>();
  for (let i = 0; i < rewards.length; i++) {
    const group = sums.get(groupIds[i]!) ?? { sum: 0, count: 0 };
    group.sum += rewards[i]!;
    group.count++;
    sums.set(groupIds[i]!, group);
  }
  return Float32Array.from(rewards, (reward, i) => {
    const { sum, count } = sums.get(groupIds[i]!)!;
    return count < 2 ? 0 : (count / (count - 1)) * (reward - sum / count);
  });
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

/** RLOO per-token advantages of a batch (see `rlooAdvantages`), broadcast to masked action tokens. */
export function rlooTokenAdvantages(batch: TokenBatch, mask: Uint8Array): Float32Array {
  checkBatchRewards(batch);
  return broadcastToTokens(rlooAdvantages(batch.rewards, batch.groupIds), mask, batch.seqOffsets);
}

/**
 * REINFORCE++-baseline: rewards centred on their group mean (the kernel with
 * `scaleByStd: false`), broadcast to action tokens, then whitened over all masked tokens of
 * the batch as verl's `masked_whiten` does: (x − mean) / sqrt(unbiased variance + 1e-8).
 */
export function reinforcePlusPlusBaselineAdvantages(batch: TokenBatch, mask: Uint8Array): Float32Array {
  checkBatchRewards(batch);
  const centred = groupAdvantages({ rewards: batch.rewards, groupIds: batch.groupIds, scaleByStd: false });
  const tokens = broadcastToTokens(centred, mask, batch.seqOffsets);
  let count = 0;
  let sum = 0;
  for (let t = 0; t < tokens.length; t++) if (mask[t] !== 0) { count++; sum += tokens[t]!; }
  if (count === 0) return tokens;
  const mean = sum / count;
  let squares = 0;
  for (let t = 0; t < tokens.length; t++) if (mask[t] !== 0) squares += (tokens[t]! - mean) ** 2;
  const variance = count > 1 ? squares / (count - 1) : 0;
  const scale = 1 / Math.sqrt(variance + 1e-8);
  for (let t = 0; t < tokens.length; t++) if (mask[t] !== 0) tokens[t] = (tokens[t]! - mean) * scale;
  return tokens;
}
