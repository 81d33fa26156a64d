/**
 * The losses seam: the one place where a trainer's loss options become kernel calls. It
 * holds the choice of policy loss (what `GRPOTrainer` and the tfjs adapter's `ppoLoss`
 * compute), of preference loss (`DPOTrainer`, the tfjs `dpoLoss`) and of advantage
 * estimator (`GRPOTrainer`, THOR's step level), each as a typed name with a `switch` over
 * it, the options a trainer takes for it, their defaults and checks, and the builder of
 * the kernel's options. A new policy loss or estimator is a new name here, its case in the
 * `switch`, and its kernel; the trainers pick it up through these functions.
 * @internal
 */
import {
  dpoLoss,
  groupAdvantages,
  ppoLoss,
  type DpoLossOptions,
  type DpoLossResult,
  type DpoVariant,
  type KlEstimator,
  type PpoAggregation,
  type PpoLossOptions,
  type PpoLossResult,
} from '../kernels/index.js';
import { checkNumber, rangeError } from '../check.js';

/** The policy losses a trainer can compute. 'ppo': the clipped surrogate of the `ppoLoss` kernel. */
export type PolicyLossName = 'ppo';

/** The policy-loss options of a trainer (see the `ppoLoss` kernel for their meaning). */
export interface PolicyLossOptions {
  /** ppoLoss settings (see the kernel): clipLow 0.2, clipHigh = clipLow, dualClip off, aggregation 'token-mean'. */
  clipLow?: number;
  clipHigh?: number;
  dualClip?: number;
  aggregation?: PpoAggregation;
  /** Weight of the KL to the frozen reference policy; 0 = no reference. Default 0. */
  klCoef?: number;
  /** KL estimator. Default 'k3'. */
  klEstimator?: KlEstimator;
}

/** {@link PolicyLossOptions} with their defaults filled in and checked. */
export interface PolicyLossSettings {
  policyLoss: PolicyLossName;
  clipLow: number;
  clipHigh: number;
  dualClip?: number;
  aggregation: PpoAggregation;
  klCoef: number;
  klEstimator: KlEstimator;
}

/** Fills in and checks a trainer's policy-loss options; errors name `options.<name>`. */
export function policyLossSettings(options: PolicyLossOptions): PolicyLossSettings {
  const clipLow = checkNumber('options.clipLow', options.clipLow, 0.2, 0, 1);
  if (clipLow === 1) throw rangeError('options.clipLow', 'a number in [0, 1)', clipLow);
  return {
    policyLoss: 'ppo',
    clipLow,
    clipHigh: checkNumber('options.clipHigh', options.clipHigh, clipLow, 0, Infinity),
    ...(options.dualClip !== undefined ? { dualClip: options.dualClip } : {}),
    aggregation: options.aggregation ?? 'token-mean',
    klCoef: checkNumber('options.klCoef', options.klCoef, 0, 0, Infinity),
    klEstimator: options.klEstimator ?? 'k3',
  };
}

/** The per-batch inputs of one policy-loss call, `[N]` each (see the `ppoLoss` kernel). */
export interface PolicyLossInputs {
  logp: Float32Array;
  oldLogp: Float32Array;
  advantages: Float32Array;
  mask: Uint8Array;
  seqOffsets: Int32Array;
  /** The reference's log-probs; the KL term is on when given (with the settings' klCoef). */
  refLogp?: Float32Array;
  /** Per-token loss weights, e.g. the rollout-correction weights (see the kernel). */
  weights?: Float32Array;
  /** Global counts of a data-parallel or micro-batched step (see the kernel). */
  tokenNormalizer?: number;
  seqNormalizer?: number;
  horizon?: number;
}

/** The kernel options of one policy-loss call: a trainer's settings applied to a batch. */
export function policyLossOptions(settings: PolicyLossSettings, inputs: PolicyLossInputs): PpoLossOptions {
  const { refLogp, ...data } = inputs;
  return {
    ...data,
    clipLow: settings.clipLow,
    clipHigh: settings.clipHigh,
    ...(refLogp ? { refLogp, klCoef: settings.klCoef, klEstimator: settings.klEstimator } : {}),
    aggregation: settings.aggregation,
    ...(settings.dualClip !== undefined ? { dualClip: settings.dualClip } : {}),
  };
}

/** Computes the policy loss `name` with the kernel's options: the loss, its statistics and dLoss/dlogp. */
export function policyLoss(name: PolicyLossName, options: PpoLossOptions): PpoLossResult {
  switch (name) {
    case 'ppo':
      return ppoLoss(options);
  }
}

/** The preference-loss options of a trainer (see the `dpoLoss` kernel; its defaults apply). */
export interface PreferenceLossOptions {
  /** dpoLoss settings: beta 0.1, labelSmoothing 0, variant 'sigmoid' ('ipo' scores per-token averages). */
  beta?: number;
  labelSmoothing?: number;
  variant?: DpoVariant;
}

/** Checks a trainer's preference-loss options; errors name `options.<name>`. */
export function checkPreferenceLossOptions(options: PreferenceLossOptions): void {
  const beta = checkNumber('options.beta', options.beta, 0.1, 0, Infinity);
  if (beta === 0) throw rangeError('options.beta', 'a number > 0', beta);
  const labelSmoothing = checkNumber('options.labelSmoothing', options.labelSmoothing, 0, 0, 0.5);
  if (labelSmoothing === 0.5) throw rangeError('options.labelSmoothing', 'a number in [0, 0.5)', labelSmoothing);
}

/** Whether the preference loss scores completions by their mean token log-prob (IPO) rather than the sum. */
export function averagesLogprobs(options: PreferenceLossOptions): boolean {
  return options.variant === 'ipo';
}

/** Computes the preference loss of `dpoLoss`'s inputs with a trainer's settings. */
export function preferenceLoss(
  settings: PreferenceLossOptions,
  inputs: Pick<DpoLossOptions, 'policyChosen' | 'policyRejected' | 'refChosen' | 'refRejected'>,
): DpoLossResult {
  return dpoLoss({
    ...inputs,
    ...(settings.beta !== undefined ? { beta: settings.beta } : {}),
    ...(settings.labelSmoothing !== undefined ? { labelSmoothing: settings.labelSmoothing } : {}),
    ...(settings.variant !== undefined ? { variant: settings.variant } : {}),
  });
}

/** The advantage estimators a trainer can use. 'grpo': group-normalised rewards (the `groupAdvantages` kernel). */
export type AdvantageEstimator = 'grpo';

/** The advantage options of a trainer. */
export interface AdvantageOptions {
  /** Divide advantages by the group's std (GRPO); false is Dr.GRPO. Default true. */
  scaleByStd?: boolean;
}

/** {@link AdvantageOptions} with their defaults filled in. */
export interface AdvantageSettings {
  estimator: AdvantageEstimator;
  scaleByStd: boolean;
}

/** Fills in a trainer's advantage options. */
export function advantageSettings(options: AdvantageOptions): AdvantageSettings {
  return { estimator: 'grpo', scaleByStd: options.scaleByStd ?? true };
}

/** Per-sequence rewards `[B]` and their groups: consecutive groups of `groupSize`, or `groupIds` `[B]`. */
export type AdvantageInputs = { rewards: Float32Array } & ({ groupSize: number } | { groupIds: Int32Array });

/** One advantage per sequence, `[B]`, by the settings' estimator. */
export function sequenceAdvantages(settings: AdvantageSettings, inputs: AdvantageInputs): Float32Array {
  switch (settings.estimator) {
    case 'grpo':
      return groupAdvantages({ ...inputs, scaleByStd: settings.scaleByStd });
  }
}
