/**
 * Float64 reference of rolloutCorrection, written step by step as verl's
 * verl/trainer/ppo/rollout_corr_helper.py computes it (verl-project/verl at commit
 * 1dda039b9c6311889a9c9a26040677e1254814f9): compute_rollout_correction_weights,
 * compute_is_metrics, compute_rollout_rejection_mask, compute_rs_metrics and
 * compute_offpolicy_metrics, on rows = sequences of the ragged batch. Two documented
 * departures from verl: means over "sequences" skip sequences with no masked-in token
 * (verl averages over every row, a fully masked row counting as weight 1 / ppl 1), and a
 * batch with no masked-in token gives 0 for every statistic (verl raises); verl's
 * masked_mean divides by count + 1e-8, this divides by the count; verl's token-level std
 * √(E[x²] - E[x]²) is taken in two passes here (the same quantity, without cancellation). Shared by the tests and
 * the benchmark (the plain-TypeScript peer).
 */
import type { RolloutCorrectionOptions, RolloutRejectionOption } from '../../lib/index.js';

const SAFETY_BOUND = 20;

export interface ReferenceResult {
  weights: Float64Array;
  mask: Uint8Array;
  stats: Record<string, number>;
  nonFinite: number;
}

const clamp = (x: number, lo: number, hi: number): number => (x < lo ? lo : x > hi ? hi : x);
/** torch.max / torch.min semantics: NaN wins. */
const nanMax = (values: number[]): number => values.reduce((a, b) => (Number.isNaN(a) || a > b ? a : Number.isNaN(b) || b > a ? b : a), -Infinity);
const nanMin = (values: number[]): number => values.reduce((a, b) => (Number.isNaN(a) || a < b ? a : Number.isNaN(b) || b < a ? b : a), Infinity);
const sum = (values: number[]): number => values.reduce((a, b) => a + b, 0);
const mean = (values: number[]): number => (values.length === 0 ? 0 : sum(values) / values.length);
/**
 * verl's √(E[x²] - E[x]²) of a statistic over masked tokens, in two passes (the same value
 * without the cancellation); 0 for fewer than two tokens, as verl guards it.
 */
const populationStd = (values: number[]): number => {
  if (values.length < 2) return 0;
  const m = mean(values);
  return Math.sqrt(mean(values.map((x) => (x - m) * (x - m))));
};
/** torch.std (unbiased); 0 for fewer than two values, as verl guards it. */
const std = (values: number[]): number => {
  if (values.length < 2) return 0;
  const m = mean(values);
  const v = sum(values.map((x) => (x - m) * (x - m))) / (values.length - 1);
  return Math.sqrt(v);
};

export function rolloutCorrectionReference(o: RolloutCorrectionOptions): ReferenceResult {
  const { logp, rolloutLogp, mask, seqOffsets } = o;
  const n = logp.length;
  const rows: number[][] = []; // masked-in token indices of each sequence
  for (let s = 0; s + 1 < seqOffsets.length; s++) {
    const row: number[] = [];
    for (let t = seqOffsets[s]; t < seqOffsets[s + 1]; t++) if (mask[t]) row.push(t);
    rows.push(row);
  }
  const valid = rows.filter((row) => row.length > 0);
  const tokens = valid.flat();
  const M = tokens.length;
  const tokenMean = (f: (t: number) => number): number => (M === 0 ? 0 : sum(tokens.map(f)) / M);
  const seqMean = (f: (row: number[]) => number): number => mean(valid.map(f));

  const logRatio = new Float64Array(n);
  for (let t = 0; t < n; t++) logRatio[t] = logp[t] - rolloutLogp[t];
  const stats: Record<string, number> = {};
  const weights = new Float64Array(n);
  const outMask = new Uint8Array(n);

  // ---- compute_rollout_correction_weights + compute_is_metrics
  const level = o.rolloutIs ?? 'sequence';
  const upper = o.rolloutIsThreshold ?? 2;
  const icepop = o.rolloutIsThresholdLower !== undefined;
  const lower = icepop ? (o.rolloutIsThresholdLower as number) : 1 / upper;
  if (level === 'none') {
    for (const t of tokens) weights[t] = 1;
  } else {
    const raw = new Float64Array(n);
    const rowLogSum = valid.map((row) => sum(row.map((t) => logRatio[t])));
    valid.forEach((row, i) => {
      for (const t of row) {
        raw[t] = Math.exp(clamp(level === 'token' ? logRatio[t] : rowLogSum[i], -SAFETY_BOUND, SAFETY_BOUND));
      }
    });
    for (const t of tokens) {
      weights[t] = icepop ? (raw[t] >= lower && raw[t] <= upper ? raw[t] : 0) : raw[t] > upper ? upper : raw[t];
    }
    stats.rollout_is_mean = tokenMean((t) => weights[t]);
    if (level === 'sequence') {
      stats.rollout_is_max = valid.length ? Math.exp(Math.min(nanMax(rowLogSum), SAFETY_BOUND)) : 0;
      stats.rollout_is_min = valid.length ? Math.exp(nanMin(rowLogSum)) : 0;
      stats.rollout_is_ratio_fraction_high = mean(rowLogSum.map((x) => (x > Math.log(upper) ? 1 : 0)));
      stats.rollout_is_ratio_fraction_low = mean(rowLogSum.map((x) => (x < Math.log(lower) ? 1 : 0)));
    } else {
      stats.rollout_is_ratio_fraction_high = tokenMean((t) => (raw[t] > upper ? 1 : 0));
      stats.rollout_is_ratio_fraction_low = tokenMean((t) => (raw[t] < lower ? 1 : 0));
      stats.rollout_is_max = M ? nanMax(tokens.map((t) => weights[t])) : 0;
      stats.rollout_is_min = M ? nanMin(tokens.map((t) => weights[t])) : 0;
    }
    const forStd = (t: number): number => clamp(weights[t], 0, upper);
    stats.rollout_is_std = populationStd(tokens.map(forStd));
    const meanForEss = tokenMean(forStd);
    const normalized2 = tokenMean((t) => (forStd(t) / (meanForEss + 1e-8)) ** 2);
    stats.rollout_is_eff_sample_size = M === 0 || normalized2 === 0 ? 0 : 1 / normalized2;
    const seqWeights = valid.map((row) => sum(row.map((t) => weights[t])) / row.length);
    const rawSeqMeans = valid.map((row) => sum(row.map((t) => raw[t])) / row.length);
    stats.rollout_is_seq_mean = mean(seqWeights);
    stats.rollout_is_seq_std = std(seqWeights);
    stats.rollout_is_seq_max = valid.length ? nanMax(seqWeights) : 0;
    stats.rollout_is_seq_min = valid.length ? nanMin(seqWeights) : 0;
    stats.rollout_is_seq_max_deviation = valid.length ? nanMax(seqWeights.map((w) => Math.abs(w - 1))) : 0;
    stats.rollout_is_seq_fraction_high = mean(rawSeqMeans.map((w) => (w > upper ? 1 : 0)));
    stats.rollout_is_seq_fraction_low = mean(rawSeqMeans.map((w) => (w < lower ? 1 : 0)));
    if (icepop) stats.rollout_is_oob_ratio = tokenMean((t) => (raw[t] < lower || raw[t] > upper ? 1 : 0));
    if (o.rolloutIsBatchNormalize) {
      const weightsMean = level === 'token' ? tokenMean((t) => weights[t]) : mean(seqWeights);
      if (weightsMean > 1e-8) {
        for (let t = 0; t < n; t++) weights[t] /= weightsMean;
        stats.rollout_is_batch_norm_factor = weightsMean;
      } else {
        stats.rollout_is_batch_norm_factor = 1;
      }
    }
  }

  // ---- compute_rollout_rejection_mask + compute_rs_metrics
  const options: RolloutRejectionOption[] =
    typeof o.rolloutRs === 'string'
      ? (o.rolloutRs.split(',').map((x) => x.trim()).filter((x) => x) as RolloutRejectionOption[])
      : [...(o.rolloutRs ?? [])];
  const keep = new Uint8Array(n).fill(1);
  if (options.length > 0) {
    const uppers = [o.rolloutRsThreshold ?? NaN].flat();
    const lowers = o.rolloutRsThresholdLower === undefined ? [] : [o.rolloutRsThresholdLower].flat();
    const safe = (t: number): number => clamp(logRatio[t], -SAFETY_BOUND, SAFETY_BOUND);
    const kValue = (k: string, t: number): number =>
      k === 'k1' ? -safe(t) : k === 'k2' ? 0.5 * safe(t) ** 2 : Math.exp(safe(t)) - 1 - safe(t);
    options.forEach((option, i) => {
      const k = option.slice(-2);
      const isK1 = k === 'k1';
      const upperValue = uppers.length === 1 ? uppers[0] : uppers[i];
      const lowerGiven = lowers.length === 0 ? undefined : lowers.length === 1 ? lowers[0] : lowers[i];
      const lowerValue = isK1 ? (lowerGiven && lowerGiven > 0 ? lowerGiven : 1 / upperValue) : undefined;
      const hi = isK1 ? Math.log(upperValue) : upperValue;
      const lo = isK1 ? Math.log(lowerValue as number) : 0;
      const pass = (x: number): boolean => (isK1 ? x >= lo && x <= hi : x <= hi);
      const tokenLevel = option.startsWith('token_');
      // The statistic of every token, and the value of every valid sequence.
      const stat = new Float64Array(n);
      const seqValues: number[] = [];
      valid.forEach((row) => {
        const values = row.map((t) => kValue(k, t));
        let v: number;
        if (tokenLevel) v = sum(values) / row.length;
        else if (option.startsWith('seq_sum')) v = sum(values);
        else if (option.startsWith('seq_mean')) v = sum(values) / row.length;
        else v = nanMax(values);
        seqValues.push(v);
        for (let j = 0; j < row.length; j++) stat[row[j]] = tokenLevel ? values[j] : v;
      });
      const prefix = `rollout_rs_${option}`;
      let rejectedTokens = 0;
      let rejectedSeqs = 0;
      valid.forEach((row, r) => {
        let any = false;
        for (const t of row) {
          const ok = tokenLevel ? pass(stat[t]) : pass(seqValues[r]);
          if (!ok) {
            keep[t] = 0;
            rejectedTokens++;
            any = true;
          }
        }
        if (any) rejectedSeqs++;
      });
      stats[`${prefix}_mean`] = tokenMean((t) => stat[t]);
      if (!tokenLevel) {
        stats[`${prefix}_max`] = valid.length ? nanMax(seqValues) : 0;
        stats[`${prefix}_min`] = valid.length ? nanMin(seqValues) : 0;
        stats[`${prefix}_fraction_high`] = mean(seqValues.map((v) => (v > hi ? 1 : 0)));
        stats[`${prefix}_fraction_low`] = isK1 ? mean(seqValues.map((v) => (v < lo ? 1 : 0))) : 0;
      } else {
        stats[`${prefix}_max`] = M ? nanMax(tokens.map((t) => stat[t])) : 0;
        stats[`${prefix}_min`] = M ? nanMin(tokens.map((t) => stat[t])) : 0;
        stats[`${prefix}_fraction_high`] = tokenMean((t) => (stat[t] > hi ? 1 : 0));
        stats[`${prefix}_fraction_low`] = isK1 ? tokenMean((t) => (stat[t] < lo ? 1 : 0)) : 0;
      }
      stats[`${prefix}_std`] = populationStd(tokens.map((t) => clamp(stat[t], lo, hi)));
      stats[`${prefix}_seq_mean`] = mean(seqValues);
      stats[`${prefix}_seq_std`] = std(seqValues);
      stats[`${prefix}_seq_max`] = valid.length ? nanMax(seqValues) : 0;
      stats[`${prefix}_seq_min`] = valid.length ? nanMin(seqValues) : 0;
      stats[`${prefix}_seq_max_deviation`] = valid.length ? nanMax(seqValues.map(Math.abs)) : 0;
      stats[`${prefix}_seq_fraction_high`] = mean(seqValues.map((v) => (v > hi ? 1 : 0)));
      if (isK1) stats[`${prefix}_seq_fraction_low`] = mean(seqValues.map((v) => (v < lo ? 1 : 0)));
      stats[`${prefix}_masked_fraction`] = M ? rejectedTokens / M : 0;
      stats[`${prefix}_seq_masked_fraction`] = valid.length ? rejectedSeqs / valid.length : 0;
    });
    stats.rollout_rs_masked_fraction = tokenMean((t) => (keep[t] ? 0 : 1));
    stats.rollout_rs_seq_masked_fraction = mean(valid.map((row) => (row.some((t) => !keep[t]) ? 1 : 0)));
  }
  for (const t of tokens) outMask[t] = keep[t];

  // ---- compute_offpolicy_metrics
  const rowMean = (row: number[], values: Float32Array): number => sum(row.map((t) => values[t])) / row.length;
  const trainMeans = valid.map((row) => rowMean(row, logp));
  const rolloutMeans = valid.map((row) => rowMean(row, rolloutLogp));
  const logPplDiff = valid.map((_, i) => rolloutMeans[i] - trainMeans[i]);
  stats.training_ppl = mean(trainMeans.map((m) => Math.exp(-m)));
  stats.training_log_ppl = mean(trainMeans.map((m) => -m));
  stats.kl = tokenMean((t) => rolloutLogp[t] - logp[t]);
  stats.k3_kl = tokenMean((t) => Math.exp(logRatio[t]) - logRatio[t] - 1);
  stats.rollout_ppl = mean(rolloutMeans.map((m) => Math.exp(-m)));
  stats.rollout_log_ppl = mean(rolloutMeans.map((m) => -m));
  stats.log_ppl_diff = mean(logPplDiff);
  stats.log_ppl_abs_diff = mean(logPplDiff.map(Math.abs));
  stats.log_ppl_diff_max = valid.length ? nanMax(logPplDiff) : 0;
  stats.log_ppl_diff_min = valid.length ? nanMin(logPplDiff) : 0;
  stats.ppl_ratio = mean(logPplDiff.map(Math.exp));
  stats.chi2_token = M ? tokenMean((t) => Math.exp(clamp(logRatio[t], -SAFETY_BOUND, SAFETY_BOUND)) ** 2) - 1 : 0;
  stats.chi2_seq = valid.length
    ? mean(valid.map((row) => Math.exp(2 * clamp(sum(row.map((t) => logRatio[t])), -SAFETY_BOUND, SAFETY_BOUND)))) - 1
    : 0;

  let nonFinite = 0;
  for (const t of tokens) if (!Number.isFinite(logp[t]) || !Number.isFinite(rolloutLogp[t])) nonFinite++;
  return { weights, mask: outMask, stats, nonFinite };
}
