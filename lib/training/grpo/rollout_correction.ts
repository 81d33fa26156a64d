/**
 * The GRPO step's rollout correction: the rollout engine's log-probs against the trainer's
 * recomputed ones through the `rolloutCorrection` kernel, measured every step and, when the
 * trainer asks for it, applied: the weights scale the episode loss, rejected tokens leave it.
 */
import { rolloutCorrection } from '../../kernels/index.js';
import type { RolloutCorrectionMetrics } from './metrics.js';
import type { RolloutCorrectionSettings } from './options.js';
import type { UpdateBatch } from './update_batch.js';

/**
 * Measures (and with `settings`, applies to `update`) the correction of the episode tokens.
 * Applying it clears rejected tokens from `update.mask` and `update.episodeMask`, so the
 * step's normalisers count only the tokens trained on, and sets `update.weights`.
 */
export function correctRollout(update: UpdateBatch, settings: RolloutCorrectionSettings | undefined): RolloutCorrectionMetrics {
  const result = rolloutCorrection({
    logp: update.oldLogp,
    rolloutLogp: update.rolloutLogp,
    mask: update.episodeMask,
    seqOffsets: update.batch.seqOffsets,
    // Without settings only the diagnostics are wanted: unit weights, no rejection.
    ...(settings ?? { rolloutIs: 'none' }),
  });
  const { stats } = result;
  let maxAbsLogpDiff = 0;
  for (let t = 0; t < update.episodeMask.length; t++) {
    if (update.episodeMask[t] !== 0) maxAbsLogpDiff = Math.max(maxAbsLogpDiff, Math.abs(update.oldLogp[t]! - update.rolloutLogp[t]!));
  }
  const metrics: RolloutCorrectionMetrics = {
    tokens: result.maskedTokens,
    kl: stats.kl,
    k3Kl: stats.k3_kl,
    maxAbsLogpDiff,
    logPplAbsDiff: stats.log_ppl_abs_diff,
    applied: settings !== undefined,
    nonFinite: result.nonFinite,
  };
  if (settings === undefined) return metrics;
  for (let t = 0; t < update.mask.length; t++) {
    if (update.episodeMask[t] !== 0 && result.mask[t] === 0) update.mask[t] = 0;
  }
  update.episodeMask = result.mask;
  update.weights = result.weights;
  if (stats.rollout_is_eff_sample_size !== undefined) metrics.effectiveSampleSize = stats.rollout_is_eff_sample_size;
  if (stats.rollout_is_mean !== undefined) metrics.meanWeight = stats.rollout_is_mean;
  if (stats.rollout_is_max !== undefined) metrics.maxWeight = stats.rollout_is_max;
  metrics.rejectedFraction = stats.rollout_rs_masked_fraction ?? 0;
  return metrics;
}
