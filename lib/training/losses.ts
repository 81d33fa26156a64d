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
  ADVANTAGE_ESTIMATORS,
  advantages,
  dpoLoss,
  type AdvantageEstimator as KernelAdvantageEstimator,
  type AdvantagesOptions,
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

/** The kernel's estimators a trainer cannot run, and what each would need. */
const UNAVAILABLE_ESTIMATORS: Partial<Record<KernelAdvantageEstimator, string>> = {
  gae: 'a value model (per-token values), which GRPOTrainer does not have',
  remax: "the reward of a greedy rollout of each prompt (rewardBaselines), which GRPOTrainer does not sample",
  gdpo: 'several reward components per episode, where an Environment gives one reward',
};

/**
 * The advantage estimators a trainer can use: those of the `advantages` kernel that need
 * only what a GRPO step has (one outcome reward per episode, prompt groups, the action
 * mask, the trainer's log-probs and, for the optimal-token baselines, the policy's Σπ²).
 */
export type TrainerAdvantageEstimator =
  | 'grpo' | 'grpo_passk' | 'rloo' | 'reinforce_plus_plus' | 'reinforce_plus_plus_baseline'
  | 'opo' | 'gpg' | 'optimal_token_baseline' | 'tir_optimal_token_baseline';

/** {@link TrainerAdvantageEstimator}s, in the kernel's order. */
export const TRAINER_ADVANTAGE_ESTIMATORS: readonly TrainerAdvantageEstimator[] = ADVANTAGE_ESTIMATORS.filter(
  (e): e is TrainerAdvantageEstimator => !(e in UNAVAILABLE_ESTIMATORS),
);

/** The one trainer estimator without groups: REINFORCE++ whitens over the whole batch. */
const UNGROUPED: ReadonlySet<string> = new Set(['reinforce_plus_plus']);

/** Estimators that read the policy's Σ_v π_v² of each token and the old log-probs. */
const OPTIMAL_TOKEN_BASELINES: ReadonlySet<string> = new Set(['optimal_token_baseline', 'tir_optimal_token_baseline']);

/** The estimator's own options a trainer passes through (see the `advantages` kernel). */
export type AdvantageParameters = Pick<AdvantagesOptions, 'normAdvByStdInGrpo' | 'epsilon' | 'gamma' | 'fNorm' | 'handleZeroTail'>;

const ADVANTAGE_PARAMETER_KEYS: readonly string[] = ['normAdvByStdInGrpo', 'epsilon', 'gamma', 'fNorm', 'handleZeroTail'];

/** The advantage options of a trainer. */
export interface AdvantageOptions {
  /**
   * The advantage estimator, by verl's registry key (the `advantages` kernel). Default
   * `'grpo'`. `'gae'`, `'remax'` and `'gdpo'` need inputs a GRPO step does not have and are
   * a TypeError naming what is missing.
   */
  advantageEstimator?: TrainerAdvantageEstimator;
  /**
   * The estimator's own options, e.g. `{ gamma: 0.99 }` for `'reinforce_plus_plus'` or
   * `{ epsilon: 1e-6 }`. An unknown key, or one the estimator does not read, is a TypeError.
   */
  advantageParameters?: AdvantageParameters;
  /** `'grpo'`, `'grpo_passk'`: divide advantages by the group's std; false is Dr.GRPO. Default true. */
  scaleByStd?: boolean;
}

/** {@link AdvantageOptions} checked, with the estimator named. */
export interface AdvantageSettings {
  estimator: TrainerAdvantageEstimator;
  /** The kernel options the estimator gets besides the batch's arrays. */
  parameters: AdvantageParameters;
  /** Whether the estimator reads the policy's Σπ² and the old log-probs. */
  needsSumPiSquared: boolean;
}

/**
 * Checks a trainer's advantage options; errors name `options.<name>`. The estimator's
 * options go through the kernel's own validation once here, on a one-token batch, so that
 * a key the estimator does not read is refused at construction.
 */
export function advantageSettings(options: AdvantageOptions): AdvantageSettings {
  const name = options.advantageEstimator ?? 'grpo';
  if (typeof name !== 'string') throw typeError('options.advantageEstimator', 'a string', name);
  const missing = UNAVAILABLE_ESTIMATORS[name as KernelAdvantageEstimator];
  if (missing !== undefined) {
    throw typeError('options.advantageEstimator', `an estimator a GRPO step can feed ('${name}' needs ${missing})`, name);
  }
  if (!TRAINER_ADVANTAGE_ESTIMATORS.includes(name)) {
    throw rangeError('options.advantageEstimator', `one of ${TRAINER_ADVANTAGE_ESTIMATORS.map((n) => `'${n}'`).join(', ')}`, name);
  }
  const given = options.advantageParameters === undefined ? {} : options.advantageParameters;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw typeError('options.advantageParameters', 'an object', given);
  }
  for (const key of Object.keys(given)) {
    if (!ADVANTAGE_PARAMETER_KEYS.includes(key)) {
      throw typeError(`options.advantageParameters.${key}`, `no such option (options are ${ADVANTAGE_PARAMETER_KEYS.join(', ')})`, (given as Record<string, unknown>)[key]);
    }
  }
  const parameters: AdvantageParameters = { ...given };
  if (options.scaleByStd !== undefined) {
    if (typeof options.scaleByStd !== 'boolean') throw typeError('options.scaleByStd', 'a boolean', options.scaleByStd);
    if (parameters.normAdvByStdInGrpo !== undefined) {
      throw typeError('options.scaleByStd', 'absent when advantageParameters.normAdvByStdInGrpo is given (they are the same option)', options.scaleByStd);
    }
    parameters.normAdvByStdInGrpo = options.scaleByStd;
  }
  const settings: AdvantageSettings = { estimator: name, parameters, needsSumPiSquared: OPTIMAL_TOKEN_BASELINES.has(name) };
  const one = new Float32Array(1);
  tokenAdvantages(settings, {
    rewards: one,
    mask: Uint8Array.of(1),
    seqOffsets: Int32Array.of(0, 1),
    groupIds: Int32Array.of(0),
    oldLogp: one,
    sumPiSquared: Float32Array.of(1),
  });
  return settings;
}

/**
 * The batch an estimator runs over: one reward per sequence `[B]`, the tokens the
 * advantages are for (`mask`, `[N]`), the sequence boundaries `[B + 1]` and groups (`groupIds`
 * `[B]`, or consecutive groups of `groupSize`; `'reinforce_plus_plus'` reads none). The optimal-token baselines also read the
 * old log-probs and the policy's Σπ² of each token, `[N]` each.
 */
export type AdvantageInputs = {
  rewards: Float32Array;
  mask: Uint8Array;
  seqOffsets: Int32Array;
  oldLogp?: Float32Array;
  sumPiSquared?: Float32Array;
} & ({ groupSize: number } | { groupIds: Int32Array });

/** One advantage per token, `[N]` (0 off the mask), by the settings' estimator (the `advantages` kernel). */
export function tokenAdvantages(settings: AdvantageSettings, inputs: AdvantageInputs): Float32Array {
  const { oldLogp, sumPiSquared, ...grouped } = inputs;
  const { groupSize: _size, groupIds: _ids, ...ungrouped } = grouped as typeof grouped & { groupSize?: number; groupIds?: Int32Array };
  const batch = UNGROUPED.has(settings.estimator) ? ungrouped : grouped;
  if (settings.needsSumPiSquared && (oldLogp === undefined || sumPiSquared === undefined)) {
    throw typeError('sumPiSquared', `the policy's Σπ² of each token for '${settings.estimator}' (Policy.logprobs with withSumPiSquared)`, sumPiSquared);
  }
  return advantages({
    ...batch,
    ...settings.parameters,
    estimator: settings.estimator,
    ...(settings.needsSumPiSquared ? { oldLogp, sumPiSquared } : {}),
  }).advantages;
}
