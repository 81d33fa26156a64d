import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

/**
 * Rejection criteria (verl's `rollout_rs` names). With d = clamp(logp - rolloutLogp, -20, 20)
 * per masked-in token: k1 = -d, k2 = d²/2, k3 = e^d - 1 - d.
 * - `token_k*`: each token is judged by its own value;
 * - `seq_sum_k*` / `seq_mean_k*` / `seq_max_k*`: a whole sequence is kept or rejected by the
 *   sum / mean / max of its tokens' values.
 *
 * k2 and k3 options keep a value <= their upper bound. k1 options take ratio bounds on
 * exp(k1) = π_rollout / π_trainer: keep log(lower) <= k1 <= log(upper) (verl's convention).
 */
export type RolloutRejectionOption =
  | 'token_k1'
  | 'token_k2'
  | 'token_k3'
  | 'seq_sum_k1'
  | 'seq_sum_k2'
  | 'seq_sum_k3'
  | 'seq_mean_k1'
  | 'seq_mean_k2'
  | 'seq_mean_k3'
  | 'seq_max_k2'
  | 'seq_max_k3';

export interface RolloutCorrectionOptions {
  /** Log-probs of the sampled tokens under the trainer, `[N]` (verl's `old_log_prob`). */
  logp: Float32Array;
  /** Log-probs the rollout engine (vLLM, SGLang) reported for the same tokens, `[N]`. */
  rolloutLogp: Float32Array;
  /** Loss mask, `[N]`: nonzero = trained on (verl's `response_mask`). Only these tokens count. */
  mask: Uint8Array;
  /** Sequence boundaries, `[B + 1]`: starts at 0, never decreases, ends at N (like `cu_seqlens`). */
  seqOffsets: Int32Array;
  /**
   * Level of the importance weights (verl's `rollout_is`): `'token'`, w_t = e^clamp(d_t, -20, 20)
   * (low variance, biased); `'sequence'`, every token of a sequence gets e^clamp(Σ_t d_t, -20, 20)
   * (unbiased, high variance); `'none'` (verl's null), weights are 1 on masked-in tokens and
   * only the rejection and the diagnostics apply. Default `'sequence'` (verl's
   * RolloutCorrectionConfig default).
   */
  rolloutIs?: 'none' | 'token' | 'sequence';
  /**
   * Upper bound of the weights, finite and > 0 (verl's `rollout_is_threshold`). Without
   * `rolloutIsThresholdLower` weights above it are truncated to it (TIS). Default 2.
   */
  rolloutIsThreshold?: number;
  /**
   * Lower bound, in (0, rolloutIsThreshold]: IcePop, weights outside
   * [rolloutIsThresholdLower, rolloutIsThreshold] are 0 instead of truncated (verl's
   * `rollout_is_threshold: "lower_upper"`). Default: absent (TIS).
   */
  rolloutIsThresholdLower?: number;
  /**
   * Divide the weights by their batch mean (verl's `rollout_is_batch_normalize`): the
   * masked mean of the token weights at token level, the mean sequence weight at sequence
   * level; left as they are when that mean is not above 1e-8. Default false.
   */
  rolloutIsBatchNormalize?: boolean;
  /**
   * Rejection criteria, chained: a token is kept only if every one keeps it (verl's
   * `rollout_rs`). An array of {@link RolloutRejectionOption}, or verl's comma-separated
   * string (e.g. `'token_k1,seq_mean_k3'`); each at most once. Default: none.
   */
  rolloutRs?: readonly RolloutRejectionOption[] | string;
  /**
   * Upper bound of each criterion (verl's `rollout_rs_threshold`), finite and > 0: one
   * number for all, or one per `rolloutRs` entry in its order. Required with `rolloutRs`.
   * For k1 criteria it is the ratio bound (in [1e-300, 1e300)); for k2 / k3 the bound on
   * the value itself.
   */
  rolloutRsThreshold?: number | readonly number[];
  /**
   * Lower ratio bounds of the k1 criteria (verl's `"lower_upper"` form), in
   * [1e-300, upper]: one number for every k1 criterion, or one per `rolloutRs` entry (0
   * for k2 / k3 entries, which take none). Default: 1 / upper.
   */
  rolloutRsThresholdLower?: number | readonly number[];
  /** Arrays to write into instead of allocating (`weights`: `[N]`; `mask`: `[N]`, may be the input mask). */
  out?: { weights?: Float32Array; mask?: Uint8Array };
}

/** One criterion's statistics (verl's `rollout_rs_<option>_<name>`). */
type RejectionStatName =
  | 'mean'
  | 'max'
  | 'min'
  | 'std'
  | 'fraction_high'
  | 'fraction_low'
  | 'seq_mean'
  | 'seq_std'
  | 'seq_max'
  | 'seq_min'
  | 'seq_max_deviation'
  | 'seq_fraction_high'
  | 'seq_fraction_low'
  | 'masked_fraction'
  | 'seq_masked_fraction';

/** The statistics of importance weights, of the whole rejection and off-policy diagnostics (see {@link RolloutCorrectionStats}). */
export interface RolloutCorrectionSummaryStats {
  /** Masked mean of the applied weights, before batch normalisation (with `rolloutIs`). */
  rollout_is_mean?: number;
  /** Token level: the largest applied weight; sequence level: e^min(max_i Σ d, 20). */
  rollout_is_max?: number;
  /** Token level: the smallest applied weight; sequence level: e^(min_i Σ d) (unclamped). */
  rollout_is_min?: number;
  /** √(E[c²] - E[c]²) over masked tokens with c = clamp(w, 0, rolloutIsThreshold); 0 for one token. */
  rollout_is_std?: number;
  /** verl's normalised effective sample size, 1 / E[(c / (E[c] + 1e-8))²] in (0, 1]; 0 when every weight is 0. */
  rollout_is_eff_sample_size?: number;
  /** Token level: share of tokens whose raw weight is > upper; sequence level: share of sequences with Σ d > log upper. */
  rollout_is_ratio_fraction_high?: number;
  /** The same below the lower bound (1 / upper for TIS). */
  rollout_is_ratio_fraction_low?: number;
  /** Mean over sequences of their mean applied weight. */
  rollout_is_seq_mean?: number;
  /** Unbiased std over sequences of their mean applied weight (0 for one sequence). */
  rollout_is_seq_std?: number;
  /** Largest sequence mean weight. */
  rollout_is_seq_max?: number;
  /** Smallest sequence mean weight. */
  rollout_is_seq_min?: number;
  /** max over sequences of |mean weight - 1|. */
  rollout_is_seq_max_deviation?: number;
  /** Share of sequences whose mean raw (untruncated) weight is > upper. */
  rollout_is_seq_fraction_high?: number;
  /** Share of sequences whose mean raw weight is < lower (1 / upper for TIS). */
  rollout_is_seq_fraction_low?: number;
  /** With `rolloutIsBatchNormalize`: the divisor applied (1 when the mean was not above 1e-8). */
  rollout_is_batch_norm_factor?: number;
  /** IcePop only: share of masked tokens whose raw weight lies outside the band. */
  rollout_is_oob_ratio?: number;
  /** With `rolloutRs`: share of masked-in tokens rejected by any criterion. */
  rollout_rs_masked_fraction?: number;
  /** With `rolloutRs`: share of sequences with at least one rejected token. */
  rollout_rs_seq_masked_fraction?: number;
  /** Mean over sequences of e^(-mean logp): the trainer's perplexity. */
  training_ppl: number;
  /** Mean over sequences of -mean logp. */
  training_log_ppl: number;
  /** Masked mean of rolloutLogp - logp: the direct estimate of KL(π_rollout ‖ π_trainer). */
  kl: number;
  /** Masked mean of e^d - d - 1 with d = logp - rolloutLogp unclamped (verl's k3 estimate). */
  k3_kl: number;
  /** Mean over sequences of e^(-mean rolloutLogp). */
  rollout_ppl: number;
  /** Mean over sequences of -mean rolloutLogp. */
  rollout_log_ppl: number;
  /** Mean over sequences of (mean rolloutLogp - mean logp) = log(training ppl / rollout ppl). */
  log_ppl_diff: number;
  /** Mean over sequences of its absolute value. */
  log_ppl_abs_diff: number;
  /** Its largest value over sequences. */
  log_ppl_diff_max: number;
  /** Its smallest value over sequences. */
  log_ppl_diff_min: number;
  /** Mean over sequences of e^log_ppl_diff (training ppl / rollout ppl per sequence). */
  ppl_ratio: number;
  /** Token χ²: masked mean of e^(2 clamp(d, -20, 20)) - 1 (E[ρ²] - 1). */
  chi2_token: number;
  /** Sequence χ²: mean over sequences of e^(2 clamp(Σ d, -20, 20)) - 1. */
  chi2_seq: number;
}

/**
 * The diagnostics, named as verl logs them (without its `rollout_corr/` prefix). Means over
 * "sequences" are over the sequences with at least one masked-in token (verl averages over
 * every row, which is the same when none is empty). With no masked-in token every
 * statistic is 0 (verl raises). NaN or Inf inputs propagate into the statistics.
 *
 * Per rejection criterion `<o>` (only those in `rolloutRs`), with its statistic x (a
 * sequence criterion's x is its sequence value at each of its tokens) and bounds in the
 * statistic's units (log of the ratio bounds for k1; lower 0 for k2 / k3):
 * - `rollout_rs_<o>_mean`: masked mean of x;
 * - `rollout_rs_<o>_max` / `_min`: over masked tokens (token criteria) or sequences;
 * - `rollout_rs_<o>_std`: √(E[c²] - E[c]²) with c = x clamped to the bounds;
 * - `rollout_rs_<o>_fraction_high` / `_fraction_low`: share of tokens (token criteria) or
 *   sequences above the upper / below the lower bound (`_low` is 0 but for k1);
 * - `rollout_rs_<o>_seq_mean` / `_seq_std` (unbiased; 0 for one sequence) / `_seq_max` /
 *   `_seq_min`: over sequences of the sequence value (the masked mean for token criteria);
 * - `rollout_rs_<o>_seq_max_deviation`: max |sequence value| (the ideal is 0);
 * - `rollout_rs_<o>_seq_fraction_high` / `_seq_fraction_low` (k1 only): share of sequences
 *   whose value is above / below the bounds;
 * - `rollout_rs_<o>_masked_fraction`: share of masked-in tokens it rejects;
 * - `rollout_rs_<o>_seq_masked_fraction`: share of sequences with a token it rejects.
 */
export type RolloutCorrectionStats = RolloutCorrectionSummaryStats & {
  [K in `rollout_rs_${RolloutRejectionOption}_${RejectionStatName}`]?: number;
};

export interface RolloutCorrectionResult {
  /**
   * Importance weights, `[N]`, 0 where masked out (verl's `rollout_is_weights`). Pass them
   * to `ppoLoss({ weights })`: they scale each token's loss and carry no gradient.
   */
  weights: Float32Array;
  /**
   * The mask with rejected tokens cleared, `[N]` (verl's modified `response_mask`):
   * mask × keep, so multiplying any loss mask by it removes the rejected tokens.
   */
  mask: Uint8Array;
  /** verl's diagnostics; see {@link RolloutCorrectionStats}. */
  stats: RolloutCorrectionStats;
  /** Masked-in tokens. */
  maskedTokens: number;
  /** Sequences with at least one masked-in token. */
  validSeqs: number;
  /** Masked-in tokens whose logp or rolloutLogp is NaN or infinite. */
  nonFinite: number;
}

declare module '../native.js' {
  interface NativeAddon {
    rolloutCorrection(options: RolloutCorrectionOptions): RolloutCorrectionResult;
    rolloutCorrection(options: OnDevice<RolloutCorrectionOptions>): OnDevice<RolloutCorrectionResult>;
    rolloutCorrectionAsync(options: RolloutCorrectionOptions): Promise<RolloutCorrectionResult>;
    rolloutCorrectionAsync(
      options: OnDevice<RolloutCorrectionOptions>,
    ): Promise<OnDevice<RolloutCorrectionResult>>;
  }
}

/**
 * Rollout correction: the engine that sampled (vLLM, SGLang) computes log-probs with other
 * kernels and precision than the trainer, so "on-policy" data is slightly off-policy.
 * From d = logp - rolloutLogp this returns importance weights (token or sequence level,
 * truncated or IcePop-banded, optionally batch-normalised), the mask with rejected tokens
 * removed, and verl's off-policy diagnostics, following verl's `rollout_corr_helper.py`
 * (formulas in docs/math.md). Given device arrays (`cuda.DeviceArray`, all on one GPU) it
 * runs there and returns device arrays.
 *
 * ```ts
 * const rc = rolloutCorrection({ logp: oldLogp, rolloutLogp, mask, seqOffsets,
 *                                rolloutIs: 'token', rolloutRs: ['seq_mean_k3'], rolloutRsThreshold: 0.01 });
 * ppoLoss({ logp, oldLogp, advantages, mask: rc.mask, weights: rc.weights });
 * ```
 *
 * @throws TypeError for a wrong argument type, an unknown option, or an option the others
 *   leave unread (a `rolloutIs*` bound with `rolloutIs: 'none'`, `rolloutRsThreshold*`
 *   without `rolloutRs`, `rolloutRsThresholdLower` without a k1 criterion); RangeError for a
 *   length or value out of range (e.g. a threshold <= 0, an unknown or repeated criterion,
 *   seqOffsets not ending at `logp.length`).
 */
export function rolloutCorrection(options: OnDevice<RolloutCorrectionOptions>): OnDevice<RolloutCorrectionResult>;
export function rolloutCorrection(options: RolloutCorrectionOptions): RolloutCorrectionResult;
export function rolloutCorrection(
  options: RolloutCorrectionOptions | OnDevice<RolloutCorrectionOptions>,
): RolloutCorrectionResult | OnDevice<RolloutCorrectionResult> {
  return native.rolloutCorrection(options as RolloutCorrectionOptions);
}

/**
 * {@link rolloutCorrection} off the event loop (run at once, settling at the next microtask,
 * when its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * Arrays on an ordinary ArrayBuffer are copied when the call is made, and a given `out`
 * receives the result when the Promise settles; SharedArrayBuffers and DeviceArrays are used in
 * place (see "Async calls" in the README).
 */
export function rolloutCorrectionAsync(
  options: OnDevice<RolloutCorrectionOptions>,
): Promise<OnDevice<RolloutCorrectionResult>>;
export function rolloutCorrectionAsync(options: RolloutCorrectionOptions): Promise<RolloutCorrectionResult>;
export function rolloutCorrectionAsync(
  options: RolloutCorrectionOptions | OnDevice<RolloutCorrectionOptions>,
): Promise<RolloutCorrectionResult | OnDevice<RolloutCorrectionResult>> {
  return native.rolloutCorrectionAsync(options as RolloutCorrectionOptions);
}
