import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';
import type { PreparedCall } from './prepared.js';

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
 * Estimator of KL(policy ‖ reference) per token, with x = logp - refLogp (verl's
 * `kl_penalty` names): `'k1'` = x, `'k2'` (= `'mse'`) = x²/2, `'abs'` = |x|, `'k3'`
 * (= `'low_var_kl'`) = e^(-x') + x' - 1 with x' = clamp(x, -20, 20), clamped to [-10, 10].
 * A `'+'` (`'k1+'`, `'k3+'`, `'low_var_kl+'`, `'abs+'`) is verl's straight-through form: the
 * value of the estimator, the gradient of k2 (x, unclamped). verl's `'full'` needs the whole
 * vocabulary's logits (verl itself raises NotImplementedError) and is not offered.
 */
export type KlEstimator =
  | 'k1'
  | 'k2'
  | 'k3'
  | 'abs'
  | 'low_var_kl'
  | 'mse'
  | 'k1+'
  | 'k3+'
  | 'low_var_kl+'
  | 'abs+';

/**
 * The policy loss, by verl's registry key (`actor.policy_loss.loss_mode`); formulas in
 * docs/math.md, "Policy losses". Each reads only its own options beyond the shared ones
 * (arrays, `aggregation`, normalisers, `dpSize`, the KL term); any other option is a TypeError.
 * - `'vanilla'`: PPO clip (`clipLow`, `clipHigh`, `dualClip`, `ratioLevel`, `weights`).
 * - `'gspo'`: vanilla with GSPO's sequence ratio (`clipLow`, `clipHigh`, `weights`);
 *   aggregation default `'seq-mean-token-mean'`, as verl forces.
 * - `'dppo_tv'`, `'dppo_kl'`: -A·sg(min(r, clipRatioC))·logp on tokens inside the binary
 *   TV / KL trust region of radius `clipLow` / `clipHigh` (`clipRatioC`, `weights`).
 * - `'sapo'`: -A·sigmoid(τ(r - 1))·4/τ, τ = `tauPos` for A > 0 else `tauNeg`; aggregation
 *   default `'seq-mean-token-mean'`, as verl forces.
 * - `'gpg'`: -logp·A. `'reinforce'`: -A·logp·w (the weights, detached).
 * - `'clip_cov'`: vanilla (unclamped ratio, no dual clip) with a random `clipCovRatio` share
 *   of the tokens whose covariance lies in (`clipCovLb`, `clipCovUb`) zeroed (`seed`).
 * - `'kl_cov'`: -A·r, plus `ppoKlCoef`·|logp - oldLogp| on the `klCovRatio` share of tokens
 *   with the largest covariance.
 * - `'geo_mean'`: GMPO, -Ā_i·exp(mean_t clipped log-ratio) per sequence, mean over sequences
 *   (`clipLow`, `clipHigh`, `weights`; `aggregation` shapes only the KL term).
 * - `'dro'`: -(logp·A - droBeta/2·(logp - oldLogp)²) (`droBeta`, required).
 * - `'cispo'`: -sg(clamp(r, 1 - clipLow, 1 + clipHigh))·A·logp.
 * - `'bypass_mode'`: `oldLogp` is the rollout engine's; `lossType` `'ppo_clip'` is vanilla,
 *   `'reinforce'` is REINFORCE with importance weights computed here (`rolloutIs`, ...).
 */
export type PolicyLoss =
  | 'vanilla'
  | 'gspo'
  | 'dppo_tv'
  | 'dppo_kl'
  | 'sapo'
  | 'gpg'
  | 'clip_cov'
  | 'kl_cov'
  | 'geo_mean'
  | 'dro'
  | 'cispo'
  | 'reinforce'
  | 'bypass_mode';

/** The policy losses {@link ppoLoss} accepts, in the C enum's order. */
export const POLICY_LOSSES: readonly PolicyLoss[] = [
  'vanilla', 'gspo', 'dppo_tv', 'dppo_kl', 'sapo', 'gpg', 'clip_cov', 'kl_cov', 'geo_mean', 'dro',
  'cispo', 'reinforce', 'bypass_mode',
];

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
  /** The policy loss; see {@link PolicyLoss}. Default `'vanilla'`. */
  policyLoss?: PolicyLoss;
  /** `'dppo_tv'`, `'dppo_kl'`: bound of the detached ratio (verl's clip_ratio_c), > 0. Default 3. */
  clipRatioC?: number;
  /** `'sapo'`: temperature of the gate for A > 0, > 0. Default 1. */
  tauPos?: number;
  /** `'sapo'`: temperature of the gate for A <= 0, > 0. Default 1.05. */
  tauNeg?: number;
  /** `'clip_cov'`: share of the masked tokens to zero, in (0, 1]; at least one token. Default 0.0002. */
  clipCovRatio?: number;
  /** `'clip_cov'`: a token is a candidate when its covariance is > this. Default 1. */
  clipCovLb?: number;
  /** `'clip_cov'`: ... and < this (> clipCovLb). Default 5. */
  clipCovUb?: number;
  /**
   * `'clip_cov'`: seed of the random pick, an integer in [0, 2^53). The candidates with the
   * smallest splitmix64(splitmix64(seed) xor tokenIndex) are zeroed: a uniform random subset,
   * the same for a seed and the data on any thread count (not PyTorch's randperm stream).
   * Default 0.
   */
  seed?: number;
  /** `'kl_cov'`: share of the masked tokens given the KL penalty, in (0, 1]; at least one token. Default 0.0002. */
  klCovRatio?: number;
  /** `'kl_cov'`: weight of the |log-ratio| penalty, >= 0. Default 0.1 (verl's config default). */
  ppoKlCoef?: number;
  /** `'dro'`: weight of the quadratic log-ratio penalty, > 0. Required by `'dro'`. */
  droBeta?: number;
  /** `'bypass_mode'`: `'ppo_clip'` (vanilla) or `'reinforce'`. Default `'ppo_clip'`. */
  lossType?: 'ppo_clip' | 'reinforce';
  /**
   * `'bypass_mode'` with `'reinforce'`: importance weights π/π_rollout, detached, at
   * `'token'` level, exp(clamp(logp - oldLogp, -20, 20)), or `'sequence'` level,
   * exp(clamp(Σ masked log-ratios, -20, 20)) (needs `seqOffsets`); `'none'` = plain
   * REINFORCE. Rejection masks are the rolloutCorrection op's: multiply them into `mask`.
   * Default `'none'`.
   */
  rolloutIs?: 'none' | 'token' | 'sequence';
  /** Upper bound of the weights, > 0: truncated to it (TIS), or the band's top (IcePop). Default 2. */
  rolloutIsThreshold?: number;
  /** IcePop: weights outside [rolloutIsThresholdLower, rolloutIsThreshold] become 0. Default: off (TIS). */
  rolloutIsThresholdLower?: number;
  /** Divide the weights by their masked mean (per token, or per sequence). Default false. */
  rolloutIsBatchNormalize?: boolean;
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
  /**
   * verl's pg_clipfrac. Vanilla, GSPO, bypass 'ppo_clip': fraction of masked-in tokens where
   * the clipped term is larger (L2 > L1). DPPO: outside the trust region. CISPO: ratio
   * clipped. clip_cov: tokens zeroed. geo_mean: log-ratio clipped with A > 0. Else 0.
   */
  clipFraction: number;
  /**
   * verl's pg_clipfrac_lower. Vanilla: where the dual clip is active (0 when it is off).
   * DPPO: inside the region with r > clipRatioC. geo_mean: clipped with A < 0. Else 0.
   */
  clipFractionLower: number;
  /**
   * verl's ppo_kl: masked mean of -(logp - oldLogp), clamped to [-20, 20] where the loss
   * clamps its ratio (vanilla, DPPO, SAPO, CISPO); kl_cov: of |logp - oldLogp|.
   */
  approxKl: number;
  /**
   * Masked-in tokens with a non-finite input (logp, oldLogp, advantages, and refLogp and
   * weights when given). When it is nonzero the loss is usually NaN: skip the step.
   */
  nonFinite: number;
  /** Masked-in tokens. */
  maskedTokens: number;
  /** `'clip_cov'`: tokens zeroed; `'kl_cov'`: tokens given the KL penalty. */
  selectedTokens?: number;
  /** `'bypass_mode'` with `rolloutIsBatchNormalize`: the mean the weights were divided by (1 if it was <= 1e-8). */
  rolloutIsBatchNormFactor?: number;
}

/** The arrays of a {@link ppoLoss} call: what a prepared call takes ({@link preparePpoLoss}). */
export type PpoLossArrays = Pick<PpoLossOptions, 'logp' | 'oldLogp' | 'advantages' | 'mask' | 'seqOffsets' | 'refLogp' | 'weights' | 'out'>;

/**
 * The arrays of a {@link ppoLoss} call as the arguments of a prepared call's `positional`
 * form ({@link preparePpoLoss}), in this order.
 */
export type PpoLossPositional = [
  logp: PpoLossOptions['logp'],
  oldLogp: PpoLossOptions['oldLogp'],
  advantages: PpoLossOptions['advantages'],
  mask: PpoLossOptions['mask'],
  refLogp?: PpoLossOptions['refLogp'],
  weights?: PpoLossOptions['weights'],
  seqOffsets?: PpoLossOptions['seqOffsets'],
  out?: PpoLossOptions['out'],
];

/** Every {@link ppoLoss} option that is not an array: what {@link preparePpoLoss} reads once. */
export type PpoLossSettings = Omit<PpoLossOptions, keyof PpoLossArrays>;

declare module '../native.js' {
  interface NativeAddon {
    ppoLoss(options: PpoLossOptions): PpoLossResult;
    ppoLossAsync(options: PpoLossOptions): Promise<PpoLossResult>;
    preparePpoLoss(settings: PpoLossSettings): PreparedCall<PpoLossArrays, PpoLossResult, PpoLossPositional>;
  }
}

/**
 * A policy loss over the masked tokens of a ragged batch, with its exact gradient: by
 * default the PPO clipped surrogate, else any of verl's policy losses by `policyLoss` (see
 * {@link PolicyLoss} and docs/math.md, "Policy losses"). The default, in one pass (verl's
 * `compute_policy_loss_vanilla` and `agg_loss`): ratio
 * r = exp(clamp(logp - oldLogp, -20, 20)), loss max(-A·r, -A·clamp(r, 1 - clipLow,
 * 1 + clipHigh)), optional dual clip, KL to a reference, per-token weights, GSPO's sequence
 * ratio, and the five aggregations. Where a clamp is active the gradient is 0; where the
 * unclipped and clipped terms tie, the unclipped one's gradient is taken (as
 * torch.maximum gives). A zero default normaliser (nothing masked in) gives loss 0 and
 * gradient 0. Statistics are means over all masked-in tokens.
 *
 * @throws TypeError for a wrong argument type, a missing required array (`seqOffsets`
 *   for the `seq-*` aggregations, GSPO, geo_mean and sequence-level IS weights, `refLogp`
 *   with `klCoef > 0`) or option (`droBeta` for `'dro'`), an option the chosen loss does not
 *   read or a misspelt one; RangeError for a length or value out of range.
 */
export function ppoLoss(options: OnDevice<PpoLossOptions>): OnDevice<PpoLossResult>;
export function ppoLoss(options: PpoLossOptions): PpoLossResult;
export function ppoLoss(options: PpoLossOptions | OnDevice<PpoLossOptions>): PpoLossResult | OnDevice<PpoLossResult> {
  return native.ppoLoss(options as PpoLossOptions);
}

/**
 * {@link ppoLoss} off the event loop (run at once, settling at the next microtask, when its
 * arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function ppoLossAsync(options: OnDevice<PpoLossOptions>): Promise<OnDevice<PpoLossResult>>;
export function ppoLossAsync(options: PpoLossOptions): Promise<PpoLossResult>;
export function ppoLossAsync(
  options: PpoLossOptions | OnDevice<PpoLossOptions>,
): Promise<PpoLossResult | OnDevice<PpoLossResult>> {
  return native.ppoLossAsync(options as PpoLossOptions);
}

/**
 * {@link ppoLoss} with its options read and checked once: returns a function that takes
 * only the arrays (`logp`, `oldLogp`, `advantages`, `mask`, and `seqOffsets`, `refLogp`,
 * `weights`, `out` where the options use them), with `.async` for the Promise form and
 * `.positional(logp, oldLogp, advantages, mask, refLogp?, weights?, seqOffsets?, out?)`
 * ({@link PpoLossPositional}) taking them as arguments, the cheapest form. For the same
 * options and arrays its results are bitwise those of `ppoLoss`; it saves the reading of
 * the ~40 option keys on every call, which on a small batch (a 1,024-token micro-batch)
 * costs about as much as the kernel.
 *
 * ```ts
 * const loss = preparePpoLoss({ clipLow: 0.2, clipHigh: 0.28, aggregation: 'token-mean' });
 * for (const batch of microBatches) {
 *   const { loss: value, grad } = loss({ logp: batch.logp, oldLogp: batch.oldLogp,
 *                                        advantages: batch.advantages, mask: batch.mask });
 *   // or, the same numbers: loss.positional(batch.logp, batch.oldLogp, batch.advantages, batch.mask)
 * }
 * ```
 *
 * @throws TypeError for an array among `settings` (it goes to the prepared call), a wrong
 *   option type, an option the chosen loss does not read or a misspelt one, as `ppoLoss`;
 *   the prepared call throws as `ppoLoss` for its arrays, a TypeError for any other key,
 *   and a RangeError for a value out of range (checked by the C call, on every call).
 */
export function preparePpoLoss(settings: PpoLossSettings = {}): PreparedCall<PpoLossArrays, PpoLossResult, PpoLossPositional> {
  return native.preparePpoLoss(settings);
}
