/**
 * GRPO for tool-using agents: G episodes per prompt through an environment with tools,
 * group-normalised advantages, filters (void turns by default), feedback masks, and
 * micro-batched PPO updates whose gradient equals that of one big batch.
 */
import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

import { feedbackMask, groupAdvantages, ppoLoss, Role } from '../kernels/index.js';
import { annotateFiltered, applyFilters, type FilterReport, type TrajectoryFilter, voidTurnFilter } from '../filters/index.js';
import type { TokenBatch } from '../trajectory/index.js';
import { latestCheckpoint, writeCheckpoint } from './checkpoint.js';
import type { Environment } from './environment.js';
import type { Policy, PolicyBatch, PolicyLogprobs, PolicyOutputGradient } from './trainable_policy.js';
import { SeededRandom } from './random.js';
import { type Episode, packSequences, replayStep, rollout, toTokenBatch } from './rollout.js';
import { checkInteger, checkNumber, checkObject, rangeError, typeError } from '../check.js';

type PpoOptions = Parameters<typeof ppoLoss>[0];

/**
 * A filter over the trainer's own episodes, for rules the SDK's `TrajectoryFilter`s cannot
 * see (e.g. an environment's own action markup). Filters mask; the episodes stay in the
 * metrics and logs.
 */
export interface EpisodeFilter {
  /** Key of this filter's counts in {@link GRPOStepMetrics.filtered}. */
  name: string;
  /** Whether to remove `episode`; `group` holds all episodes of its prompt, itself included. */
  removes(episode: Episode<unknown>, group: readonly Episode<unknown>[]): boolean;
}

/** THOR's step-level option: learning from alternatives at failed tool calls. */
export interface StepLevelOptions {
  /** Continuations sampled at each failure point. Default 4. */
  samples?: number;
  /** Weight of the step-level loss added to the episode loss. Default 0.5. */
  coef?: number;
  /** Failed tool calls per episode to resample from, earliest first. Default 1. */
  maxFailuresPerEpisode?: number;
}

/** Options of {@link GRPOTrainer}. Defaults follow common GRPO recipes. */
export interface GRPOTrainerOptions<Problem> {
  /** The policy to train. */
  policy: Policy;
  /** Makes one environment; the trainer keeps one per concurrent episode. */
  createEnvironment: () => Environment<Problem>;
  /**
   * Training problems: a list (each step draws `promptsPerStep` of them with the trainer's
   * seeded generator), or a function giving the problems of a step.
   */
  problems: readonly Problem[] | ((step: number) => readonly Problem[]);
  /** Prompts per step when `problems` is a list. Default 4. */
  promptsPerStep?: number;
  /** Episodes per prompt, G. Default 8. */
  groupSize?: number;
  /** Most actions per episode. Default 4. */
  maxTurns?: number;
  /** Most tokens per action. Default 64. */
  maxTurnTokens?: number;
  /** Most tokens per episode, prompt and feedback included. Default 1024. */
  maxTokens?: number;
  /** Divide advantages by the group's std (GRPO); false is Dr.GRPO. Default true. */
  scaleByStd?: boolean;
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
  /** ppoLoss settings (see the kernel): clipLow 0.2, clipHigh = clipLow, dualClip off, aggregation 'token-mean'. */
  clipLow?: number;
  clipHigh?: number;
  dualClip?: number;
  aggregation?: NonNullable<PpoOptions['aggregation']>;
  /** Weight of the KL to the frozen reference policy; 0 = no reference. Default 0. */
  klCoef?: number;
  /** KL estimator. Default 'k3'. */
  klEstimator?: NonNullable<PpoOptions['klEstimator']>;
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
  /** THOR step-level resampling at failed tool calls; absent = off. */
  stepLevel?: StepLevelOptions;
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
  /** Called with each step's episodes and their keep flags (1 = in the loss), after the filters. */
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

/** What one filter did in a step. */
export interface FilterCount {
  /** Episodes the filter flagged, whether or not an earlier filter had removed them. */
  trajectories: number;
  /** Episodes it removed that no earlier filter had. */
  removed: number;
  /** Action tokens of the episodes it removed. */
  tokens: number;
}

/** Metrics of one GRPO step (one batch of rollouts and its updates). */
export interface GRPOStepMetrics {
  /** Steps completed, this one included. */
  step: number;
  /** Mean episode reward. */
  reward: number;
  /** Fraction of episodes the environment reported solved. */
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
  /** THOR: failure points resampled, continuations sampled, and the fraction whose tool call ran. */
  stepLevel?: { failures: number; samples: number; successRate: number };
  rolloutSeconds: number;
  updateSeconds: number;
  seconds: number;
  /** Batch tokens per second of the whole step. */
  tokensPerSecond: number;
}

/** A sequence of the update batch, with what the loss needs of it. */
interface TrainingSequence {
  tokens: Int32Array;
  roles: Uint8Array;
  behaviourLogp: Float32Array;
  advantage: number;
  /** Episode sequences are kept or filtered; step-level ones carry the THOR loss. */
  kind: 'episode' | 'step';
  keep: boolean;
}

/** Flat arrays of the whole update batch. */
interface UpdateBatch {
  sequences: TrainingSequence[];
  batch: PolicyBatch;
  mask: Uint8Array;
  /** Mask of episode tokens and of step-level tokens: the two losses. */
  episodeMask: Uint8Array;
  stepMask: Uint8Array;
  advantages: Float32Array;
  oldLogp: Float32Array;
  refLogp?: Float32Array;
}

const CHECKPOINT_FORMAT = 'tirl-grpo-checkpoint';

/** Options with every default filled in; checked once, at construction. */
type Settings<Problem> = GRPOTrainerOptions<Problem> &
  Required<
    Pick<
      GRPOTrainerOptions<Problem>,
      | 'promptsPerStep' | 'groupSize' | 'maxTurns' | 'maxTurnTokens' | 'maxTokens' | 'scaleByStd' | 'filters'
      | 'ppoEpochs' | 'miniBatches' | 'clipLow' | 'clipHigh' | 'aggregation' | 'klCoef' | 'klEstimator'
      | 'entropyCoef' | 'maxGradNorm' | 'oldLogprobs' | 'seed' | 'checkpointEvery'
    >
  > & { stepLevel?: Required<StepLevelOptions> };

function settings<Problem>(options: GRPOTrainerOptions<Problem>): Settings<Problem> {
  checkObject('options', options);
  const max = Number.MAX_SAFE_INTEGER;
  const integer = (name: keyof GRPOTrainerOptions<Problem>, fallback: number) =>
    checkInteger(`options.${name}`, options[name], fallback, 1, max);
  const clipLow = checkNumber('options.clipLow', options.clipLow, 0.2, 0, 1);
  if (clipLow === 1) throw rangeError('options.clipLow', 'a number in [0, 1)', clipLow);
  const maxGradNorm = options.maxGradNorm ?? 1;
  if (typeof maxGradNorm !== 'number' || !(maxGradNorm > 0)) {
    throw rangeError('options.maxGradNorm', 'a number > 0 (Infinity: no clipping)', maxGradNorm);
  }
  if (typeof options.problems !== 'function' && (!Array.isArray(options.problems) || options.problems.length === 0)) {
    throw typeError('options.problems', 'a non-empty array or a function', options.problems);
  }
  let stepLevel: Required<StepLevelOptions> | undefined;
  if (options.stepLevel !== undefined) {
    checkObject('options.stepLevel', options.stepLevel);
    stepLevel = {
      samples: checkInteger('options.stepLevel.samples', options.stepLevel.samples, 4, 1, max),
      coef: checkNumber('options.stepLevel.coef', options.stepLevel.coef, 0.5, 0, Infinity),
      maxFailuresPerEpisode: checkInteger('options.stepLevel.maxFailuresPerEpisode', options.stepLevel.maxFailuresPerEpisode, 1, 1, max),
    };
  }
  return {
    ...options,
    promptsPerStep: integer('promptsPerStep', 4),
    groupSize: integer('groupSize', 8),
    maxTurns: integer('maxTurns', 4),
    maxTurnTokens: integer('maxTurnTokens', 64),
    maxTokens: integer('maxTokens', 1024),
    scaleByStd: options.scaleByStd ?? true,
    filters: options.filters ?? [voidTurnFilter()],
    ppoEpochs: integer('ppoEpochs', 1),
    miniBatches: integer('miniBatches', 1),
    ...(options.microBatchSize !== undefined ? { microBatchSize: integer('microBatchSize', 1) } : {}),
    clipLow,
    clipHigh: checkNumber('options.clipHigh', options.clipHigh, clipLow, 0, Infinity),
    aggregation: options.aggregation ?? 'token-mean',
    klCoef: checkNumber('options.klCoef', options.klCoef, 0, 0, Infinity),
    klEstimator: options.klEstimator ?? 'k3',
    entropyCoef: checkNumber('options.entropyCoef', options.entropyCoef, 0, -Infinity, Infinity),
    maxGradNorm,
    oldLogprobs: options.oldLogprobs ?? 'recompute',
    seed: checkInteger('options.seed', options.seed, 0, 0, 2 ** 32 - 1),
    checkpointEvery: integer('checkpointEvery', 1),
    stepLevel,
  };
}

/**
 * The GRPO trainer. `await trainer.train(steps)` runs until `steps` steps are done in
 * total, resuming from `checkpointDir` when it holds a checkpoint.
 */
export class GRPOTrainer<Problem> {
  /** Steps completed. */
  stepCount = 0;
  /** Metrics of every completed step. */
  readonly metrics: GRPOStepMetrics[] = [];
  readonly random: SeededRandom;
  private readonly options: Settings<Problem>;
  private readonly environments: Environment<Problem>[] = [];
  private reference: Policy | undefined;
  private resumed = false;

  /** @throws TypeError or RangeError naming an option of the wrong type or out of range. */
  constructor(options: GRPOTrainerOptions<Problem>) {
    this.options = settings(options);
    this.random = new SeededRandom(this.options.seed);
    this.reference = options.reference;
  }

  /** Runs steps until `steps` are done in total; returns the metrics of the steps it ran. */
  async train(steps: number): Promise<GRPOStepMetrics[]> {
    if (!this.resumed && this.options.checkpointDir) {
      this.resumed = true;
      const checkpoint = await latestCheckpoint(this.options.checkpointDir);
      if (checkpoint) await this.load(checkpoint);
    }
    const ran: GRPOStepMetrics[] = [];
    while (this.stepCount < steps) {
      ran.push(await this.step());
      if (this.options.checkpointDir && (this.stepCount % this.options.checkpointEvery === 0 || this.stepCount === steps)) {
        await writeCheckpoint(this.options.checkpointDir, this.stepCount, (dir) => this.save(dir));
      }
    }
    return ran;
  }

  /** One step: rollouts, advantages, filters, masks, PPO updates, metrics. */
  async step(): Promise<GRPOStepMetrics> {
    const started = performance.now();
    const options = this.options;
    const groupSize = options.groupSize;
    const policy = options.policy;
    if (options.klCoef > 0 && !this.reference) this.reference = await policy.frozenCopy();

    const prompts = this.nextProblems();
    const problems = prompts.flatMap((p) => Array<Problem>(groupSize).fill(p));
    const groups = problems.map((_, i) => Math.floor(i / groupSize));
    const environments = this.environmentsFor(problems.length);
    const episodes = await rollout(policy, environments, problems, groups, options, this.random);
    const advantages = groupAdvantages({
      rewards: Float32Array.from(episodes, (e) => e.reward),
      groupSize,
      scaleByStd: options.scaleByStd,
    });

    const batch = toTokenBatch(episodes, `step${this.stepCount + 1}`);
    const { keep, report } = applyFilters(batch, options.filters.map((f) => asTrajectoryFilter(f, episodes, groupSize)));
    const filtered: Record<string, FilterCount> = {};
    for (const f of report.filters) {
      filtered[f.name] = { trajectories: f.flaggedTrajectories, removed: f.removedTrajectories, tokens: f.removedTokens };
    }
    await options.onEpisodes?.(episodes, keep);
    await options.onBatch?.(batch, keep, report);
    if (options.trajectoryLogFile) await this.logTrajectories(options.trajectoryLogFile, batch, report);
    const sequences: TrainingSequence[] = episodes.map((e, i) => ({
      tokens: e.tokens,
      roles: e.roles,
      behaviourLogp: e.behaviourLogp,
      advantage: advantages[i],
      kind: 'episode',
      keep: keep[i] === 1,
    }));
    let stepLevel: GRPOStepMetrics['stepLevel'];
    if (options.stepLevel) {
      const step = await this.stepLevelSequences(episodes, options.stepLevel);
      sequences.push(...step.sequences);
      stepLevel = step.metrics;
    }
    const rolloutSeconds = (performance.now() - started) / 1000;

    const update = await this.prepareUpdate(sequences);
    const updateStats = await this.update(update);
    const seconds = (performance.now() - started) / 1000;

    const metrics: GRPOStepMetrics = {
      step: this.stepCount + 1,
      reward: mean(episodes.map((e) => e.reward)),
      successRate: mean(episodes.map((e) => (e.success ? 1 : 0))),
      episodes: episodes.length,
      filtered,
      keptTrajectories: sum(keep),
      tokens: update.batch.tokens.length,
      trainedTokens: sum(update.mask),
      ...updateStats,
      ...(stepLevel ? { stepLevel } : {}),
      rolloutSeconds,
      updateSeconds: seconds - rolloutSeconds,
      seconds,
      tokensPerSecond: update.batch.tokens.length / seconds,
    };
    this.stepCount += 1;
    this.metrics.push(metrics);
    if (options.logFile) {
      await mkdir(dirname(options.logFile), { recursive: true });
      await appendFile(options.logFile, JSON.stringify(metrics) + '\n');
    }
    await options.onStep?.(metrics);
    return metrics;
  }

  /** Writes the trainer's state (policy, reference, step, generator, metrics) into `dir`. */
  async save(dir: string): Promise<void> {
    await mkdir(join(dir, 'policy'), { recursive: true });
    await this.options.policy.saveState(join(dir, 'policy'));
    if (this.reference && !this.options.reference) {
      await mkdir(join(dir, 'reference'), { recursive: true });
      await this.reference.saveState(join(dir, 'reference'));
    }
    const state = { format: CHECKPOINT_FORMAT, step: this.stepCount, randomState: this.random.state, metrics: this.metrics };
    await writeFile(join(dir, 'trainer.json'), JSON.stringify(state));
  }

  /**
   * Restores what {@link GRPOTrainer.save} wrote. The JSONL log is rewritten to the restored
   * steps, so a line of a step lost in flight does not stay behind.
   */
  async load(dir: string): Promise<void> {
    const state = JSON.parse(await readFile(join(dir, 'trainer.json'), 'utf8')) as {
      format: string;
      step: number;
      randomState: number;
      metrics: GRPOStepMetrics[];
    };
    if (state.format !== CHECKPOINT_FORMAT) throw new Error(`GRPOTrainer: ${dir} is not a GRPO checkpoint`);
    await this.options.policy.loadState(join(dir, 'policy'));
    if (this.options.klCoef > 0 && !this.options.reference) {
      this.reference ??= await this.options.policy.frozenCopy();
      await this.reference.loadState(join(dir, 'reference'));
    }
    this.stepCount = state.step;
    this.random.state = state.randomState;
    this.metrics.splice(0, this.metrics.length, ...state.metrics);
    if (this.options.logFile) {
      await mkdir(dirname(this.options.logFile), { recursive: true });
      await writeFile(this.options.logFile, state.metrics.map((m) => JSON.stringify(m) + '\n').join(''));
    }
    if (this.options.trajectoryLogFile) await this.truncateTrajectoryLog(this.options.trajectoryLogFile, state.step);
  }

  /** Appends the step's episodes to the trajectory log, each marked with its step and filter. */
  private async logTrajectories(file: string, batch: TokenBatch, report: FilterReport): Promise<void> {
    const step = this.stepCount + 1;
    const lines = annotateFiltered(batch, report).map((t) => JSON.stringify({ ...t, metadata: { ...t.metadata, step } }) + '\n');
    await mkdir(dirname(file), { recursive: true });
    await appendFile(file, lines.join(''));
  }

  /** Drops the trajectory log's lines of steps after `step` (those of a step lost in flight). */
  private async truncateTrajectoryLog(file: string, step: number): Promise<void> {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    const kept = text.split('\n').filter((line) => {
      if (!line.endsWith('}')) return false;
      const lineStep = (JSON.parse(line) as { metadata?: { step?: number } }).metadata?.step;
      return lineStep !== undefined && lineStep <= step;
    });
    await writeFile(file, kept.map((line) => line + '\n').join(''));
  }

  /** Closes the environments (and the reference policy the trainer made). */
  async close(): Promise<void> {
    await Promise.all(this.environments.map((e) => e.close?.()));
    this.environments.length = 0;
    if (!this.options.reference) this.reference?.dispose?.();
  }

  private nextProblems(): readonly Problem[] {
    const source = this.options.problems;
    if (typeof source === 'function') return source(this.stepCount);
    return Array.from({ length: this.options.promptsPerStep }, () => source[this.random.below(source.length)]);
  }

  private environmentsFor(count: number): Environment<Problem>[] {
    while (this.environments.length < count) this.environments.push(this.options.createEnvironment());
    return this.environments.slice(0, count);
  }

  /**
   * THOR: at each episode's earliest failed tool calls, samples continuations from the
   * failure point, runs them (replaying the episode's earlier actions), rewards them 1 when
   * their tool call succeeds, and compares them with the failed action as one group. Their
   * shared prefix becomes prompt, so only the continuations are trained on.
   */
  private async stepLevelSequences(episodes: Episode<Problem>[], stepLevel: Required<StepLevelOptions>) {
    const samples = stepLevel.samples;
    const failures = episodes.flatMap((episode) =>
      episode.turns
        .map((turn, index) => ({ episode, turn, index }))
        .filter(({ turn }) => turn.tool !== undefined && turn.tool.status !== 'success')
        .slice(0, stepLevel.maxFailuresPerEpisode),
    );
    const contexts = failures.flatMap(({ episode, turn }) =>
      Array<Int32Array>(samples).fill(episode.tokens.subarray(0, turn.actionStart)),
    );
    const continuations = contexts.length
      ? await this.options.policy.sampleTurns(contexts, {
          maxTokens: this.options.maxTurnTokens,
          random: () => this.random.next(),
        })
      : [];
    const replayer = this.options.createEnvironment();
    const rewards: number[] = [];
    const groupIds: number[] = [];
    const sequences: TrainingSequence[] = [];
    try {
      for (const [f, { episode, turn, index }] of failures.entries()) {
        const earlier = episode.turns.slice(0, index).map((t) => t.action);
        const prefixLength = turn.actionStart;
        const alternatives = [
          {
            tokens: episode.tokens.subarray(prefixLength, turn.actionEnd),
            logprobs: episode.behaviourLogp.subarray(prefixLength, turn.actionEnd),
            reward: 0,
          },
        ];
        for (const continuation of continuations.slice(f * samples, (f + 1) * samples)) {
          const result = await replayStep(replayer, episode.problem, earlier, continuation.text);
          alternatives.push({
            tokens: continuation.tokens,
            logprobs: continuation.logprobs,
            reward: result.tool?.status === 'success' ? 1 : 0,
          });
        }
        for (const alternative of alternatives) {
          const length = prefixLength + alternative.tokens.length;
          const tokens = new Int32Array(length);
          tokens.set(episode.tokens.subarray(0, prefixLength));
          tokens.set(alternative.tokens, prefixLength);
          const roles = new Uint8Array(length).fill(Role.prompt);
          roles.fill(Role.action, prefixLength);
          const behaviourLogp = new Float32Array(length);
          behaviourLogp.set(alternative.logprobs, prefixLength);
          sequences.push({ tokens, roles, behaviourLogp, advantage: 0, kind: 'step', keep: true });
          rewards.push(alternative.reward);
          groupIds.push(f);
        }
      }
    } finally {
      await replayer.close?.();
    }
    if (sequences.length > 0) {
      const advantages = groupAdvantages({
        rewards: Float32Array.from(rewards),
        groupIds: Int32Array.from(groupIds),
        scaleByStd: this.options.scaleByStd,
      });
      sequences.forEach((s, i) => (s.advantage = advantages[i]));
    }
    const resampledRewards = rewards.filter((_, i) => i % (samples + 1) !== 0);
    return {
      sequences,
      metrics: { failures: failures.length, samples: resampledRewards.length, successRate: mean(resampledRewards) },
    };
  }

  /** Flattens the sequences, builds the masks, and scores old (and reference) log-probs. */
  private async prepareUpdate(sequences: TrainingSequence[]): Promise<UpdateBatch> {
    const batch = packSequences(sequences.map((s) => s.tokens));
    const n = batch.tokens.length;
    const roles = new Uint8Array(n);
    const behaviourLogp = new Float32Array(n);
    const advantages = new Float32Array(n);
    sequences.forEach((s, i) => {
      const start = batch.seqOffsets[i];
      roles.set(s.roles, start);
      behaviourLogp.set(s.behaviourLogp, start);
      advantages.fill(s.advantage, start, batch.seqOffsets[i + 1]);
    });
    const { mask } = feedbackMask({
      roles,
      seqOffsets: batch.seqOffsets,
      keep: Uint8Array.from(sequences, (s) => (s.keep ? 1 : 0)),
    });
    const episodeMask = new Uint8Array(n);
    const stepMask = new Uint8Array(n);
    sequences.forEach((s, i) => {
      const target = s.kind === 'episode' ? episodeMask : stepMask;
      for (let t = batch.seqOffsets[i]; t < batch.seqOffsets[i + 1]; t++) target[t] = mask[t];
    });
    const oldLogp =
      this.options.oldLogprobs === 'recompute'
        ? await this.score(this.options.policy, batch)
        : behaviourLogp;
    const refLogp = this.reference && this.options.klCoef > 0 ? await this.score(this.reference, batch) : undefined;
    return { sequences, batch, mask, episodeMask, stepMask, advantages, oldLogp, ...(refLogp ? { refLogp } : {}) };
  }

  /** Log-probs of the whole batch, scored micro-batch by micro-batch. */
  private async score(policy: Policy, batch: PolicyBatch): Promise<Float32Array> {
    const out = new Float32Array(batch.tokens.length);
    const indices = Array.from({ length: batch.seqOffsets.length - 1 }, (_, i) => i);
    for (const micro of chunk(indices, this.options.microBatchSize ?? indices.length)) {
      const sub = gatherSequences(batch, micro);
      const { logp } = await policy.logprobs(sub.batch);
      scatter(out, logp, sub.positions);
    }
    return out;
  }

  /** PPO epochs over mini-batches of micro-batches, each optimizer step with its global normalisers. */
  private async update(update: UpdateBatch) {
    const o = this.options;
    const count = update.sequences.length;
    const stats = new UpdateStats();
    const miniBatches = Math.min(o.miniBatches, count);
    for (let epoch = 0; epoch < o.ppoEpochs; epoch++) {
      const order = miniBatches > 1 ? this.random.shuffled(range(count)) : range(count);
      for (const mini of split(order, miniBatches)) {
        const normalizers = this.normalizers(update, mini);
        // Nothing to learn from (e.g. every episode filtered): no optimizer step, so that
        // momentum alone does not move the policy.
        if (normalizers.episodeTokens + normalizers.stepTokens === 0) continue;
        for (const micro of chunk(mini, o.microBatchSize ?? mini.length)) {
          const sub = gatherSequences(update.batch, micro);
          await o.policy.accumulateGradients(
            sub.batch,
            (outputs) => this.microBatchLoss(update, sub, outputs, normalizers, stats, epoch === 0),
            { withEntropy: true },
          );
        }
        const { gradNorm } = await o.policy.applyGradients(
          o.maxGradNorm === Infinity ? {} : { maxGradNorm: o.maxGradNorm },
        );
        stats.optimizerStep(gradNorm);
      }
    }
    return stats.summary();
  }

  /**
   * The loss of one micro-batch and its gradient w.r.t. the policy outputs: the episode
   * PPO loss plus, weighted, the THOR step-level loss (each over its own tokens, with the
   * normalisers of the whole optimizer step), minus the entropy bonus.
   */
  private microBatchLoss(
    update: UpdateBatch,
    sub: { batch: PolicyBatch; positions: Int32Array },
    outputs: PolicyLogprobs,
    normalizers: ReturnType<GRPOTrainer<Problem>['normalizers']>,
    stats: UpdateStats,
    measureEntropy: boolean,
  ): PolicyOutputGradient {
    const o = this.options;
    const take = <T extends Float32Array | Uint8Array>(source: T) => gatherValues(source, sub.positions);
    const episodeMask = take(update.episodeMask);
    const common = {
      logp: outputs.logp,
      oldLogp: take(update.oldLogp),
      advantages: take(update.advantages),
      seqOffsets: sub.batch.seqOffsets,
      clipLow: o.clipLow,
      clipHigh: o.clipHigh,
      ...(update.refLogp ? { refLogp: take(update.refLogp), klCoef: o.klCoef, klEstimator: o.klEstimator } : {}),
    };
    const gradLogp = new Float32Array(sub.batch.tokens.length);
    if (normalizers.episodeTokens > 0) {
      const result = ppoLoss({
        ...common,
        mask: episodeMask,
        aggregation: o.aggregation,
        ...(o.dualClip !== undefined ? { dualClip: o.dualClip } : {}),
        tokenNormalizer: normalizers.episodeTokens,
        seqNormalizer: normalizers.episodeSequences,
        horizon: normalizers.horizon,
      });
      gradLogp.set(result.grad);
      stats.episodeLoss(result, sum(episodeMask));
    }
    if (normalizers.stepTokens > 0) {
      const coef = o.stepLevel!.coef;
      const result = ppoLoss({ ...common, mask: take(update.stepMask), aggregation: 'token-mean', tokenNormalizer: normalizers.stepTokens });
      for (let t = 0; t < gradLogp.length; t++) gradLogp[t] += coef * result.grad[t];
      stats.stepLoss(result, coef);
    }
    if (!outputs.entropy) return { gradLogp };
    if (measureEntropy) stats.entropy(outputs.entropy, episodeMask);
    const entropyCoef = o.entropyCoef;
    if (entropyCoef === 0 || normalizers.episodeTokens === 0) return { gradLogp };
    const gradEntropy = Float32Array.from(episodeMask, (m) => (-entropyCoef * m) / normalizers.episodeTokens);
    return { gradLogp, gradEntropy };
  }

  /** The global normalisers of one optimizer step: counts over its whole mini-batch. */
  private normalizers(update: UpdateBatch, mini: readonly number[]) {
    let episodeTokens = 0;
    let episodeSequences = 0;
    let stepTokens = 0;
    let horizon = 0;
    for (const i of mini) {
      const start = update.batch.seqOffsets[i];
      const end = update.batch.seqOffsets[i + 1];
      let count = 0;
      for (let t = start; t < end; t++) count += update.mask[t];
      if (update.sequences[i].kind === 'episode') {
        episodeTokens += count;
        if (count > 0) episodeSequences += 1;
        horizon = Math.max(horizon, end - start);
      } else {
        stepTokens += count;
      }
    }
    return { episodeTokens, episodeSequences: Math.max(episodeSequences, 1), stepTokens, horizon: Math.max(horizon, 1) };
  }
}

/** An episode filter as the SDK's `applyFilters` takes it: flags over the batch of `episodes`. */
function asTrajectoryFilter(
  filter: TrajectoryFilter | EpisodeFilter,
  episodes: readonly Episode<unknown>[],
  groupSize: number,
): TrajectoryFilter {
  if ('flag' in filter) return filter;
  return {
    name: filter.name,
    flag: () =>
      Uint8Array.from(episodes, (episode, i) => {
        const start = Math.floor(i / groupSize) * groupSize;
        return filter.removes(episode, episodes.slice(start, start + groupSize)) ? 1 : 0;
      }),
  };
}

/** Sums of the update's statistics, reduced to {@link GRPOStepMetrics} fields. */
class UpdateStats {
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

  /** Adds a micro-batch's episode loss (already normalised globally, so losses add up). */
  episodeLoss(result: ReturnType<typeof ppoLoss>, tokens: number): void {
    this.loss += result.loss;
    this.pgLoss += result.pgLoss;
    this.klLoss += result.klLoss ?? 0;
    this.clipFraction += result.clipFraction * tokens;
    this.clipFractionLower += result.clipFractionLower * tokens;
    this.approxKl += result.approxKl * tokens;
    this.tokens += tokens;
    this.nonFinite += result.nonFinite;
  }

  stepLoss(result: ReturnType<typeof ppoLoss>, coef: number): void {
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

/** A sub-batch of whole sequences and where its tokens sit in the full batch. */
function gatherSequences(batch: PolicyBatch, indices: readonly number[]) {
  const sequences = indices.map((i) => batch.tokens.subarray(batch.seqOffsets[i], batch.seqOffsets[i + 1]));
  const sub = packSequences(sequences);
  const positions = new Int32Array(sub.tokens.length);
  indices.forEach((i, k) => {
    for (let t = 0; t < sequences[k].length; t++) positions[sub.seqOffsets[k] + t] = batch.seqOffsets[i] + t;
  });
  return { batch: sub, positions };
}

function gatherValues<T extends Float32Array | Uint8Array>(source: T, positions: Int32Array): T {
  const out = new (source.constructor as new (n: number) => T)(positions.length);
  for (let t = 0; t < positions.length; t++) out[t] = source[positions[t]];
  return out;
}

function scatter(target: Float32Array, values: Float32Array, positions: Int32Array): void {
  for (let t = 0; t < positions.length; t++) target[positions[t]] = values[t];
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

/** Consecutive pieces of at most `size` items. */
function chunk<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += Math.max(1, size)) out.push(items.slice(i, i + Math.max(1, size)));
  return out;
}

/** `parts` consecutive pieces of near-equal size. */
function split<T>(items: readonly T[], parts: number): T[][] {
  return range(parts).map((p) => items.slice(Math.floor((p * items.length) / parts), Math.floor(((p + 1) * items.length) / parts)));
}

function sum(values: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < values.length; i++) total += values[i];
  return total;
}

function mean(values: readonly number[]): number {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}
