import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

/**
 * verl's advantage estimators, by their registry keys (`verl/trainer/ppo/core_algos.py`);
 * formulas in docs/math.md ("Advantage estimators").
 */
export type AdvantageEstimator =
  | 'grpo'
  | 'grpo_passk'
  | 'gdpo'
  | 'rloo'
  | 'reinforce_plus_plus'
  | 'reinforce_plus_plus_baseline'
  | 'remax'
  | 'opo'
  | 'gpg'
  | 'gae'
  | 'optimal_token_baseline'
  | 'tir_optimal_token_baseline';

/** The advantage estimators {@link advantages} accepts, in the C enum's order. */
export const ADVANTAGE_ESTIMATORS: readonly AdvantageEstimator[] = [
  'grpo', 'grpo_passk', 'gdpo', 'rloo', 'reinforce_plus_plus', 'reinforce_plus_plus_baseline',
  'remax', 'opo', 'gpg', 'gae', 'optimal_token_baseline', 'tir_optimal_token_baseline',
];

export interface AdvantagesOptions {
  /** Which estimator. Default `'grpo'`. An option the estimator does not read is a TypeError. */
  estimator?: AdvantageEstimator;
  /**
   * Score of each sequence, `[B]` (`gdpo`: K components key-major, `[K * B]`, component k of
   * sequence i at `k * B + i`). Token-level estimators see it as a reward on the sequence's
   * last masked-in token. Give exactly one of `rewards` and `tokenRewards`.
   */
  rewards?: Float32Array;
  /**
   * Reward of each token, `[N]` (verl's `token_level_rewards`). A sequence's score is the sum
   * over all its tokens; token-level estimators drop rewards on masked-out tokens, as verl does.
   */
  tokenRewards?: Float32Array;
  /** Response mask, `[N]`: nonzero = an action token the policy produced. */
  mask: Uint8Array;
  /** Sequence boundaries, `[B + 1]`: starts at 0, never decreases, ends at N. */
  seqOffsets: Int32Array;
  /**
   * Group of each sequence, `[B]`: any int32 values in any order (verl's `index`, the prompt
   * uid). Group estimators need this or `groupSize`; a group may have one member.
   */
  groupIds?: Int32Array;
  /** Contiguous groups of this many sequences (divides B), instead of `groupIds`. */
  groupSize?: number;
  /** `grpo`, `grpo_passk`, `gdpo`: divide by the group's unbiased std. Default `true` (false = Dr.GRPO). */
  normAdvByStdInGrpo?: boolean;
  /**
   * Added to the std (`grpo`, `grpo_passk`, `gdpo`; default 1e-6) or to the baseline's
   * denominator (optimal-token baselines; default 1e-8). A finite number >= 0, or -1 for
   * the estimator's default (as in the C options).
   */
  epsilon?: number;
  /** `gdpo`: weight of each reward component, `[K]`. Default all 1. */
  rewardWeights?: Float32Array;
  /** `reinforce_plus_plus`, `gae`: discount in [0, 1]. Default 1. */
  gamma?: number;
  /** `gae`: lambda in [0, 1]. Default 1. */
  lam?: number;
  /** `gae`: the critic's value of each token, `[N]`. */
  values?: Float32Array;
  /** `remax`: reward of each sequence's greedy rollout, `[B]`. */
  rewardBaselines?: Float32Array;
  /** `gpg`: divisor of the advantages, a finite number > 0. Default 1. */
  fNorm?: number;
  /** Optimal-token baselines: log-prob of each sampled token under the rollout policy, `[N]`. */
  oldLogp?: Float32Array;
  /** Optimal-token baselines: Σ_v π_v² of each token's distribution, `[N]`. */
  sumPiSquared?: Float32Array;
  /** Optimal-token baselines: rollout importance weights ρ, `[N]`; the path variance is scaled by ρ². */
  rolloutIsWeights?: Float32Array;
  /**
   * Optimal-token baselines: a group's single longest member gets no baseline past the
   * second-longest length. Default `true`.
   */
  handleZeroTail?: boolean;
  /** Also return `returns`. Default `false`. */
  withReturns?: boolean;
  /** Arrays to write into instead of allocating, `[N]` each (`returns` with `withReturns`). */
  out?: { advantages?: Float32Array; returns?: Float32Array };
}

export interface AdvantagesResult {
  /** Advantage of each token, `[N]`; 0 on masked-out tokens. */
  advantages: Float32Array;
  /**
   * With `withReturns`: what verl returns beside the advantages, `[N]`: the advantages
   * (outcome estimators), the discounted returns (`reinforce_plus_plus`), the reward-to-go
   * on every token (`remax`, optimal-token baselines), advantages + values before whitening (`gae`).
   */
  returns?: Float32Array;
}

declare module '../native.js' {
  interface NativeAddon {
    advantages(options: AdvantagesOptions): AdvantagesResult;
    advantagesAsync(options: AdvantagesOptions): Promise<AdvantagesResult>;
  }
}

/**
 * Advantages of one of verl's estimators over the ragged layout, as verl computes them
 * (docs/math.md): group statistics in double, in input order within each group, whitening
 * over all masked-in tokens with verl's `masked_whiten` (unbiased variance + 1e-8). Results
 * are bitwise identical for any thread count, and on CUDA.
 *
 * Differences from verl, all on inputs verl refuses or positions no loss reads: masked-out
 * tokens get advantage 0; a `grpo_passk` group of one gets 0 (verl raises); a single
 * masked-in token is whitened with variance 0 (verl raises).
 *
 * @returns `{ advantages, returns? }` (`out`'s arrays when given).
 * @throws TypeError for a wrong argument type, an option the estimator does not read,
 *   or unless exactly one of `rewards` and `tokenRewards` is given; RangeError for a length
 *   or value out of range, or a missing input the estimator needs (e.g. `values` for `gae`).
 */
export function advantages(options: OnDevice<AdvantagesOptions>): OnDevice<AdvantagesResult>;
export function advantages(options: AdvantagesOptions): AdvantagesResult;
export function advantages(options: AdvantagesOptions | OnDevice<AdvantagesOptions>): AdvantagesResult | OnDevice<AdvantagesResult> {
  return native.advantages(options as AdvantagesOptions);
}

/**
 * {@link advantages} off the event loop (run at once, settling at the next microtask, when its
 * arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors. Arrays on
 * an ordinary ArrayBuffer are copied when the call is made; see "Async calls" in the README.
 */
export function advantagesAsync(options: OnDevice<AdvantagesOptions>): Promise<OnDevice<AdvantagesResult>>;
export function advantagesAsync(options: AdvantagesOptions): Promise<AdvantagesResult>;
export function advantagesAsync(
  options: AdvantagesOptions | OnDevice<AdvantagesOptions>,
): Promise<AdvantagesResult | OnDevice<AdvantagesResult>> {
  return native.advantagesAsync(options as AdvantagesOptions);
}
