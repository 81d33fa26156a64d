/**
 * Independent float64 reference of dpoLoss (TRL's formulas, MATH.md), shared by the op
 * test, the fuzzer and `tirl bench`.
 */
import type { DpoVariant } from '../../lib/index.js';

export interface Pairs {
  policyChosen: ArrayLike<number>;
  policyRejected: ArrayLike<number>;
  refChosen: ArrayLike<number>;
  refRejected: ArrayLike<number>;
}

/** Independent float64 reference: TRL's dpo_loss, pair by pair, then the mean. */
export function referenceLoss(p: Pairs, beta: number, ls: number, variant: DpoVariant): number {
  const logSigmoid = (x: number) => Math.min(x, 0) - Math.log1p(Math.exp(-Math.abs(x)));
  const n = p.policyChosen.length;
  let total = 0;
  for (let i = 0; i < n; i++) {
    const delta = p.policyChosen[i] - p.refChosen[i] - (p.policyRejected[i] - p.refRejected[i]);
    const z = beta * delta;
    if (variant === 'sigmoid') total += -logSigmoid(z) * (1 - ls) - logSigmoid(-z) * ls;
    else if (variant === 'hinge') total += Math.max(0, 1 - z);
    else if (variant === 'ipo') total += (delta - 1 / (2 * beta)) ** 2;
    else total += (-logSigmoid(z) * (1 - ls) + logSigmoid(-z) * ls) / (1 - 2 * ls);
  }
  return n === 0 ? 0 : total / n;
}

/** Central finite differences of the reference loss with respect to one input array. */
export function finiteDifferenceGradient(p: Pairs, which: 'policyChosen' | 'policyRejected', beta: number, ls: number, variant: DpoVariant): Float64Array {
  const h = 1e-3;
  const values = Float64Array.from(p[which]);
  const grad = new Float64Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const x = values[i];
    values[i] = x + h;
    const up = referenceLoss({ ...p, [which]: values }, beta, ls, variant);
    values[i] = x - h;
    const down = referenceLoss({ ...p, [which]: values }, beta, ls, variant);
    values[i] = x;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

/** The implicit rewards beta * (policy - ref) per pair, and the fraction where chosen > rejected. */
export function referenceRewards(p: Pairs, beta: number): { chosen: Float64Array; rejected: Float64Array; accuracy: number } {
  const n = p.policyChosen.length;
  const chosen = new Float64Array(n);
  const rejected = new Float64Array(n);
  let correct = 0;
  for (let i = 0; i < n; i++) {
    chosen[i] = beta * (p.policyChosen[i] - p.refChosen[i]);
    rejected[i] = beta * (p.policyRejected[i] - p.refRejected[i]);
    correct += chosen[i] > rejected[i] ? 1 : 0;
  }
  return { chosen, rejected, accuracy: n === 0 ? 0 : correct / n };
}

// The fused form the benchmark times as its "TypeScript, 1 thread" peer: the same math written
// for speed (single passes, no allocation per call), checked against the reference above in
// the op test.

/**
 * DPO (sigmoid variant, with label smoothing) in plain TypeScript, single-threaded: one
 * pass computing the mean loss, its gradients, the implicit rewards and their accuracy,
 * with the stable log-sigmoid of MATH.md.
 */
export function dpoLossTs(
  policyChosen: Float32Array,
  policyRejected: Float32Array,
  refChosen: Float32Array,
  refRejected: Float32Array,
  beta: number,
  labelSmoothing: number,
  gradChosen: Float32Array,
  gradRejected: Float32Array,
  chosenRewards: Float32Array,
  rejectedRewards: Float32Array,
): { loss: number; rewardAccuracy: number } {
  const n = policyChosen.length;
  const scale = n > 0 ? 1 / n : 0;
  let lossSum = 0;
  let correct = 0;
  for (let i = 0; i < n; i++) {
    const chosen = beta * (policyChosen[i] - refChosen[i]);
    const rejected = beta * (policyRejected[i] - refRejected[i]);
    const z = chosen - rejected; // β·Δ
    const tail = Math.log1p(Math.exp(-Math.abs(z)));
    const logSigmoid = Math.min(z, 0) - tail;
    const logSigmoidNeg = Math.min(-z, 0) - tail;
    lossSum -= (1 - labelSmoothing) * logSigmoid + labelSmoothing * logSigmoidNeg;
    const sigmoid = Math.exp(logSigmoid);
    const dz = (-(1 - labelSmoothing) * (1 - sigmoid) + labelSmoothing * sigmoid) * beta * scale;
    gradChosen[i] = dz;
    gradRejected[i] = -dz;
    chosenRewards[i] = chosen;
    rejectedRewards[i] = rejected;
    if (chosen > rejected) correct++;
  }
  return { loss: lossSum * scale, rewardAccuracy: correct * scale };
}
