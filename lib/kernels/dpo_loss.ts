import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

/** The DPO loss family (TRL's `loss_type`): see {@link dpoLoss}. */
export type DpoVariant = 'sigmoid' | 'hinge' | 'ipo' | 'robust';

export interface DpoLossOptions {
  /** Policy log-prob of each chosen completion, summed over its tokens (nats), `[P]`. */
  policyChosen: Float32Array;
  /** Policy log-prob of each rejected completion, summed over its tokens (nats), `[P]`. */
  policyRejected: Float32Array;
  /** Reference-model log-prob of each chosen completion (nats), `[P]`. */
  refChosen: Float32Array;
  /** Reference-model log-prob of each rejected completion (nats), `[P]`. */
  refRejected: Float32Array;
  /**
   * Inverse temperature of the implicit reward; a number > 0 in the float32 range
   * ([1.17549435e-38, 3.40282347e+38]: the per-pair math is f32). Default `0.1`.
   */
  beta?: number;
  /**
   * Probability that a preference label is flipped (cDPO), in [0, 0.5). Used by 'sigmoid'
   * and 'robust'; ignored by 'hinge' and 'ipo'. Default `0`.
   */
  labelSmoothing?: number;
  /**
   * 'sigmoid' (DPO; with labelSmoothing, cDPO), 'hinge' (SLiC), 'ipo' (IPO: pass per-token
   * average log-probs, e.g. from `sequenceLogprobs({ average: true })`), 'robust' (rDPO).
   * Default `'sigmoid'`.
   */
  variant?: DpoVariant;
  /** Arrays to write into instead of allocating, each `[P]`. */
  out?: {
    gradChosen?: Float32Array;
    gradRejected?: Float32Array;
    chosenRewards?: Float32Array;
    rejectedRewards?: Float32Array;
  };
}

export interface DpoLossResult {
  /** Mean loss over pairs (0 when P = 0). */
  loss: number;
  /** d loss / d policyChosen, `[P]` (already divided by P: the gradient of the mean). */
  gradChosen: Float32Array;
  /** d loss / d policyRejected, `[P]`. */
  gradRejected: Float32Array;
  /** Implicit reward beta * (policyChosen - refChosen), `[P]`. */
  chosenRewards: Float32Array;
  /** Implicit reward beta * (policyRejected - refRejected), `[P]`. */
  rejectedRewards: Float32Array;
  /** Fraction of pairs with chosenReward > rejectedReward (0 when P = 0). */
  rewardAccuracy: number;
}

declare module '../native.js' {
  interface NativeAddon {
    dpoLoss(options: DpoLossOptions): DpoLossResult;
    dpoLossAsync(options: DpoLossOptions): Promise<DpoLossResult>;
  }
}

/**
 * The DPO loss and its variants, fused with their gradients, as TRL computes them
 * (MATH.md). With delta = (policyChosen - refChosen) - (policyRejected - refRejected) and
 * ls = labelSmoothing, per pair:
 * - sigmoid: -(1 - ls) logsigmoid(beta delta) - ls logsigmoid(-beta delta)
 * - hinge: relu(1 - beta delta)
 * - ipo: (delta - 1 / (2 beta))^2, delta from whatever (average) log-probs are passed
 * - robust: (-(1 - ls) logsigmoid(beta delta) + ls logsigmoid(-beta delta)) / (1 - 2 ls)
 *
 * The loss is the mean over pairs. Per-pair math runs in f32, as in TRL (log-sigmoid with
 * polynomial exp/log1p, within a few f32 ulps); the per-pair losses are summed in double.
 * Interpretations: P = 0 gives loss 0 and accuracy 0 (not NaN); the hinge gradient at the
 * kink is 0 and, as PyTorch's relu, passes through for a NaN margin. NaN and Inf inputs
 * propagate as IEEE arithmetic (and PyTorch) has them: a NaN pair makes the loss NaN, a
 * NaN reward never counts as accurate.
 *
 * @throws TypeError for a wrong argument type; RangeError for mismatched lengths, beta not
 *   a positive normal float32, labelSmoothing outside [0, 0.5), an unknown variant.
 */
export function dpoLoss(options: OnDevice<DpoLossOptions>): OnDevice<DpoLossResult>;
export function dpoLoss(options: DpoLossOptions): DpoLossResult;
export function dpoLoss(options: DpoLossOptions | OnDevice<DpoLossOptions>): DpoLossResult | OnDevice<DpoLossResult> {
  return native.dpoLoss(options as DpoLossOptions);
}

/**
 * {@link dpoLoss} off the event loop (run at once, settling at the next microtask, when its
 * arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function dpoLossAsync(options: OnDevice<DpoLossOptions>): Promise<OnDevice<DpoLossResult>>;
export function dpoLossAsync(options: DpoLossOptions): Promise<DpoLossResult>;
export function dpoLossAsync(
  options: DpoLossOptions | OnDevice<DpoLossOptions>,
): Promise<DpoLossResult | OnDevice<DpoLossResult>> {
  return native.dpoLossAsync(options as DpoLossOptions);
}
