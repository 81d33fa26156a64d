/**
 * Turn- and step-level credit: AlphaApollo's discounted turn rewards and THOR's step rewards
 * from tool execution status (MATH.md).
 */
import type { TokenBatch } from '../trajectory/batch.js';
import { USER_FEEDBACK_TOOL } from '../trajectory/chat.js';
import type { Trajectory } from '../trajectory/model.js';
import { checkObject, rangeError, typeError } from '../check.js';

/** Options for `turnLevelCredit`. */
export interface TurnCreditOptions {
  /** Discount per turn, in [0, 1]. Default 0.99. */
  gamma?: number;
  /** Credit of a turn whose tool call succeeded, before discounting. Default 0.1. */
  successReward?: number;
  /** Credit of a turn whose tool call failed (error or timeout), before discounting. Default -0.05. */
  failureReward?: number;
  /** Outcome reward carried by turns without a tool call. Default: the trajectory's `reward`. */
  finalReward?: number;
}

/**
 * AlphaApollo turn-level credit. Walking the n turns backwards, turn t (1-based) gets
 * c_t·γ^(n−t), where c_t is `successReward` (+0.1) if its tool call succeeded,
 * `failureReward` (−0.05) if it failed or timed out, and the final reward otherwise (a turn
 * without a response, or whose response is a user message, `USER_FEEDBACK_TOOL`, not a tool's).
 * @returns one credit per turn, in turn order.
 * @throws RangeError if no final reward is given or known.
 */
export function turnLevelCredit(trajectory: Trajectory, options: TurnCreditOptions = {}): number[] {
  checkObject('trajectory', trajectory);
  checkObject('options', options);
  const gamma = options.gamma ?? 0.99;
  if (typeof gamma !== 'number' || !(gamma >= 0 && gamma <= 1)) throw rangeError('options.gamma', 'a number in [0, 1]', gamma);
  const success = options.successReward ?? 0.1;
  const failure = options.failureReward ?? -0.05;
  const finalReward = options.finalReward ?? trajectory.reward;
  if (typeof finalReward !== 'number' || !Number.isFinite(finalReward)) {
    throw rangeError('options.finalReward', `a finite reward (trajectory ${JSON.stringify(trajectory.id)} has none)`, finalReward);
  }
  const turns = trajectory.turns;
  const credits = new Array<number>(turns.length);
  let discount = 1;
  for (let t = turns.length - 1; t >= 0; t--) {
    const response = turns[t]!.response;
    const toolCall = response !== undefined && response.toolName !== USER_FEEDBACK_TOOL;
    const base = !toolCall ? finalReward : response.status === 'success' ? success : failure;
    credits[t] = base * discount;
    discount *= gamma;
  }
  return credits;
}

/**
 * `turnLevelCredit` for every trajectory of a batch, in the batch's global turn order
 * (Float32Array[T]), ready for `broadcastTurnsToTokens`. `finalReward` is taken per
 * trajectory; the other options apply to all.
 */
export function batchTurnCredit(batch: TokenBatch, options: Omit<TurnCreditOptions, 'finalReward'> = {}): Float32Array {
  const credits = new Float32Array(batch.turnOffsets[batch.size]!);
  batch.trajectories.forEach((trajectory, i) => {
    const reward = batch.rewards[i]!;
    credits.set(turnLevelCredit(trajectory, { ...options, finalReward: reward }), batch.turnOffsets[i]!);
  });
  return credits;
}

/** THOR step rewards of a batch, in global turn order. */
export interface StepRewards {
  /** 1 where the turn's code ran successfully, 0 where it failed or timed out, 0 where it is not a step. */
  rewards: Float32Array;
  /** 1 where the turn executed code (has a tool response), i.e. is a step. */
  isStep: Uint8Array;
}

/**
 * THOR step-level rewards: each tool execution is a step with reward 1 if it ran
 * ('success') and 0 if it failed ('error' or 'timeout'). Failed steps are where THOR
 * samples alternative continuations; see `maskSharedPrefix`.
 */
export function stepRewards(batch: TokenBatch): StepRewards {
  const turns = batch.turnOffsets[batch.size]!;
  const rewards = new Float32Array(turns);
  const isStep = new Uint8Array(turns);
  batch.trajectories.forEach((trajectory, i) => {
    trajectory.turns.forEach((turn, k) => {
      if (turn.response === undefined) return;
      const index = batch.turnOffsets[i]! + k;
      isStep[index] = 1;
      rewards[index] = turn.response.status === 'success' ? 1 : 0;
    });
  });
  return { rewards, isStep };
}

/**
 * THOR: continuations sampled from the same failed step share their prefix, which must not
 * be trained on twice. For each group of the batch with two or more sequences, the longest
 * common token prefix of its members is masked out (set to 0) of each member's loss mask.
 * @param mask Uint8Array[N] from `feedbackMask`; not modified.
 * @param groupIds Int32Array[B] of branch groups. Default `batch.groupIds`.
 * @returns a new mask.
 */
export function maskSharedPrefix(batch: TokenBatch, mask: Uint8Array, groupIds: Int32Array = batch.groupIds): Uint8Array {
  const total = batch.seqOffsets[batch.size]!;
  if (!(mask instanceof Uint8Array) || mask.length !== total) throw typeError('mask', `a Uint8Array of length ${total}`, mask);
  if (!(groupIds instanceof Int32Array) || groupIds.length !== batch.size) throw typeError('groupIds', `an Int32Array of length ${batch.size}`, groupIds);
  const members = new Map<number, number[]>();
  for (let i = 0; i < batch.size; i++) {
    const list = members.get(groupIds[i]!) ?? [];
    list.push(i);
    members.set(groupIds[i]!, list);
  }
  const result = mask.slice();
  for (const list of members.values()) {
    if (list.length < 2) continue;
    const first = list[0]!;
    let common = Math.min(...list.map((i) => batch.lengths[i]!));
    for (const i of list.slice(1)) {
      let n = 0;
      while (n < common && batch.tokens[batch.seqOffsets[i]! + n] === batch.tokens[batch.seqOffsets[first]! + n]) n++;
      common = n;
    }
    for (const i of list) result.fill(0, batch.seqOffsets[i]!, batch.seqOffsets[i]! + common);
  }
  return result;
}
