/**
 * Independent float64 reference of ppoLoss, straight from MATH.md, shared by the op test
 * and the fuzzer, and by `tirl bench`.
 */
import type { KlEstimator, PpoLossOptions } from '../../lib/index.js';

/** torch.clamp: NaN passes through. */
export const clamp = (x: number, lo: number, hi: number) => (x < lo ? lo : x > hi ? hi : x);

/** The value of a KL estimator (verl's kl_penalty_forward; a '+' form has its base's value). */
export function klEstimate(estimator: KlEstimator, x: number): number {
  switch (estimator) {
    case 'k1':
    case 'k1+':
      return x;
    case 'k2':
    case 'mse':
      return (x * x) / 2;
    case 'abs':
    case 'abs+':
      return Math.abs(x);
    case 'k3':
    case 'low_var_kl':
    case 'k3+':
    case 'low_var_kl+': {
      const xc = clamp(x, -20, 20);
      return clamp(Math.exp(-xc) + xc - 1, -10, 10);
    }
  }
}

export interface Reference {
  loss: number;
  pgLoss: number;
  klLoss: number;
  clipFraction: number;
  clipFractionLower: number;
  approxKl: number;
  nonFinite: number;
  maskedTokens: number;
  /** Σ |aggregated per-token terms|: the scale of the rounding error of a float sum. */
  magnitude: number;
}

/**
 * The loss of MATH.md in float64. `live` are the log-probs the loss is a function of;
 * `frozen` are the stop-gradient copies GSPO's sequence ratio is built from (the same
 * values, so that the value is s_i while d/dlogp_t goes through the token only).
 */
export function reference(o: PpoLossOptions, live: ArrayLike<number> = o.logp, frozen: ArrayLike<number> = o.logp): Reference {
  const n = o.logp.length;
  const offsets = o.seqOffsets ?? Int32Array.from([0, n]);
  const b = offsets.length - 1;
  const clipLow = o.clipLow ?? 0.2;
  const clipHigh = o.clipHigh ?? clipLow;
  const aggregation = o.aggregation ?? 'token-mean';
  const sequenceRatio = o.ratioLevel === 'sequence';
  const dualClip = sequenceRatio ? undefined : o.dualClip;
  const estimator = o.klEstimator ?? 'k3';
  const klCoef = o.klCoef ?? 0;
  const dp = o.dpSize ?? 1;

  const pgSums = new Float64Array(b);
  const klSums = new Float64Array(b);
  const absSums = new Float64Array(b);
  const counts = new Float64Array(b);
  let clipped = 0;
  let lower = 0;
  let negLogRatio = 0;
  let nonFinite = 0;
  let masked = 0;
  let longest = 0;
  for (let i = 0; i < b; i++) {
    longest = Math.max(longest, offsets[i + 1] - offsets[i]);
    let sequenceLogRatio = 0;
    for (let t = offsets[i]; t < offsets[i + 1]; t++) {
      if (o.mask[t]) {
        counts[i]++;
        sequenceLogRatio += frozen[t] - o.oldLogp[t];
      }
    }
    sequenceLogRatio /= Math.max(counts[i], 1);
    for (let t = offsets[i]; t < offsets[i + 1]; t++) {
      if (!o.mask[t]) continue;
      const a = o.advantages[t];
      const d = clamp(live[t] - o.oldLogp[t], -20, 20);
      let ratio: number;
      if (sequenceRatio) {
        const logRatio = sequenceLogRatio + live[t] - frozen[t];
        ratio = Math.exp(logRatio > 10 ? 10 : logRatio);
      } else {
        ratio = Math.exp(d);
      }
      const l1 = -a * ratio;
      const l2 = -a * clamp(ratio, 1 - clipLow, 1 + clipHigh);
      const lc = Math.max(l1, l2);
      const dualActive = dualClip !== undefined && a < 0;
      const l = dualActive ? Math.min(lc, -a * dualClip) : lc;
      const w = o.weights ? o.weights[t] : 1;
      pgSums[i] += w * l;
      absSums[i] += Math.abs(w * l);
      if (o.refLogp) {
        const k = klEstimate(estimator, live[t] - o.refLogp[t]);
        klSums[i] += k;
        absSums[i] += klCoef * Math.abs(k);
      }
      masked++;
      if (l2 > l1) clipped++;
      if (dualActive && lc > -a * dualClip) lower++;
      negLogRatio += -d;
      const inputs = [live[t], o.oldLogp[t], a];
      if (o.refLogp) inputs.push(o.refLogp[t]);
      if (o.weights) inputs.push(o.weights[t]);
      if (!inputs.every(Number.isFinite)) nonFinite++;
    }
  }
  const nonEmpty = counts.filter((c) => c > 0).length;
  const over = (sum: number, normaliser: number) => (normaliser > 0 ? (sum / normaliser) * dp : 0);
  const aggregate = (sums: Float64Array): number => {
    let total = 0;
    for (let i = 0; i < b; i++) {
      if (counts[i] === 0) continue;
      total += aggregation === 'seq-mean-token-mean' ? sums[i] / counts[i] : sums[i];
    }
    switch (aggregation) {
      case 'token-mean':
        return over(total, o.tokenNormalizer ?? masked);
      case 'token-sum':
        return total * dp;
      case 'seq-mean-token-sum':
      case 'seq-mean-token-mean':
        return over(total, o.seqNormalizer ?? nonEmpty);
      case 'seq-mean-token-sum-norm':
        return over(total, (o.seqNormalizer ?? nonEmpty) * (o.horizon ?? longest));
    }
  };
  const pgLoss = aggregate(pgSums);
  const klLoss = o.refLogp ? aggregate(klSums) : 0;
  const mean = (x: number) => (masked > 0 ? x / masked : 0);
  return {
    loss: pgLoss + klCoef * klLoss,
    pgLoss,
    klLoss,
    clipFraction: mean(clipped),
    clipFractionLower: mean(lower),
    approxKl: mean(negLogRatio),
    nonFinite,
    maskedTokens: masked,
    magnitude: Math.abs(aggregate(absSums)) + 1e-30,
  };
}

/**
 * dLoss/dlogp by central differences of the float64 reference. Tokens where the forward and
 * backward differences disagree sit on a kink (a clamp bound, the L1/L2 switch) and come
 * back as NaN: the derivative is one-sided there.
 */
export function finiteDifferenceGradient(o: PpoLossOptions, h = 1e-4): Float64Array {
  const frozen = Float64Array.from(o.logp);
  const live = Float64Array.from(o.logp);
  const f0 = reference(o, live, frozen).loss;
  const grad = new Float64Array(o.logp.length);
  for (let t = 0; t < live.length; t++) {
    live[t] = frozen[t] + h;
    const up = reference(o, live, frozen).loss;
    live[t] = frozen[t] - h;
    const down = reference(o, live, frozen).loss;
    live[t] = frozen[t];
    const forward = (up - f0) / h;
    const backward = (f0 - down) / h;
    const kink = Math.abs(forward - backward) > 1e-2 * Math.max(Math.abs(forward), Math.abs(backward)) + 1e-12;
    grad[t] = kink ? NaN : (up - down) / (2 * h);
  }
  return grad;
}

// The fused form the benchmark times as its "TypeScript, 1 thread" peer: the same math written
// for speed (single passes, no allocation per call), checked against the reference above in
// the op test.

/**
 * ppoLoss in plain TypeScript, single-threaded: the count of masked tokens (the token-mean
 * normalizer), then one fused pass computing the clipped surrogate (with dual clip), the
 * optional k3 KL term, the statistics and dLoss/dlogp. Same math as MATH.md; float64
 * arithmetic, as JavaScript numbers are.
 */
export interface PpoLossTsResult {
  loss: number;
  clipFraction: number;
  clipFractionLower: number;
  approxKl: number;
}

export function ppoLossTs(
  logp: Float32Array,
  oldLogp: Float32Array,
  advantages: Float32Array,
  mask: Uint8Array,
  refLogp: Float32Array | undefined,
  clipLow: number,
  clipHigh: number,
  dualClip: number, // 0 = off
  klCoef: number,
  grad: Float32Array,
): PpoLossTsResult {
  const n = logp.length;
  let count = 0;
  for (let i = 0; i < n; i++) count += mask[i];
  const scale = count > 0 ? 1 / count : 0;
  const low = 1 - clipLow;
  const high = 1 + clipHigh;
  let pgSum = 0;
  let klSum = 0;
  let clipped = 0;
  let clippedLower = 0;
  let negKlSum = 0;
  for (let i = 0; i < n; i++) {
    if (mask[i] === 0) {
      grad[i] = 0;
      continue;
    }
    const a = advantages[i];
    const raw = logp[i] - oldLogp[i];
    const d = raw < -20 ? -20 : raw > 20 ? 20 : raw;
    const r = Math.exp(d);
    const l1 = -a * r;
    const l2 = -a * (r < low ? low : r > high ? high : r);
    let loss: number;
    let g: number;
    if (l2 > l1) {
      clipped++;
      loss = l2;
      g = 0; // l2 exceeds l1 only where the ratio is clipped: no gradient
    } else {
      loss = l1;
      g = raw === d ? -a * r : 0;
    }
    if (dualClip > 0 && a < 0) {
      const l3 = -a * dualClip;
      if (loss > l3) {
        clippedLower++;
        loss = l3;
        g = 0;
      }
    }
    pgSum += loss;
    negKlSum -= d;
    if (refLogp !== undefined) {
      const x = logp[i] - refLogp[i];
      const xc = x < -20 ? -20 : x > 20 ? 20 : x;
      const e = Math.exp(-xc);
      const k = e + xc - 1; // >= 0, so only the upper clamp at 10 can act
      if (k > 10) {
        klSum += 10;
      } else {
        klSum += k;
        if (x === xc) g += klCoef * (1 - e);
      }
    }
    grad[i] = g * scale;
  }
  return {
    loss: (pgSum + klCoef * klSum) * scale,
    clipFraction: clipped * scale,
    clipFractionLower: clippedLower * scale,
    approxKl: negKlSum * scale,
  };
}
