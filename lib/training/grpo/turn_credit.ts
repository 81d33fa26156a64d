/**
 * AlphaApollo's turn-level credit in GRPO: each episode's outcome advantage is carried back
 * through its turns with `turnLevelCredit` (a discount per turn, and a bonus or a penalty for
 * each tool call by how it ran), and the credit of each turn becomes the per-token advantage
 * of its action tokens, which the policy-loss kernel reads as it is.
 */
import { batchTurnCredit, broadcastTurnsToTokens, type TurnCreditOptions } from '../../credit/index.js';
import { feedbackMask } from '../../kernels/index.js';
import type { TokenBatch } from '../../trajectory/index.js';
import { checkNumber, checkObject } from '../../check.js';

/** The trainer option: `turnLevelCredit`'s options less the final reward (the episode's advantage is). */
export type TurnCreditSettings = Required<Omit<TurnCreditOptions, 'finalReward'>>;

/** Checks the option and fills in `turnLevelCredit`'s defaults; errors name `options.turnCredit.<name>`. */
export function turnCreditSettings(value: Omit<TurnCreditOptions, 'finalReward'>): TurnCreditSettings {
  checkObject('options.turnCredit', value);
  return {
    gamma: checkNumber('options.turnCredit.gamma', value.gamma, 0.99, 0, 1),
    successReward: checkNumber('options.turnCredit.successReward', value.successReward, 0.1, -Infinity, Infinity),
    failureReward: checkNumber('options.turnCredit.failureReward', value.failureReward, -0.05, -Infinity, Infinity),
  };
}

/**
 * Per-token advantages of each episode of `batch` (one Float32Array per sequence, the
 * sequence's length): turn t of an episode with n turns gets c_t·γ^(n−t), where c_t is the
 * tool bonus or penalty for a turn that called a tool and the episode's outcome advantage
 * (`sequenceAdvantages[i]`, from the trainer's estimator) for any other turn; its action
 * tokens carry that value, every other token 0.
 */
export function turnCreditAdvantages(batch: TokenBatch, sequenceAdvantages: Float32Array, settings: TurnCreditSettings): Float32Array[] {
  const credits = batchTurnCredit({ ...batch, rewards: sequenceAdvantages }, settings);
  const { mask } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
  const tokens = broadcastTurnsToTokens(credits, mask, batch);
  return Array.from({ length: batch.size }, (_, i) => tokens.slice(batch.seqOffsets[i]!, batch.seqOffsets[i + 1]!));
}
