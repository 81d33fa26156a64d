/**
 * GRPO for tool-using agents: G episodes per prompt through an environment with tools,
 * group-normalised advantages, filters (void turns by default), feedback masks, and
 * micro-batched PPO updates whose gradient equals that of one big batch. This file is the
 * loop; its options, metrics, update batch, loss call, THOR step level, checkpoint and
 * trajectory log live beside it in `grpo/`.
 */
import { applyFilters, stalenessStats } from '../../filters/index.js';
import { chunk, mean, range, split, sum } from '../batching.js';
import { latestCheckpoint, loadPolicy, writeCheckpoint } from '../checkpoint.js';
import type { Environment } from '../environment.js';
import { appendJsonLine, writeJsonLines } from '../jsonl_log.js';
import { sequenceAdvantages } from '../losses.js';
import { SeededRandom } from '../random.js';
import { rollout, toTokenBatch } from '../rollout.js';
import type { Policy, PolicyBatch } from '../trainable_policy.js';
import { readGRPOCheckpoint, writeGRPOCheckpoint } from './checkpoint.js';
import { asTrajectoryFilter } from './filters.js';
import { microBatchLoss, type MicroBatchLossSettings } from './loss.js';
import { UpdateStats, type FilterCount, type GRPOStepMetrics, type RolloutCorrectionMetrics } from './metrics.js';
import { correctRollout } from './rollout_correction.js';
import { settings, type GRPOTrainerOptions, type Settings } from './options.js';
import { stepLevelSequences } from './step_level.js';
import { appendTrajectoryLog, truncateTrajectoryLog } from './trajectory_log.js';
import { gatherSequences, packUpdate, scatter, stepNormalizers, type TrainingSequence, type UpdateBatch } from './update_batch.js';

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
    if (options.loss.klCoef > 0 && !this.reference) this.reference = await policy.frozenCopy();

    const prompts = this.nextProblems();
    const problems = prompts.flatMap((p) => Array<Problem>(groupSize).fill(p));
    const groups = problems.map((_, i) => Math.floor(i / groupSize));
    const environments = this.environmentsFor(problems.length);
    const episodes = await rollout(policy, environments, problems, groups, options, this.random);
    const advantages = sequenceAdvantages(options.advantage, {
      rewards: Float32Array.from(episodes, (e) => e.reward),
      groupSize,
    });

    const batch = toTokenBatch(episodes, `step${this.stepCount + 1}`);
    const lag = stalenessStats(batch, this.stepCount);
    const { keep, report } = applyFilters(batch, options.filters.map((f) => asTrajectoryFilter(f, episodes, groupSize)));
    const filtered: Record<string, FilterCount> = {};
    for (const f of report.filters) {
      filtered[f.name] = { trajectories: f.flaggedTrajectories, removed: f.removedTrajectories, tokens: f.removedTokens };
    }
    await options.onEpisodes?.(episodes, keep);
    await options.onBatch?.(batch, keep, report);
    if (options.trajectoryLogFile) await appendTrajectoryLog(options.trajectoryLogFile, this.stepCount + 1, batch, report);
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
      const step = await stepLevelSequences(episodes, options.stepLevel, {
        policy,
        createEnvironment: options.createEnvironment,
        maxTurnTokens: options.maxTurnTokens,
        random: this.random,
        advantage: options.advantage,
      });
      sequences.push(...step.sequences);
      stepLevel = step.metrics;
    }
    const rolloutSeconds = (performance.now() - started) / 1000;

    const { update, correction } = await this.prepareUpdate(sequences);
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
      ...(lag.versioned > 0 ? { staleness: { mean: lag.mean, max: lag.max } } : {}),
      ...(correction ? { rolloutCorrection: correction } : {}),
      rolloutSeconds,
      updateSeconds: seconds - rolloutSeconds,
      seconds,
      tokensPerSecond: update.batch.tokens.length / seconds,
    };
    this.stepCount += 1;
    this.metrics.push(metrics);
    if (options.logFile) await appendJsonLine(options.logFile, metrics);
    await options.onStep?.(metrics);
    return metrics;
  }

  /** Writes the trainer's state (policy, reference, step, generator, metrics) into `dir`. */
  async save(dir: string): Promise<void> {
    await writeGRPOCheckpoint(dir, {
      policy: this.options.policy,
      // A reference the caller gave is the caller's to keep; the trainer's own is saved.
      reference: this.options.reference ? undefined : this.reference,
      state: { step: this.stepCount, randomState: this.random.state, metrics: this.metrics },
    });
  }

  /**
   * Restores what {@link GRPOTrainer.save} wrote. The JSONL log is rewritten to the restored
   * steps, so a line of a step lost in flight does not stay behind.
   */
  async load(dir: string): Promise<void> {
    const state = await readGRPOCheckpoint(dir);
    await loadPolicy(dir, 'policy', this.options.policy);
    if (this.options.loss.klCoef > 0 && !this.options.reference) {
      this.reference ??= await this.options.policy.frozenCopy();
      await loadPolicy(dir, 'reference', this.reference);
    }
    this.stepCount = state.step;
    this.random.state = state.randomState;
    this.metrics.splice(0, this.metrics.length, ...state.metrics);
    if (this.options.logFile) await writeJsonLines(this.options.logFile, state.metrics);
    if (this.options.trajectoryLogFile) await truncateTrajectoryLog(this.options.trajectoryLogFile, state.step);
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

  /** Flattens the sequences, builds the masks, and scores old (and reference) log-probs. */
  private async prepareUpdate(sequences: TrainingSequence[]): Promise<{ update: UpdateBatch; correction?: RolloutCorrectionMetrics }> {
    const { behaviourLogp: rolloutLogp, ...packed } = packUpdate(sequences);
    const recompute = this.options.oldLogprobs === 'recompute';
    const oldLogp = recompute ? await this.score(this.options.policy, packed.batch) : rolloutLogp;
    const refLogp = this.reference && this.options.loss.klCoef > 0 ? await this.score(this.reference, packed.batch) : undefined;
    const update: UpdateBatch = { ...packed, oldLogp, rolloutLogp, ...(refLogp ? { refLogp } : {}) };
    return recompute ? { update, correction: correctRollout(update, this.options.rolloutCorrection) } : { update };
  }

  /** Log-probs of the whole batch, scored micro-batch by micro-batch. */
  private async score(policy: Policy, batch: PolicyBatch): Promise<Float32Array> {
    const out = new Float32Array(batch.tokens.length);
    const indices = range(batch.seqOffsets.length - 1);
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
    const lossSettings: MicroBatchLossSettings = {
      loss: o.loss,
      entropyCoef: o.entropyCoef,
      ...(o.stepLevel ? { stepLevelCoef: o.stepLevel.coef } : {}),
    };
    for (let epoch = 0; epoch < o.ppoEpochs; epoch++) {
      const order = miniBatches > 1 ? this.random.shuffled(range(count)) : range(count);
      for (const mini of split(order, miniBatches)) {
        const normalizers = stepNormalizers(update, mini);
        // Nothing to learn from (e.g. every episode filtered): no optimizer step, so that
        // momentum alone does not move the policy.
        if (normalizers.episodeTokens + normalizers.stepTokens === 0) continue;
        for (const micro of chunk(mini, o.microBatchSize ?? mini.length)) {
          const sub = gatherSequences(update.batch, micro);
          await o.policy.accumulateGradients(
            sub.batch,
            (outputs) => microBatchLoss(lossSettings, update, sub, outputs, normalizers, stats, epoch === 0),
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
}
