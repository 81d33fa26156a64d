/**
 * The loss call of a GRPO micro-batch: the episode policy loss, THOR's step-level loss and
 * the entropy bonus, each over its own tokens and divided by the counts of the whole
 * optimizer step, turned into the gradient with respect to the policy's outputs. The
 * policy loss itself is chosen in the losses seam (`../losses.ts`).
 */
import { sum } from '../batching.js';
import { policyLoss, policyLossOptions, type PolicyLossSettings } from '../losses.js';
import type { PolicyLogprobs, PolicyOutputGradient } from '../trainable_policy.js';
import type { UpdateStats } from './metrics.js';
import { gatherValues, type Normalizers, type SubBatch, type UpdateBatch } from './update_batch.js';

/** The loss settings of a micro-batch. */
export interface MicroBatchLossSettings {
  loss: PolicyLossSettings;
  entropyCoef: number;
  /** Weight of THOR's step-level loss; absent when the step level is off. */
  stepLevelCoef?: number;
  /** Weight of the episode loss. Default 1. */
  episodeCoef?: number;
}

/**
 * The loss of one micro-batch and its gradient w.r.t. the policy outputs: the episode
 * policy loss (weighted by `episodeCoef`) plus, weighted, the THOR step-level loss (each over its own tokens, with the
 * normalisers of the whole optimizer step), minus the entropy bonus. Adds its statistics
 * to `stats` (the entropy only when `measureEntropy`).
 */
export function microBatchLoss(
  settings: MicroBatchLossSettings,
  update: UpdateBatch,
  sub: SubBatch,
  outputs: PolicyLogprobs,
  normalizers: Normalizers,
  stats: UpdateStats,
  measureEntropy: boolean,
): PolicyOutputGradient {
  const take = <T extends Float32Array | Uint8Array>(source: T) => gatherValues(source, sub.positions);
  const episodeMask = take(update.episodeMask);
  const common = {
    logp: outputs.logp,
    oldLogp: take(update.oldLogp),
    advantages: take(update.advantages),
    seqOffsets: sub.batch.seqOffsets,
    ...(update.refLogp ? { refLogp: take(update.refLogp) } : {}),
  };
  const gradLogp = new Float32Array(sub.batch.tokens.length);
  if (normalizers.episodeTokens > 0) {
    const result = policyLoss(
      policyLossOptions(settings.loss, {
        ...common,
        mask: episodeMask,
        ...(update.weights ? { weights: take(update.weights) } : {}),
        tokenNormalizer: normalizers.episodeTokens,
        seqNormalizer: normalizers.episodeSequences,
        horizon: normalizers.horizon,
      }),
    );
    const coef = settings.episodeCoef ?? 1;
    for (let t = 0; t < gradLogp.length; t++) gradLogp[t] = coef * result.grad[t];
    stats.episodeLoss(result, sum(episodeMask), coef);
  }
  if (normalizers.stepTokens > 0) {
    const coef = settings.stepLevelCoef!;
    const result = policyLoss(
      policyLossOptions(stepLevelLoss(settings.loss), { ...common, mask: take(update.stepMask), tokenNormalizer: normalizers.stepTokens }),
    );
    for (let t = 0; t < gradLogp.length; t++) gradLogp[t] += coef * result.grad[t];
    stats.stepLoss(result, coef);
  }
  if (!outputs.entropy) return { gradLogp };
  if (measureEntropy) stats.entropy(outputs.entropy, episodeMask);
  const entropyCoef = settings.entropyCoef;
  if (entropyCoef === 0 || normalizers.episodeTokens === 0) return { gradLogp };
  const gradEntropy = Float32Array.from(episodeMask, (m) => (-entropyCoef * m) / normalizers.episodeTokens);
  return { gradLogp, gradEntropy };
}

/** THOR's step-level loss: the episode loss's clipping and KL, as a token mean without dual clip. */
function stepLevelLoss(loss: PolicyLossSettings): PolicyLossSettings {
  const { dualClip: _dualClip, ...rest } = loss;
  return { ...rest, aggregation: 'token-mean' };
}
