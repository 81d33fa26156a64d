import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

/**
 * How per-token losses become one number (MATH.md). With S_i the masked sum of sequence i,
 * n_i its masked tokens and D = `dpSize`; sequences with no masked token are excluded:
 * - `'token-mean'`: Σ S_i / tokenNormalizer · D
 * - `'token-sum'`: Σ S_i · D
 * - `'seq-mean-token-sum'`: Σ S_i / seqNormalizer · D
 * - `'seq-mean-token-mean'`: Σ (S_i / n_i) / seqNormalizer · D
 * - `'seq-mean-token-sum-norm'`: seq-mean-token-sum / horizon (Dr.GRPO)
 */
export type PpoAggregation =
  | 'token-mean'
  | 'token-sum'
  | 'seq-mean-token-sum'
  | 'seq-mean-token-mean'
  | 'seq-mean-token-sum-norm';

/**
 * Estimator of KL(policy ‖ reference) per token, with x = logp - refLogp: `'k1'` = x,
 * `'k2'` = x²/2, `'abs'` = |x|, `'k3'` = e^(-x') + x' - 1 with x' = clamp(x, -20, 20),
 * clamped to [-10, 10] (verl's low_var_kl).
 */
export type KlEstimator = 'k1' | 'k2' | 'k3' | 'abs';

export interface PpoLossOptions {
  /** Log-probs of the sampled tokens under the current policy, `[N]`: the gradient is taken with respect to these. */
  logp: Float32Array;
  /** Log-probs under the behaviour (old) policy that sampled them, `[N]`. */
  oldLogp: Float32Array;
  /** Advantage of each token, `[N]` (e.g. a sequence's group advantage broadcast to its tokens). */
  advantages: Float32Array;
  /**
   * Loss mask, `[N]`: nonzero = trained on. Masked-out tokens contribute nothing and get
   * gradient 0, even where their inputs are NaN or Inf (unlike PyTorch's `loss * mask`).
   */
  mask: Uint8Array;
  /**
   * Sequence boundaries, `[B + 1]`: starts at 0, never decreases, ends at N (like
   * `cu_seqlens`). Required by the `seq-*` aggregations and by `ratioLevel: 'sequence'`;
   * ignored otherwise.
   */
  seqOffsets?: Int32Array;
  /** The ratio is clipped below at `1 - clipLow`; in [0, 1). Default 0.2. */
  clipLow?: number;
  /** The ratio is clipped above at `1 + clipHigh` (DAPO's clip-higher); >= 0. Default: `clipLow`. */
  clipHigh?: number;
  /**
   * Dual-clip constant c > 1: for A < 0 the loss is at most -A·c (its gradient 0 there).
   * Default: off. Ignored with `ratioLevel: 'sequence'`, as in verl's GSPO.
   */
  dualClip?: number;
  /** How token losses are combined; see {@link PpoAggregation}. Default `'token-mean'`. */
  aggregation?: PpoAggregation;
  /**
   * Divisor of `'token-mean'`, > 0: the masked token count of the global batch in
   * data-parallel training. Default: this call's masked token count. Normalizers must
   * keep the f32 loss scale `dpSize / normalizer` finite (normalizer >= dpSize / 3.4e38).
   */
  tokenNormalizer?: number;
  /**
   * Divisor of the `seq-*` aggregations, > 0: the global number of sequences. Default: the
   * sequences of this call with at least one masked-in token. Pass 1 with
   * `'seq-mean-token-sum-norm'` to match verl, which divides by the horizon only.
   */
  seqNormalizer?: number;
  /**
   * Divisor of `'seq-mean-token-sum-norm'` in tokens, > 0. Default: the longest sequence,
   * `max(seqOffsets[i + 1] - seqOffsets[i])`, counting all its tokens (masked or not);
   * pass the padded response length to match padded trainers.
   */
  horizon?: number;
  /** Data-parallel size D that multiplies the loss (verl's dp_size), > 0 and at most 3.4e38. Default 1. */
  dpSize?: number;
  /** Reference-policy log-probs, `[N]`: adds the KL term and returns `klLoss`. */
  refLogp?: Float32Array;
  /** Weight of the KL term, >= 0 (> 0 requires `refLogp`). Default 0. */
  klCoef?: number;
  /** KL estimator; see {@link KlEstimator}. Default `'k3'`. */
  klEstimator?: KlEstimator;
  /**
   * Per-token loss weights, `[N]`, e.g. truncated importance weights for rollout
   * correction: they multiply the policy-gradient term (not the KL term) before
   * aggregation, and no gradient flows into them. Default: all 1.
   */
  weights?: Float32Array;
  /**
   * `'token'`: each token's own ratio. `'sequence'`: GSPO's sequence ratio
   * exp(min(mean masked log-ratio of the sequence, 10)), with the gradient of each token
   * through its own log-prob only (needs `seqOffsets`; verl uses it with
   * `'seq-mean-token-mean'`). Default `'token'`.
   */
  ratioLevel?: 'token' | 'sequence';
  /** Array to write the gradient into instead of allocating (`grad`: `[N]`). */
  out?: { grad?: Float32Array };
}

export interface PpoLossResult {
  /** `pgLoss + klCoef · klLoss`. */
  loss: number;
  /** The aggregated clipped surrogate (weighted by `weights`). */
  pgLoss: number;
  /** The aggregated KL estimate, without `klCoef`; present only when `refLogp` is given. */
  klLoss?: number;
  /** dLoss/dlogp, `[N]`; 0 on masked-out tokens. */
  grad: Float32Array;
  /** Fraction of masked-in tokens where the clipped term is larger (L2 > L1). */
  clipFraction: number;
  /** Fraction of masked-in tokens where the dual clip is active (0 when it is off). */
  clipFractionLower: number;
  /** Masked mean of -clamp(logp - oldLogp, -20, 20) over masked-in tokens. */
  approxKl: number;
  /**
   * Masked-in tokens with a non-finite input (logp, oldLogp, advantages, and refLogp and
   * weights when given). When it is nonzero the loss is usually NaN: skip the step.
   */
  nonFinite: number;
  /** Masked-in tokens. */
  maskedTokens: number;
}

declare module '../native.js' {
  interface NativeAddon {
    ppoLoss(options: PpoLossOptions): PpoLossResult;
    ppoLossAsync(options: PpoLossOptions): Promise<PpoLossResult>;
  }
}

/**
 * The PPO clipped surrogate over the masked tokens of a ragged batch, with its exact
 * gradient, in one pass (verl's `compute_policy_loss` and `agg_loss`): ratio
 * r = exp(clamp(logp - oldLogp, -20, 20)), loss max(-A·r, -A·clamp(r, 1 - clipLow,
 * 1 + clipHigh)), optional dual clip, KL to a reference, per-token weights, GSPO's sequence
 * ratio, and the five aggregations. Where a clamp is active the gradient is 0; where the
 * unclipped and clipped terms tie, the unclipped one's gradient is taken (as
 * torch.maximum gives). A zero default normaliser (nothing masked in) gives loss 0 and
 * gradient 0. Statistics are means over all masked-in tokens.
 *
 * @throws TypeError for a wrong argument type or a missing required array (`seqOffsets`
 *   for the `seq-*` aggregations and GSPO, `refLogp` with `klCoef > 0`); RangeError for a
 *   length or value out of range.
 */
export function ppoLoss(options: OnDevice<PpoLossOptions>): OnDevice<PpoLossResult>;
export function ppoLoss(options: PpoLossOptions): PpoLossResult;
export function ppoLoss(options: PpoLossOptions | OnDevice<PpoLossOptions>): PpoLossResult | OnDevice<PpoLossResult> {
  return native.ppoLoss(options as PpoLossOptions);
}

/**
 * {@link ppoLoss} off the event loop. Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export async function ppoLossAsync(options: OnDevice<PpoLossOptions>): Promise<OnDevice<PpoLossResult>>;
export async function ppoLossAsync(options: PpoLossOptions): Promise<PpoLossResult>;
export async function ppoLossAsync(
  options: PpoLossOptions | OnDevice<PpoLossOptions>,
): Promise<PpoLossResult | OnDevice<PpoLossResult>> {
  return native.ppoLossAsync(options as PpoLossOptions);
}
