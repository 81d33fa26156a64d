/**
 * What a GRPO step reports: the metrics of one step, and the running sums of its updates
 * that become them.
 */
import type { PpoLossResult } from '../../kernels/index.js';

/** What one filter did in a step. */
export interface FilterCount {
  /** Episodes the filter flagged, whether or not an earlier filter had removed them. */
  trajectories: number;
  /** Episodes it removed that no earlier filter had. */
  removed: number;
  /** Action tokens of the episodes it removed. */
  tokens: number;
}

/** Rollout/trainer mismatch and, when the correction is on, its weights (the `rolloutCorrection` kernel's statistics). */
export interface RolloutCorrectionMetrics {
  /** Episode tokens compared (the trained ones, before rejection). */
  tokens: number;
  /** KL(rollout ‖ trainer), the masked mean of rolloutLogp − logp (the kernel's `kl`). */
  kl: number;
  /** The k3 estimate of the same KL (`k3_kl`). */
  k3Kl: number;
  /** Largest |logp − rolloutLogp| over those tokens (nats). */
  maxAbsLogpDiff: number;
  /** Mean over sequences of |mean rolloutLogp − mean logp| (`log_ppl_abs_diff`). */
  logPplAbsDiff: number;
  /** Whether weights and rejection were applied to the loss. */
  applied: boolean;
  /** Normalised effective sample size of the weights, in (0, 1] (`rollout_is_eff_sample_size`; with `rolloutIs`). */
  effectiveSampleSize?: number;
  /** Masked mean and largest applied weight (`rollout_is_mean`, `rollout_is_max`). */
  meanWeight?: number;
  maxWeight?: number;
  /** Share of episode tokens rejected (`rollout_rs_masked_fraction`; 0 without `rolloutRs`). */
  rejectedFraction?: number;
  /** Tokens with a non-finite log-prob on either side. */
  nonFinite: number;
}

/** Metrics of one GRPO step (one batch of rollouts and its updates). */
export interface GRPOStepMetrics {
  /** Steps completed, this one included. */
  step: number;
  /** Mean episode reward. */
  reward: number;
  /** Fraction of episodes the environment reported solved (agent episodes: with a positive reward). */
  successRate: number;
  episodes: number;
  /** Per filter (by the SDK filter's name, e.g. 'void-turn'), what it flagged and removed. */
  filtered: Record<string, FilterCount>;
  /** Episodes left in the loss. */
  keptTrajectories: number;
  /** Tokens in the batch, and action tokens trained on (mask count). */
  tokens: number;
  trainedTokens: number;
  /** Loss terms, means over optimizer steps. */
  loss: number;
  pgLoss: number;
  klLoss: number;
  /** Token-weighted means over the updates. */
  clipFraction: number;
  clipFractionLower: number;
  approxKl: number;
  /** Mean entropy (nats) of the trained tokens' distributions at the first update. */
  entropy: number;
  /** Global gradient norm before clipping, mean over optimizer steps. */
  gradNorm: number;
  /** Masked-in tokens with non-finite inputs seen by ppoLoss. */
  nonFinite: number;
  /**
   * The rollout engine's log-probs against the trainer's, over the episode tokens trained on
   * (with `oldLogprobs` 'recompute'): zero mismatch when the same weights sampled and score.
   */
  rolloutCorrection?: RolloutCorrectionMetrics;
  /**
   * How many versions the sampler's weights lagged the trainer's (trainer version = steps
   * completed before this one), over the episodes whose policy reported a version.
   */
  staleness?: { mean: number; max: number };
  /** THOR: failure points resampled, continuations sampled, and the fraction whose tool call ran. */
  stepLevel?: { failures: number; samples: number; successRate: number };
  /**
   * DAPO dynamic sampling: generation batches run, groups dropped for equal rewards, and
   * groups kept beyond the batch (dropped to fit); the step's other metrics are over the kept groups.
   */
  dynamicSampling?: { batches: number; droppedGroups: number; surplusGroups: number };
  rolloutSeconds: number;
  updateSeconds: number;
  seconds: number;
  /** Batch tokens per second of the whole step. */
  tokensPerSecond: number;
}

/** Sums of the update's statistics, reduced to {@link GRPOStepMetrics} fields. */
export class UpdateStats {
  private loss = 0;
  private pgLoss = 0;
  private klLoss = 0;
  private gradNorm = 0;
  private optimizerSteps = 0;
  private clipFraction = 0;
  private clipFractionLower = 0;
  private approxKl = 0;
  private tokens = 0;
  private entropySum = 0;
  private entropyTokens = 0;
  private nonFinite = 0;

  /** Adds a micro-batch's episode loss (already normalised globally, so losses add up), weighted by `coef` in `loss`. */
  episodeLoss(result: PpoLossResult, tokens: number, coef = 1): void {
    this.loss += coef * result.loss;
    this.pgLoss += result.pgLoss;
    this.klLoss += result.klLoss ?? 0;
    this.clipFraction += result.clipFraction * tokens;
    this.clipFractionLower += result.clipFractionLower * tokens;
    this.approxKl += result.approxKl * tokens;
    this.tokens += tokens;
    this.nonFinite += result.nonFinite;
  }

  stepLoss(result: PpoLossResult, coef: number): void {
    this.loss += coef * result.loss;
    this.nonFinite += result.nonFinite;
  }

  entropy(entropy: Float32Array, mask: Uint8Array): void {
    for (let t = 0; t < mask.length; t++) {
      if (mask[t]) {
        this.entropySum += entropy[t];
        this.entropyTokens += 1;
      }
    }
  }

  optimizerStep(gradNorm: number): void {
    this.gradNorm += gradNorm;
    this.optimizerSteps += 1;
  }

  summary() {
    const steps = Math.max(this.optimizerSteps, 1);
    const tokens = Math.max(this.tokens, 1);
    return {
      loss: this.loss / steps,
      pgLoss: this.pgLoss / steps,
      klLoss: this.klLoss / steps,
      clipFraction: this.clipFraction / tokens,
      clipFractionLower: this.clipFractionLower / tokens,
      approxKl: this.approxKl / tokens,
      entropy: this.entropySum / Math.max(this.entropyTokens, 1),
      gradNorm: this.gradNorm / steps,
      nonFinite: this.nonFinite,
    };
  }
}

