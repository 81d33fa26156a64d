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
 * Carries each episode's outcome advantage back through its turns, in place: `advantages`
 * (`[N]` of the update batch, whose first sequences are the episodes of `episodes`, token for
 * token; `seqOffsets` its boundaries) holds the estimator's advantages; for episode i, its
 * outcome advantage A_i is their mean over its action tokens (outcome estimators give every
 * token of a sequence the same one), and turn t of its n turns gets c_t·γ^(n−t), where c_t is
 * the tool bonus or penalty for a turn that called a tool and A_i for any other turn
 * (`turnLevelCredit`); its action tokens then carry that value.
 */
export function applyTurnCredit(advantages: Float32Array, seqOffsets: Int32Array, episodes: TokenBatch, settings: TurnCreditSettings): void {
  const { mask } = feedbackMask({ roles: episodes.roles, seqOffsets: episodes.seqOffsets });
  const outcome = new Float32Array(episodes.size);
  for (let i = 0; i < episodes.size; i++) {
    const shift = seqOffsets[i]! - episodes.seqOffsets[i]!;
    let sum = 0;
    let count = 0;
    for (let t = episodes.seqOffsets[i]!; t < episodes.seqOffsets[i + 1]!; t++) {
      if (mask[t] === 0) continue;
      sum += advantages[t + shift]!;
      count += 1;
    }
    outcome[i] = count === 0 ? 0 : sum / count;
  }
  const credits = batchTurnCredit({ ...episodes, rewards: outcome }, settings);
  const perToken = broadcastTurnsToTokens(credits, mask, episodes);
  for (let i = 0; i < episodes.size; i++) {
    const shift = seqOffsets[i]! - episodes.seqOffsets[i]!;
    for (let t = episodes.seqOffsets[i]!; t < episodes.seqOffsets[i + 1]!; t++) if (mask[t] !== 0) advantages[t + shift] = perToken[t]!;
  }
}
