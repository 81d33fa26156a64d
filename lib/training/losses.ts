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
  type PolicyLoss,
  POLICY_LOSSES,
} from '../kernels/index.js';
import { checkNumber, rangeError, typeError } from '../check.js';

/**
 * The policy losses a trainer can compute: every `policyLoss` of the `ppoLoss` kernel
 * (verl's registry keys), and `'ppo'`, the name trainers used before, for `'vanilla'`.
 */
export type PolicyLossName = PolicyLoss | 'ppo';

/** The options of the chosen loss that only some losses read (see the `ppoLoss` kernel). */
export type PolicyLossParameters = Pick<
  PpoLossOptions,
  | 'ratioLevel' | 'clipRatioC' | 'tauPos' | 'tauNeg' | 'clipCovRatio' | 'clipCovLb' | 'clipCovUb' | 'seed'
  | 'klCovRatio' | 'ppoKlCoef' | 'droBeta' | 'lossType' | 'rolloutIs' | 'rolloutIsThreshold'
  | 'rolloutIsThresholdLower' | 'rolloutIsBatchNormalize'
>;

/**
 * The policy-loss options of a trainer (see the `ppoLoss` kernel for their meaning and
 * defaults). An option is passed to the kernel only when given, so the kernel's defaults
 * apply (clipLow 0.2, clipHigh = clipLow, dualClip off, aggregation 'token-mean', or
 * 'seq-mean-token-mean' for 'gspo' and 'sapo'), and an option the chosen loss does not
 * read is the kernel's TypeError naming it and the loss.
 */
export interface PolicyLossOptions {
  /** The policy loss, by verl's registry key. Default `'vanilla'` (also spelt `'ppo'`). */
  policyLoss?: PolicyLossName;
  /** The chosen loss's own options, e.g. `{ tauPos, tauNeg }` for `'sapo'`. Default none. */
  policyLossParameters?: PolicyLossParameters;
  clipLow?: number;
  clipHigh?: number;
  dualClip?: number;
  aggregation?: PpoAggregation;
  /** Weight of the KL to the frozen reference policy; 0 = no reference. Default 0. */
  klCoef?: number;
  /** KL estimator. Default 'k3'. */
  klEstimator?: KlEstimator;
}

/** {@link PolicyLossOptions} checked, with the loss named and klCoef filled in. */
export interface PolicyLossSettings {
  policyLoss: PolicyLoss;
  parameters: PolicyLossParameters;
  clipLow?: number;
  clipHigh?: number;
  dualClip?: number;
  aggregation?: PpoAggregation;
  klCoef: number;
  klEstimator?: KlEstimator;
}

/** Checks a trainer's policy-loss options; errors name `options.<name>`. */
export function policyLossSettings(options: PolicyLossOptions): PolicyLossSettings {
  const name = options.policyLoss ?? 'vanilla';
  if (name !== 'ppo' && !POLICY_LOSSES.includes(name)) {
    throw rangeError('options.policyLoss', `one of 'ppo', ${POLICY_LOSSES.map((n) => `'${n}'`).join(', ')}`, name);
  }
  const parameters = options.policyLossParameters ?? {};
  if (typeof parameters !== 'object' || parameters === null) {
    throw typeError('options.policyLossParameters', 'an object', parameters);
  }
  const given = <K extends 'clipLow' | 'clipHigh' | 'dualClip' | 'aggregation' | 'klEstimator'>(key: K) =>
    options[key] !== undefined ? { [key]: options[key] } as Pick<PolicyLossOptions, K> : {};
  if (options.clipLow !== undefined) {
    const clipLow = checkNumber('options.clipLow', options.clipLow, 0.2, 0, 1);
    if (clipLow === 1) throw rangeError('options.clipLow', 'a number in [0, 1)', clipLow);
  }
  if (options.clipHigh !== undefined) checkNumber('options.clipHigh', options.clipHigh, 0, 0, Infinity);
  return {
    policyLoss: name === 'ppo' ? 'vanilla' : name,
    parameters: { ...parameters },
    ...given('clipLow'),
    ...given('clipHigh'),
    ...given('dualClip'),
    ...given('aggregation'),
    ...given('klEstimator'),
    klCoef: checkNumber('options.klCoef', options.klCoef, 0, 0, Infinity),
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
  const { policyLoss: name, parameters, klCoef, klEstimator, ...shared } = settings;
  return {
    ...data,
    ...parameters,
    ...shared,
    ...(name !== 'vanilla' ? { policyLoss: name } : {}),
    ...(refLogp ? { refLogp, klCoef, ...(klEstimator !== undefined ? { klEstimator } : {}) } : {}),
  };
}

/** Computes a policy loss with the kernel's options: the loss, its statistics and dLoss/dlogp. */
export function policyLoss(options: PpoLossOptions): PpoLossResult {
  return ppoLoss(options);
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
