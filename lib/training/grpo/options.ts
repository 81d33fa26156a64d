/**
 * The options of `GRPOTrainer`: what a caller may set, and the settings the trainer runs
 * with (every default filled in, checked once at construction). The policy-loss and
 * advantage options come from the losses seam (`../losses.ts`).
 */
import { type FilterReport, type TrajectoryFilter, voidTurnFilter } from '../../filters/index.js';
import type { ChatTemplate, TokenBatch, Tokenizer, Trajectory } from '../../trajectory/index.js';
import { checkInteger, checkNumber, checkObject, rangeError, typeError } from '../../check.js';
import type { Environment } from '../environment.js';
import {
  advantageSettings,
  policyLossSettings,
  type AdvantageOptions,
  type AdvantageSettings,
  type PolicyLossOptions,
  type PolicyLossSettings,
} from '../losses.js';
import type { RolloutCorrectionOptions } from '../../kernels/index.js';
import type { Policy } from '../trainable_policy.js';
import type { Episode } from '../rollout.js';
import type { EpisodeFilter } from './filters.js';
import type { GRPOStepMetrics } from './metrics.js';
import { turnCreditSettings, type TurnCreditSettings } from './turn_credit.js';
import type { TurnCreditOptions } from '../../credit/index.js';

/**
 * THOR's step-level option: learning from alternatives at failed tool calls. With
 * `createEnvironment` the trainer samples them; with `agent` they are the attempts the
 * agent recorded at each step (`SelfCorrectingAgent`'s `metadata.attempts`, regenerated
 * from the same context), and `samples` and `maxFailuresPerEpisode` do not apply.
 */
export interface StepLevelOptions {
  /** Continuations sampled at each failure point. Default 4. */
  samples?: number;
  /** Weight of the step-level loss. Default 0.5. */
  coef?: number;
  /** Weight of the episode-level loss when the step level is on. Default 1. */
  episodeCoef?: number;
  /** Failed tool calls per episode to resample from, earliest first. Default 1. */
  maxFailuresPerEpisode?: number;
}

/** What {@link AgentRollouts.collect} is asked for. */
export interface AgentRolloutRequest {
  /** The step being collected for (1-based). */
  step: number;
  /** 0 for the step's first call; dynamic sampling calls again with 1, 2, … */
  attempt: number;
  /** Fresh groups (prompts) to run. */
  groups: number;
  /** Episodes per group. */
  groupSize: number;
}

/**
 * Episodes that an agent runs against a served policy, in place of the trainer's own
 * rollouts through `createEnvironment`. The trajectories are trained on as they are: their
 * token record (`promptTokenIds`, each action's `tokenIds` and `logprobs`,
 * `feedbackTokenIds`), `reward` and `groupId`.
 */
export interface AgentRollouts {
  /**
   * Runs `groups` new groups of `groupSize` episodes each; every trajectory needs a reward,
   * and the members of a group share a `groupId` that no other group of the step uses.
   */
  collect(request: AgentRolloutRequest): Promise<readonly Trajectory[]>;
  /** The served model's tokenizer and chat template, for spans the record lacks (the last turn's response). */
  tokenizer: Tokenizer;
  template?: ChatTemplate;
}

/**
 * DAPO's dynamic sampling (verl's `algorithm.filter_groups`, docs/algo/dapo.md at verl
 * 1dda039b): groups whose rewards are all equal are dropped (a group of one is kept) and
 * fresh groups are sampled, `promptsPerStep` at a time, until `promptsPerStep` groups are
 * kept; the extra ones of the last batch are dropped.
 */
export interface DynamicSamplingOptions {
  /**
   * Most generation batches per step, the first included (verl's `max_num_gen_batches`);
   * when they are spent the step throws. Default 10; Infinity: no limit.
   */
  maxBatches?: number;
}

/** Options of {@link GRPOTrainer}. Defaults follow common GRPO recipes. */
export interface GRPOTrainerOptions<Problem> extends PolicyLossOptions, AdvantageOptions {
  /** The policy to train. */
  policy: Policy;
  /** Makes one environment; the trainer keeps one per concurrent episode. Needed unless `agent` is given. */
  createEnvironment?: () => Environment<Problem>;
  /**
   * Training problems: a list (each step draws `promptsPerStep` of them with the trainer's
   * seeded generator), or a function giving the problems of a step. Needed with `createEnvironment`.
   */
  problems?: readonly Problem[] | ((step: number) => readonly Problem[]);
  /**
   * Episodes from an agent over a served model instead of `createEnvironment` and `problems`
   * (the two are exclusive). The trainer updates `policy`; to learn on-policy, the server
   * must serve that policy's weights (e.g. `tirl serve`'s in-process `RunningServer.policy`).
   * Filters must be the SDK's `TrajectoryFilter`s.
   */
  agent?: AgentRollouts;
  /** Prompts (groups) per step. Default 4. */
  promptsPerStep?: number;
  /** DAPO dynamic sampling: replace groups whose rewards are all equal by fresh ones; absent = off. */
  dynamicSampling?: DynamicSamplingOptions;
  /** Episodes per prompt, G. Default 8. */
  groupSize?: number;
  /** Most actions per episode. Default 4. */
  maxTurns?: number;
  /** Most tokens per action. Default 64. */
  maxTurnTokens?: number;
  /** Most tokens per episode, prompt and feedback included. Default 1024. */
  maxTokens?: number;
  /**
   * Filters removing episodes from the loss, applied in order with the SDK's `applyFilters`:
   * the SDK's `TrajectoryFilter`s, or {@link EpisodeFilter}s over the trainer's episodes.
   * Default `[voidTurnFilter()]` (SimpleTIR, from the SDK); `[]` turns filtering off.
   */
  filters?: readonly (TrajectoryFilter | EpisodeFilter)[];
  /** Passes over each batch, reusing its old log-probs. Default 1. */
  ppoEpochs?: number;
  /** Optimizer steps per epoch: the batch's sequences are shuffled and split this many ways. Default 1. */
  miniBatches?: number;
  /** Sequences per forward/backward pass; gradients accumulate up to the mini-batch. Default: the whole mini-batch. */
  microBatchSize?: number;
  /** The reference policy for the KL; default a frozen copy of `policy` taken before training. */
  reference?: Policy;
  /** Weight of an entropy bonus (token mean over trained tokens). Default 0. */
  entropyCoef?: number;
  /** Clip the gradient's global L2 norm to this. Default 1; Infinity turns clipping off. */
  maxGradNorm?: number;
  /**
   * Old log-probs: 'recompute' scores the batch with the policy before updating (exact
   * PPO ratios); 'behaviour' uses the sampler's. Default 'recompute'.
   */
  oldLogprobs?: 'recompute' | 'behaviour';
  /**
   * Off-policy correction of the rollout engine's log-probs (the sampler's `behaviourLogp`)
   * against the trainer's recomputed ones, through the `rolloutCorrection` kernel: its
   * options less the arrays (e.g. `{ rolloutIs: 'token', rolloutIsThreshold: 2, rolloutRs:
   * 'seq_mean_k3', rolloutRsThreshold: 0.01 }`). Its weights scale each episode token's loss
   * and rejected tokens leave the loss. Absent: no correction, but with 'recompute' the
   * mismatch is still measured (`GRPOStepMetrics.rolloutCorrection`). Needs 'recompute'.
   */
  rolloutCorrection?: RolloutCorrectionSettings;
  /** THOR step-level resampling at failed tool calls; absent = off. */
  stepLevel?: StepLevelOptions;
  /**
   * AlphaApollo's turn-level credit (`turnLevelCredit`, MATH.md): each episode's outcome
   * advantage (from the advantage estimator) is the credit of its turns without a tool call,
   * tool turns get `successReward` (+0.1) or `failureReward` (−0.05) by how the call ran, and
   * turn t of n is discounted by `gamma`^(n−t) (0.99); each action token's advantage is its
   * turn's credit. Absent = off: every action token carries the episode's advantage.
   */
  turnCredit?: Omit<TurnCreditOptions, 'finalReward'>;
  /** Seed of the trainer's generator (problem draws, sampling, shuffles). Default 0. */
  seed?: number;
  /** JSONL file receiving one line of {@link GRPOStepMetrics} per step. */
  logFile?: string;
  /**
   * JSONL file receiving every episode of every step as the SDK's `Trajectory` (readable
   * with `readTrajectories`), filtered ones included, with `metadata.step` and
   * `metadata.filteredBy` (the filter that removed it, or null).
   */
  trajectoryLogFile?: string;
  /** Called with each step's episodes and their keep flags (1 = in the loss), after the filters (not with `agent`: see `onBatch`). */
  onEpisodes?: (episodes: readonly Episode<Problem>[], keep: Uint8Array) => void | Promise<void>;
  /**
   * Called with each step's episodes after the filters: as the SDK's `TokenBatch` (its
   * `trajectories` ready for `writeTrajectories`), the keep flags (1 = in the loss) and
   * the filter report.
   */
  onBatch?: (batch: TokenBatch, keep: Uint8Array, report: FilterReport) => void | Promise<void>;
  /** Called after each step with its metrics. */
  onStep?: (metrics: GRPOStepMetrics) => void | Promise<void>;
  /** Directory of checkpoints; when set, a checkpoint is written every `checkpointEvery` steps and `train` resumes from the latest. */
  checkpointDir?: string;
  /** Steps between checkpoints. Default 1: a killed run loses at most the step in flight. */
  checkpointEvery?: number;
}

/** The `rolloutCorrection` kernel's options a trainer passes through: all but the arrays. */
export type RolloutCorrectionSettings = Omit<RolloutCorrectionOptions, 'logp' | 'rolloutLogp' | 'mask' | 'seqOffsets' | 'out'>;

/** Options with every default filled in; checked once, at construction. */
export type Settings<Problem> = Omit<GRPOTrainerOptions<Problem>, 'turnCredit'> & { turnCredit?: TurnCreditSettings } &
  Required<
    Pick<
      GRPOTrainerOptions<Problem>,
      | 'promptsPerStep' | 'groupSize' | 'maxTurns' | 'maxTurnTokens' | 'maxTokens' | 'filters'
      | 'ppoEpochs' | 'miniBatches' | 'entropyCoef' | 'maxGradNorm' | 'oldLogprobs' | 'seed' | 'checkpointEvery'
    >
  > & {
    stepLevel?: Required<StepLevelOptions>;
    dynamicSampling?: Required<DynamicSamplingOptions>;
    /** The policy loss and the advantage estimator (the losses seam). */
    loss: PolicyLossSettings;
    advantage: AdvantageSettings;
  };

/** Fills in the defaults and checks every option; errors name `options.<name>`. */
export function settings<Problem>(options: GRPOTrainerOptions<Problem>): Settings<Problem> {
  checkObject('options', options);
  const max = Number.MAX_SAFE_INTEGER;
  const integer = (name: keyof GRPOTrainerOptions<Problem>, fallback: number) =>
    checkInteger(`options.${name}`, options[name], fallback, 1, max);
  const loss = policyLossSettings(options);
  const maxGradNorm = options.maxGradNorm ?? 1;
  if (typeof maxGradNorm !== 'number' || !(maxGradNorm > 0)) {
    throw rangeError('options.maxGradNorm', 'a number > 0 (Infinity: no clipping)', maxGradNorm);
  }
  if (options.agent !== undefined) {
    const agent = checkObject('options.agent', options.agent);
    if (typeof agent.collect !== 'function') throw typeError('options.agent.collect', 'a function', agent.collect);
    const tokenizer = agent.tokenizer as Tokenizer | undefined;
    if (tokenizer === null || typeof tokenizer !== 'object' || typeof tokenizer.encode !== 'function') throw typeError('options.agent.tokenizer', 'a Tokenizer', tokenizer);
    if (options.createEnvironment !== undefined || options.problems !== undefined) {
      throw rangeError('options', 'either agent, or createEnvironment and problems', Object.keys(options).filter((key) => ['agent', 'createEnvironment', 'problems'].includes(key)));
    }
    for (const [i, filter] of (options.filters ?? []).entries()) {
      if (!('flag' in filter)) throw typeError(`options.filters[${i}]`, "an SDK TrajectoryFilter (agent episodes are trajectories)", filter);
    }
  } else {
    if (typeof options.createEnvironment !== 'function') throw typeError('options.createEnvironment', 'a function (or options.agent)', options.createEnvironment);
    if (typeof options.problems !== 'function' && (!Array.isArray(options.problems) || options.problems.length === 0)) {
      throw typeError('options.problems', 'a non-empty array or a function', options.problems);
    }
  }
  let dynamicSampling: Required<DynamicSamplingOptions> | undefined;
  if (options.dynamicSampling !== undefined) {
    checkObject('options.dynamicSampling', options.dynamicSampling);
    const maxBatches = options.dynamicSampling.maxBatches ?? 10;
    if (maxBatches !== Infinity) checkInteger('options.dynamicSampling.maxBatches', maxBatches, 10, 1, max);
    dynamicSampling = { maxBatches };
  }
  let stepLevel: Required<StepLevelOptions> | undefined;
  if (options.stepLevel !== undefined) {
    checkObject('options.stepLevel', options.stepLevel);
    stepLevel = {
      samples: checkInteger('options.stepLevel.samples', options.stepLevel.samples, 4, 1, max),
      coef: checkNumber('options.stepLevel.coef', options.stepLevel.coef, 0.5, 0, Infinity),
      episodeCoef: checkNumber('options.stepLevel.episodeCoef', options.stepLevel.episodeCoef, 1, 0, Infinity),
      maxFailuresPerEpisode: checkInteger('options.stepLevel.maxFailuresPerEpisode', options.stepLevel.maxFailuresPerEpisode, 1, 1, max),
    };
  }
  if (options.rolloutCorrection !== undefined) {
    checkObject('options.rolloutCorrection', options.rolloutCorrection);
    if ((options.oldLogprobs ?? 'recompute') !== 'recompute') {
      throw rangeError('options.oldLogprobs', "'recompute' with rolloutCorrection (the trainer's log-probs are what the rollout's are corrected to)", options.oldLogprobs);
    }
  }
  return {
    ...options,
    promptsPerStep: integer('promptsPerStep', 4),
    groupSize: integer('groupSize', 8),
    maxTurns: integer('maxTurns', 4),
    maxTurnTokens: integer('maxTurnTokens', 64),
    maxTokens: integer('maxTokens', 1024),
    filters: options.filters ?? [voidTurnFilter()],
    ppoEpochs: integer('ppoEpochs', 1),
    miniBatches: integer('miniBatches', 1),
    ...(options.microBatchSize !== undefined ? { microBatchSize: integer('microBatchSize', 1) } : {}),
    entropyCoef: checkNumber('options.entropyCoef', options.entropyCoef, 0, -Infinity, Infinity),
    maxGradNorm,
    oldLogprobs: options.oldLogprobs ?? 'recompute',
    seed: checkInteger('options.seed', options.seed, 0, 0, 2 ** 32 - 1),
    checkpointEvery: integer('checkpointEvery', 1),
    stepLevel,
    dynamicSampling,
    turnCredit: options.turnCredit === undefined ? undefined : turnCreditSettings(options.turnCredit),
    loss,
    advantage: advantageSettings(options),
  };
}

