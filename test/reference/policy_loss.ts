/**
 * Independent float64 reference of ppoLoss's policy losses (docs/math.md, "Policy losses"),
 * written from verl's verl/trainer/ppo/core_algos.py at commit
 * 1dda039b9c6311889a9c9a26040677e1254814f9 (and rollout_corr_helper.py for bypass_mode's
 * weights), shared by the op test, the fuzzer and the benchmark.
 *
 * `live` are the log-probs the loss is a function of, `o.logp` the detached copies that
 * verl's stop-gradients (and the token picks) see: finite differences of the reference in
 * `live` are then the gradient autograd gives.
 */
import type { KlEstimator, PpoLossOptions } from '../../lib/index.js';
import { clamp, klEstimate, reference as ppoReference } from './ppo_loss.js';

export interface PolicyReference {
  loss: number;
  pgLoss: number;
  klLoss: number;
  clipFraction: number;
  clipFractionLower: number;
  approxKl: number;
  nonFinite: number;
  maskedTokens: number;
  selectedTokens: number;
  rolloutIsBatchNormFactor: number;
  /** Σ |aggregated per-token terms|: the scale of the rounding error of a float sum. */
  magnitude: number;
}

const f32 = Math.fround;
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

// splitmix64 on BigInt, the pick key of docs/math.md.
const MASK64 = (1n << 64n) - 1n;
function splitmix64(x: bigint): bigint {
  x = (x + 0x9e3779b97f4a7c15n) & MASK64;
  x = ((x ^ (x >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  x = ((x ^ (x >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return x ^ (x >> 31n);
}

/** The masked means of A and logp, rounded to f32 as the batch means verl computes in f32. */
function maskedMeans(o: PpoLossOptions): { a: number; l: number; n: number } {
  let a = 0;
  let l = 0;
  let n = 0;
  for (let t = 0; t < o.logp.length; t++) {
    if (!o.mask[t]) continue;
    a += o.advantages[t];
    l += o.logp[t];
    n++;
  }
  return { a: f32(a / Math.max(n, 1)), l: f32(l / Math.max(n, 1)), n };
}

/** (A - mean A)(logp - mean logp) in f32, as the kernel (and verl, in f32) evaluate it. */
function covariance(o: PpoLossOptions, t: number, m: { a: number; l: number }): number {
  return f32(f32(o.advantages[t] - m.a) * f32(o.logp[t] - m.l));
}

/** Clip-Cov's pick: the tokens whose loss is zeroed. */
export function clipCovPick(o: PpoLossOptions): Set<number> {
  const m = maskedMeans(o);
  const lb = o.clipCovLb ?? 1;
  const ub = o.clipCovUb ?? 5;
  const clipLow = o.clipLow ?? 0.2;
  const clipHigh = o.clipHigh ?? clipLow;
  const candidates: number[] = [];
  for (let t = 0; t < o.logp.length; t++) {
    if (!o.mask[t]) continue;
    const a = o.advantages[t];
    const r = f32(Math.exp(f32(o.logp[t] - o.oldLogp[t])));
    const l1 = f32(-a * r);
    const l2 = f32(-a * clamp(r, f32(1 - clipLow), f32(1 + clipHigh)));
    const cov = covariance(o, t, m);
    if (!(l2 > l1) && cov < ub && cov > lb) candidates.push(t);
  }
  const wanted = Math.max(Math.floor((o.clipCovRatio ?? 0.0002) * m.n), 1);
  const seedKey = splitmix64(BigInt(o.seed ?? 0));
  const keyed = candidates.map((t) => ({ t, key: splitmix64(seedKey ^ BigInt(t)) }));
  keyed.sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  return new Set(keyed.slice(0, wanted).map((k) => k.t));
}

/** KL-Cov's pick: the tokens given the |log-ratio| penalty (largest covariance; NaN first; ties by index). */
export function klCovPick(o: PpoLossOptions): Set<number> {
  const m = maskedMeans(o);
  if (m.n === 0) return new Set();
  const valid: { t: number; cov: number }[] = [];
  for (let t = 0; t < o.logp.length; t++) if (o.mask[t]) valid.push({ t, cov: covariance(o, t, m) });
  valid.sort((x, y) => {
    const xn = Number.isNaN(x.cov);
    const yn = Number.isNaN(y.cov);
    if (xn !== yn) return xn ? -1 : 1;
    if (!xn && x.cov !== y.cov) return y.cov - x.cov;
    return x.t - y.t;
  });
  const wanted = Math.max(Math.floor(m.n * (o.klCovRatio ?? 0.0002)), 1);
  return new Set(valid.slice(0, wanted).map((v) => v.t));
}

/** bypass_mode's importance weights (rollout_corr_helper.compute_rollout_correction_weights). */
export function bypassWeights(o: PpoLossOptions): { weights: Float64Array; factor: number } {
  const n = o.logp.length;
  const offsets = o.seqOffsets ?? Int32Array.from([0, n]);
  const upper = o.rolloutIsThreshold ?? 2;
  const lower = o.rolloutIsThresholdLower;
  const w = new Float64Array(n);
  const truncate = (x: number) => {
    const raw = Math.exp(clamp(x, -20, 20));
    if (lower === undefined) return Math.min(raw, upper);
    return raw >= lower && raw <= upper ? raw : 0;
  };
  if (o.rolloutIs === 'sequence') {
    for (let i = 0; i + 1 < offsets.length; i++) {
      let sum = 0;
      for (let t = offsets[i]; t < offsets[i + 1]; t++) if (o.mask[t]) sum += o.logp[t] - o.oldLogp[t];
      for (let t = offsets[i]; t < offsets[i + 1]; t++) w[t] = o.mask[t] ? truncate(sum) : 0;
    }
  } else {
    for (let t = 0; t < n; t++) w[t] = o.mask[t] ? truncate(o.logp[t] - o.oldLogp[t]) : 0;
  }
  let factor = 1;
  if (o.rolloutIsBatchNormalize) {
    let sum = 0;
    let count = 0;
    if (o.rolloutIs === 'sequence') {
      for (let i = 0; i + 1 < offsets.length; i++) {
        for (let t = offsets[i]; t < offsets[i + 1]; t++) {
          if (o.mask[t]) {
            sum += w[t];
            count++;
            break;
          }
        }
      }
    } else {
      for (let t = 0; t < n; t++) {
        if (o.mask[t]) {
          sum += w[t];
          count++;
        }
      }
    }
    const mean = count > 0 ? sum / count : 0;
    if (mean > 1e-8) {
      for (let t = 0; t < n; t++) w[t] /= mean;
      factor = mean;
    }
  }
  return { weights: w, factor };
}

/** The KL term at a token as a function of the live log-prob ('+': straight-through k2). */
function klTerm(estimator: KlEstimator, live: number, frozen: number, ref: number): number {
  if (estimator.endsWith('+')) {
    const k2 = (x: number) => (x * x) / 2;
    return k2(live - ref) - k2(frozen - ref) + klEstimate(estimator, frozen - ref);
  }
  return klEstimate(estimator, live - ref);
}

interface TokenValue {
  loss: number;
  clipped: boolean;
  lower: boolean;
  klStat: number;
}

/**
 * The loss of one token of a token-level policy loss, before its weight. `lp` is live,
 * `lpd` the detached value.
 */
function tokenLoss(o: PpoLossOptions, lp: number, lpd: number, olp: number, a: number, selected: boolean): TokenValue {
  const clipLow = o.clipLow ?? 0.2;
  const clipHigh = o.clipHigh ?? clipLow;
  const dLive = clamp(lp - olp, -20, 20);
  const dFrozen = clamp(lpd - olp, -20, 20);
  switch (o.policyLoss) {
    case 'dppo_tv':
    case 'dppo_kl': {
      const c = o.clipRatioC ?? 3;
      const r = Math.exp(dFrozen);
      const truncated = Math.min(r, c);
      const p = Math.exp(lpd);
      const op = Math.exp(olp);
      let valid: boolean;
      if (o.policyLoss === 'dppo_tv') {
        valid = a > 0 ? p - op <= clipHigh : p - op >= -clipLow;
      } else {
        const kl = op * (olp - lpd) + (1 - op) * Math.log((1 - op + 1e-8) / (1 - p + 1e-8));
        valid = a > 0 ? kl <= clipHigh || p <= op : kl <= clipLow || p >= op;
      }
      return { loss: -a * truncated * lp * (valid ? 1 : 0), clipped: !valid, lower: r > c && valid, klStat: -dFrozen };
    }
    case 'sapo': {
      const tau = a > 0 ? (o.tauPos ?? 1) : (o.tauNeg ?? 1.05);
      const r = Math.exp(dLive);
      return { loss: -sigmoid(tau * (r - 1)) * (4 / tau) * a, clipped: false, lower: false, klStat: -dFrozen };
    }
    case 'gpg':
    case 'reinforce':
    case 'bypass_mode':
      return { loss: -a * lp, clipped: false, lower: false, klStat: -(lpd - olp) };
    case 'cispo': {
      const r = Math.exp(dFrozen);
      const cr = clamp(r, 1 - clipLow, 1 + clipHigh);
      return { loss: -cr * a * lp, clipped: r !== cr, lower: false, klStat: -dFrozen };
    }
    case 'dro': {
      const beta = o.droBeta!;
      return { loss: -(lp * a - 0.5 * beta * (lp - olp) ** 2), clipped: false, lower: false, klStat: -(lpd - olp) };
    }
    case 'clip_cov': {
      const r = Math.exp(lp - olp);
      const l1 = -a * r;
      const l2 = -a * clamp(r, 1 - clipLow, 1 + clipHigh);
      // verl multiplies by corr: a NaN stays NaN on a picked token.
      return { loss: Math.max(l1, l2) * (selected ? 0 : 1), clipped: selected, lower: false, klStat: -(lpd - olp) };
    }
    case 'kl_cov': {
      const r = Math.exp(lp - olp);
      const penalty = selected ? (o.ppoKlCoef ?? 0.1) * Math.abs(lp - olp) : 0;
      return { loss: -a * r + penalty, clipped: false, lower: false, klStat: Math.abs(lpd - olp) };
    }
    default:
      throw new Error(`not a token loss: ${o.policyLoss}`);
  }
}

/** The loss of docs/math.md in float64, for every policy loss. */
export function policyReference(o: PpoLossOptions, live: ArrayLike<number> = o.logp): PolicyReference {
  const loss = o.policyLoss ?? 'vanilla';
  const bypassPpo = loss === 'bypass_mode' && (o.lossType ?? 'ppo_clip') === 'ppo_clip';
  if (loss === 'vanilla' || loss === 'gspo' || bypassPpo) {
    const ppo: PpoLossOptions = {
      ...o,
      ratioLevel: loss === 'gspo' ? 'sequence' : o.ratioLevel,
      aggregation: o.aggregation ?? (loss === 'gspo' ? 'seq-mean-token-mean' : undefined),
    };
    const estimator = o.klEstimator ?? 'k3';
    if (!o.refLogp || !estimator.endsWith('+')) {
      return { ...ppoReference(ppo, live, o.logp), selectedTokens: 0, rolloutIsBatchNormFactor: 1 };
    }
    // Straight-through: k2 as a function of the live log-probs, shifted by a constant to the
    // base estimator's value at the detached ones.
    const base = estimator.replace('+', '') as KlEstimator;
    const k2Live = ppoReference({ ...ppo, klEstimator: 'k2' }, live, o.logp);
    const k2Frozen = ppoReference({ ...ppo, klEstimator: 'k2' }, o.logp, o.logp);
    const baseFrozen = ppoReference({ ...ppo, klEstimator: base }, o.logp, o.logp);
    const shift = baseFrozen.klLoss - k2Frozen.klLoss;
    const klCoef = o.klCoef ?? 0;
    return {
      ...k2Live,
      loss: k2Live.loss + klCoef * shift,
      klLoss: k2Live.klLoss + shift,
      magnitude: k2Live.magnitude + baseFrozen.magnitude,
      selectedTokens: 0,
      rolloutIsBatchNormFactor: 1,
    };
  }
  const n = o.logp.length;
  const offsets = o.seqOffsets ?? Int32Array.from([0, n]);
  const b = offsets.length - 1;
  const aggregation = o.aggregation ?? (loss === 'sapo' ? 'seq-mean-token-mean' : 'token-mean');
  const estimator = o.klEstimator ?? 'k3';
  const klCoef = o.klCoef ?? 0;
  const dp = o.dpSize ?? 1;
  const selected = loss === 'clip_cov' ? clipCovPick(o) : loss === 'kl_cov' ? klCovPick(o) : new Set<number>();
  let weights: ArrayLike<number> | undefined = o.weights;
  let factor = 1;
  if (loss === 'bypass_mode' && o.rolloutIs !== undefined && o.rolloutIs !== 'none') {
    const bw = bypassWeights(o);
    weights = bw.weights;
    factor = bw.factor;
  }

  const pgSums = new Float64Array(b);
  const klSums = new Float64Array(b);
  const absSums = new Float64Array(b);
  const counts = new Float64Array(b);
  let clipped = 0;
  let lower = 0;
  let klStat = 0;
  let nonFinite = 0;
  let masked = 0;
  let longest = 0;
  // geo_mean: per sequence.
  let geoTotal = 0;
  let geoAbs = 0;
  const clipLow = o.clipLow ?? 0.2;
  const clipHigh = o.clipHigh ?? clipLow;
  for (let i = 0; i < b; i++) {
    longest = Math.max(longest, offsets[i + 1] - offsets[i]);
    let geoLogRatio = 0;
    let geoAdvantage = 0;
    let geoLogWeight = 0;
    for (let t = offsets[i]; t < offsets[i + 1]; t++) {
      if (!o.mask[t]) continue;
      counts[i]++;
      masked++;
      const a = o.advantages[t];
      const inputs = [live[t], o.oldLogp[t], a];
      if (o.refLogp) inputs.push(o.refLogp[t]);
      if (o.weights) inputs.push(o.weights[t]);
      if (!inputs.every(Number.isFinite)) nonFinite++;
      if (o.refLogp) {
        const k = klTerm(estimator, live[t], o.logp[t], o.refLogp[t]);
        klSums[i] += k;
        absSums[i] += klCoef * Math.abs(k);
      }
      if (loss === 'geo_mean') {
        const d = live[t] - o.oldLogp[t];
        const sgn = Math.sign(a);
        const dc = clamp(d, -clipLow, clipHigh);
        geoLogRatio += sgn * Math.min(sgn * d, sgn * dc);
        geoAdvantage += a;
        if (o.weights) geoLogWeight += Math.log(o.weights[t] + 1e-10);
        const dd = o.logp[t] - o.oldLogp[t];
        const isClipped = dd !== clamp(dd, -clipLow, clipHigh);
        if (isClipped && a > 0) clipped++;
        if (isClipped && a < 0) lower++;
        klStat += -dd;
        continue;
      }
      const v = tokenLoss(o, live[t], o.logp[t], o.oldLogp[t], a, selected.has(t));
      const w = weights ? weights[t] : 1;
      pgSums[i] += v.loss * w;
      absSums[i] += Math.abs(v.loss * w);
      if (v.clipped) clipped++;
      if (v.lower) lower++;
      klStat += v.klStat;
    }
    if (loss === 'geo_mean') {
      const c = counts[i];
      const ratio = Math.exp(c > 0 ? geoLogRatio / c : 0);
      const abar = c > 0 ? geoAdvantage / c : 0;
      const sw = o.weights ? Math.exp(c > 0 ? geoLogWeight / c : 0) : 1;
      geoTotal += -abar * ratio * sw;
      geoAbs += Math.abs(abar * ratio * sw);
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
  const pgLoss = loss === 'geo_mean' ? over(geoTotal, o.seqNormalizer ?? b) : aggregate(pgSums);
  const klLoss = o.refLogp ? aggregate(klSums) : 0;
  const mean = (x: number) => (masked > 0 ? x / masked : 0);
  const magnitude = loss === 'geo_mean' ? over(geoAbs, o.seqNormalizer ?? b) + Math.abs(aggregate(absSums)) : Math.abs(aggregate(absSums));
  return {
    loss: pgLoss + klCoef * klLoss,
    pgLoss,
    klLoss,
    clipFraction: mean(clipped),
    clipFractionLower: mean(lower),
    approxKl: mean(klStat),
    nonFinite,
    maskedTokens: masked,
    selectedTokens: selected.size,
    rolloutIsBatchNormFactor: factor,
    magnitude: magnitude + 1e-30,
  };
}

/**
 * dLoss/dlogp by central differences of the float64 reference; NaN where the forward and
 * backward differences disagree (a kink: the derivative is one-sided there).
 */
export function policyFiniteDifference(o: PpoLossOptions, h = 1e-4): Float64Array {
  const live = Float64Array.from(o.logp);
  const f0 = policyReference(o, live).loss;
  const grad = new Float64Array(o.logp.length);
  for (let t = 0; t < live.length; t++) {
    live[t] = o.logp[t] + h;
    const up = policyReference(o, live).loss;
    live[t] = o.logp[t] - h;
    const down = policyReference(o, live).loss;
    live[t] = o.logp[t];
    const forward = (up - f0) / h;
    const backward = (f0 - down) / h;
    const kink = Math.abs(forward - backward) > 1e-2 * Math.max(Math.abs(forward), Math.abs(backward)) + 1e-12;
    grad[t] = kink ? NaN : (up - down) / (2 * h);
  }
  return grad;
}
