/**
 * The one reference of `advantages` (the op test, the fuzzer and the benchmark's plain
 * TypeScript peer use it): independent float64 code written from verl's
 * verl/trainer/ppo/core_algos.py and verl/utils/torch_functional.py (masked_whiten) at
 * commit 1dda039b9c6311889a9c9a26040677e1254814f9: each sequence is laid out as verl's
 * padded response row (columns from the sequence start; the optimal token baseline's columns
 * from its first masked-in token), and every estimator is transcribed loop by loop.
 */

export type Estimator =
  | 'grpo' | 'grpo_passk' | 'gdpo' | 'rloo' | 'reinforce_plus_plus' | 'reinforce_plus_plus_baseline'
  | 'remax' | 'opo' | 'gpg' | 'gae' | 'optimal_token_baseline' | 'tir_optimal_token_baseline';

export interface ReferenceInputs {
  estimator: Estimator;
  rewards?: Float32Array;
  tokenRewards?: Float32Array;
  mask: Uint8Array;
  seqOffsets: Int32Array;
  groupIds?: ArrayLike<number>;
  normAdvByStdInGrpo?: boolean;
  epsilon?: number;
  rewardWeights?: Float32Array;
  gamma?: number;
  lam?: number;
  values?: Float32Array;
  rewardBaselines?: Float32Array;
  fNorm?: number;
  oldLogp?: Float32Array;
  sumPiSquared?: Float32Array;
  rolloutIsWeights?: Float32Array;
  handleZeroTail?: boolean;
}

/**
 * What the kernel rounds to f32 before its last step, times how much that step amplifies
 * it: a check allows about 1e-6 of it (16 f32 ulps). Whitening divides by the std;
 * the optimal token baseline subtracts a baseline from the rounded reward-to-go.
 */
let magnitude = 0;

/** verl's masked_whiten: (x - mean) / sqrt(unbiased var + 1e-8), stats over the mask. */
function maskedWhiten(values: Float64Array, mask: Uint8Array): Float64Array {
  let n = 0;
  let sum = 0;
  for (let t = 0; t < values.length; t++) if (mask[t]) { n++; sum += values[t]!; }
  const mean = n > 0 ? sum / n : 0;
  let squares = 0;
  for (let t = 0; t < values.length; t++) if (mask[t]) squares += (values[t]! - mean) ** 2;
  const variance = n > 1 ? squares / (n - 1) : 0;
  let largest = 0;
  for (let t = 0; t < values.length; t++) if (mask[t]) largest = Math.max(largest, Math.abs(values[t]!));
  magnitude = largest / Math.sqrt(variance + 1e-8);
  return values.map((v) => (v - mean) / Math.sqrt(variance + 1e-8));
}

/** GRPO per group: (s - mean) / (std + eps), unbiased std; a group of one has mean 0, std 1. */
function grpoReference(scores: ArrayLike<number>, groupIds: ArrayLike<number>, scaleByStd: boolean, epsilon: number): Float64Array {
  const groups = new Map<number, number[]>();
  for (let i = 0; i < scores.length; i++) {
    const members = groups.get(groupIds[i]!) ?? [];
    members.push(i);
    groups.set(groupIds[i]!, members);
  }
  const out = new Float64Array(scores.length);
  for (const members of groups.values()) {
    const n = members.length;
    const mean = n > 1 ? members.reduce((s, i) => s + scores[i]!, 0) / n : 0;
    const std = n > 1 ? Math.sqrt(members.reduce((s, i) => s + (scores[i]! - mean) ** 2, 0) / (n - 1)) : 1;
    // A zero-variance group with epsilon 0 keeps its s - mean = 0 rather than 0/0 (documented).
    for (const i of members) out[i] = scaleByStd && std + epsilon !== 0 ? (scores[i]! - mean) / (std + epsilon) : scores[i]! - mean;
  }
  return out;
}

export interface ReferenceResult {
  advantages: Float64Array;
  returns: Float64Array;
  /** See `magnitude` above: 0 where the kernel rounds only its result. */
  magnitude: number;
}

export function reference(o: ReferenceInputs): ReferenceResult {
  magnitude = 0;
  const result = compute(o);
  return { ...result, magnitude: Number.isFinite(magnitude) ? magnitude : 0 };
}

function compute(o: ReferenceInputs): { advantages: Float64Array; returns: Float64Array } {
  const { mask, seqOffsets } = o;
  const B = seqOffsets.length - 1;
  const N = mask.length;
  const e = o.estimator;
  const rows = Array.from({ length: B }, (_, i) => ({ begin: seqOffsets[i]!, end: seqOffsets[i + 1]! }));
  const lastMasked = rows.map(({ begin, end }) => {
    let last = -1;
    for (let t = begin; t < end; t++) if (mask[t]) last = t;
    return last;
  });
  // token_level_rewards: the token rewards, or the score on the last response token.
  const tokenRewards = new Float64Array(N);
  if (o.tokenRewards) tokenRewards.set(o.tokenRewards);
  else for (let i = 0; i < B; i++) if (lastMasked[i]! >= 0) tokenRewards[lastMasked[i]!] = o.rewards![i]!;
  const scores = rows.map(({ begin, end }, i) => {
    if (o.rewards) return o.rewards[i]!;
    let s = 0;
    for (let t = begin; t < end; t++) s += o.tokenRewards![t]!;
    return s;
  });
  const lengths = rows.map(({ begin, end }) => { let n = 0; for (let t = begin; t < end; t++) n += mask[t] ? 1 : 0; return n; });
  const groups = new Map<number, number[]>();
  if (o.groupIds) for (let i = 0; i < B; i++) {
    const list = groups.get(o.groupIds[i]!) ?? [];
    list.push(i);
    groups.set(o.groupIds[i]!, list);
  }
  const norm = o.normAdvByStdInGrpo ?? true;
  const isTokenBaseline = e === 'optimal_token_baseline' || e === 'tir_optimal_token_baseline';
  // -1 stands for the estimator's default, in JavaScript as in the C options.
  const epsilon = o.epsilon === undefined || o.epsilon === -1 ? (isTokenBaseline ? 1e-8 : 1e-6) : o.epsilon;
  const broadcast = (perSequence: ArrayLike<number>) => {
    const out = new Float64Array(N);
    rows.forEach(({ begin, end }, i) => { for (let t = begin; t < end; t++) out[t] = mask[t] ? perSequence[i]! : 0; });
    return out;
  };
  const meanOf = (members: number[]) => members.reduce((s, i) => s + scores[i]!, 0) / members.length;
  const stdOf = (members: number[]) => {
    const mean = meanOf(members);
    return Math.sqrt(members.reduce((s, i) => s + (scores[i]! - mean) ** 2, 0) / (members.length - 1));
  };
  const rewardToGo = () => {
    const out = new Float64Array(N);
    for (const { begin, end } of rows) {
      let g = 0;
      for (let t = end - 1; t >= begin; t--) { g += mask[t] ? tokenRewards[t]! : 0; out[t] = g; }
    }
    return out;
  };
  const zeroMasked = (values: Float64Array) => values.map((v, t) => (mask[t] ? v : 0));

  switch (e) {
    case 'grpo': {
      const a = broadcast(grpoReference(scores, o.groupIds!, norm, epsilon));
      return { advantages: a, returns: a };
    }
    case 'gdpo': {
      const K = o.rewards ? o.rewards.length / Math.max(B, 1) : 1;
      const sum = new Float64Array(B);
      for (let k = 0; k < K; k++) {
        const component = k === 0 ? scores : o.rewards!.subarray(k * B, (k + 1) * B);
        const a = grpoReference(component, o.groupIds!, norm, epsilon);
        const w = o.rewardWeights ? o.rewardWeights[k]! : 1;
        for (let i = 0; i < B; i++) sum[i] += w * a[i]!;
      }
      const a = zeroMasked(maskedWhiten(broadcast(sum), mask));
      return { advantages: a, returns: a };
    }
    case 'grpo_passk': {
      const perSequence = new Float64Array(B);
      for (const members of groups.values()) {
        if (members.length < 2) continue;
        // torch.topk(rewards, 2): NaN ranks highest; ties give r_max - r_second = 0.
        const ranked = [...members].sort((x, y) => {
          const a = scores[x]!, b = scores[y]!;
          if (Number.isNaN(a) !== Number.isNaN(b)) return Number.isNaN(a) ? -1 : 1;
          return b - a || x - y;
        });
        let advantage = scores[ranked[0]!]! - scores[ranked[1]!]!;
        if (norm) {
          const std = stdOf(members);
          if (std + epsilon !== 0) advantage /= std + epsilon;
        }
        perSequence[ranked[0]!] = advantage;
      }
      const a = broadcast(perSequence);
      return { advantages: a, returns: a };
    }
    case 'rloo': case 'reinforce_plus_plus_baseline': case 'opo': case 'gpg': {
      const perSequence = new Float64Array(B);
      const nonzero = scores.filter((s) => s !== 0).length;
      const alpha = B / Math.max(nonzero, 1);
      for (const members of groups.values()) {
        const n = members.length;
        let baseline = 0;
        if (n > 1) {
          if (e === 'opo') {
            baseline = members.reduce((s, i) => s + lengths[i]! * scores[i]!, 0) / members.reduce((s, i) => s + lengths[i]!, 0);
          } else baseline = meanOf(members);
        }
        for (const i of members) {
          if (e === 'rloo') perSequence[i] = n > 1 ? (scores[i]! - baseline) * n / (n - 1) : scores[i]!;
          else if (e === 'gpg') perSequence[i] = alpha * (scores[i]! - baseline) / (o.fNorm ?? 1);
          else perSequence[i] = scores[i]! - baseline;
        }
      }
      let a = broadcast(perSequence);
      if (e === 'reinforce_plus_plus_baseline') a = zeroMasked(maskedWhiten(a, mask));
      return { advantages: a, returns: a };
    }
    case 'reinforce_plus_plus': {
      const gamma = o.gamma ?? 1;
      const returns = new Float64Array(N);
      for (const { begin, end } of rows) {
        let running = 0;
        for (let t = end - 1; t >= begin; t--) {
          const next = tokenRewards[t]! + gamma * running;
          returns[t] = mask[t] ? next : 0;
          if (mask[t]) running = next;
        }
      }
      return { advantages: zeroMasked(maskedWhiten(returns, mask)), returns };
    }
    case 'remax': {
      const returns = rewardToGo();
      const advantages = new Float64Array(N);
      rows.forEach(({ begin, end }, i) => {
        for (let t = begin; t < end; t++) advantages[t] = mask[t] ? returns[t]! - o.rewardBaselines![i]! : 0;
      });
      return { advantages, returns };
    }
    case 'gae': {
      const gamma = o.gamma ?? 1;
      const lam = o.lam ?? 1;
      const raw = new Float64Array(N);
      for (const { begin, end } of rows) {
        let nextValue = 0;
        let lastGae = 0;
        for (let t = end - 1; t >= begin; t--) {
          const delta = tokenRewards[t]! + gamma * nextValue - o.values![t]!;
          const candidate = delta + gamma * lam * lastGae;
          if (mask[t]) { nextValue = o.values![t]!; lastGae = candidate; }
          raw[t] = lastGae;
        }
      }
      const returns = raw.map((a, t) => a + o.values![t]!);
      return { advantages: zeroMasked(maskedWhiten(raw, mask)), returns };
    }
    case 'optimal_token_baseline': case 'tir_optimal_token_baseline': {
      const tir = e === 'tir_optimal_token_baseline';
      const returns = rewardToGo();
      // W: running sum of (1 - 2 pi + sum pi^2) * rho^2 over masked-in tokens.
      const w = new Float64Array(N);
      for (const { begin, end } of rows) {
        let path = 0;
        for (let t = begin; t < end; t++) {
          if (mask[t]) {
            const rho = o.rolloutIsWeights ? o.rolloutIsWeights[t]! : 1;
            path += (1 - 2 * Math.exp(o.oldLogp![t]!) + o.sumPiSquared![t]!) * rho * rho;
          }
          w[t] = path;
        }
      }
      // Each sequence's masked-in tokens and their columns.
      const columns = rows.map(({ begin, end }) => {
        const list: { t: number; k: number }[] = [];
        let first = -1;
        for (let t = begin; t < end; t++) {
          if (!mask[t]) continue;
          if (first < 0) first = t;
          list.push({ t, k: tir ? list.length : t - first });
        }
        return list;
      });
      for (let t = 0; t < N; t++) if (mask[t]) magnitude = Math.max(magnitude, Math.abs(returns[t]!));
      const advantages = new Float64Array(N);
      for (const all of groups.values()) {
        const members = tir ? all.filter((i) => lengths[i]! > 0) : all;
        const baseline = new Map<number, number>();
        if (members.length > 1) {
          const num = new Map<number, number>();
          const den = new Map<number, number>();
          for (const i of members) for (const { t, k } of columns[i]!) {
            num.set(k, (num.get(k) ?? 0) + returns[t]! * w[t]!);
            den.set(k, (den.get(k) ?? 0) + w[t]!);
          }
          for (const [k, n] of num) baseline.set(k, n / (den.get(k)! + epsilon));
        }
        let tail = -1;
        let second = 0;
        if (members.length > 1 && (o.handleZeroTail ?? true)) {
          const sorted = members.map((i) => lengths[i]!).sort((a, b) => a - b);
          const max = sorted[sorted.length - 1]!;
          second = sorted[sorted.length - 2]!;
          const longest = members.filter((i) => lengths[i] === max);
          if (longest.length === 1 && max > second) tail = longest[0]!;
        }
        for (const i of members) for (const { t, k } of columns[i]!) {
          const b = i === tail && k >= second ? 0 : baseline.get(k) ?? 0;
          advantages[t] = returns[t]! - b;
        }
      }
      return { advantages, returns };
    }
  }
}
