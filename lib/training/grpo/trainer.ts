/**
 * GRPO for tool-using agents: G episodes per prompt through an environment with tools,
 * advantages by any outcome estimator of the `advantages` kernel (GRPO by default), filters (void turns by default), feedback masks, and
 * micro-batched PPO updates whose gradient equals that of one big batch. This file is the
 * loop; its options, metrics, update batch, loss call, THOR step level, checkpoint and
 * trajectory log live beside it in `grpo/`.
 */
import { applyFilters, stalenessStats } from '../../filters/index.js';
import { checkArray, checkObject, rangeError, typeError } from '../../check.js';
import { packTrajectories, type TokenBatch, type Trajectory } from '../../trajectory/index.js';
import { chunk, mean, range, split, sum } from '../batching.js';
import { latestCheckpoint, loadPolicy, writeCheckpoint } from '../checkpoint.js';
import type { Environment } from '../environment.js';
import { appendJsonLine, writeJsonLines } from '../jsonl_log.js';
import { SeededRandom } from '../random.js';
import { type Episode, rollout, toTokenBatch } from '../rollout.js';
import type { Policy, PolicyBatch } from '../trainable_policy.js';
import { readGRPOCheckpoint, writeGRPOCheckpoint } from './checkpoint.js';
import { asTrajectoryFilter } from './filters.js';
import { microBatchLoss, type MicroBatchLossSettings } from './loss.js';
import { UpdateStats, type FilterCount, type GRPOStepMetrics, type RolloutCorrectionMetrics } from './metrics.js';
import { correctRollout } from './rollout_correction.js';
import { settings, type AgentRollouts, type GRPOTrainerOptions, type Settings } from './options.js';
import { attemptSequences, stepLevelSequences } from './step_level.js';
import { applyTurnCredit } from './turn_credit.js';
import { appendTrajectoryLog, truncateTrajectoryLog } from './trajectory_log.js';
import {
  gatherSequences,
  packUpdate,
  scatter,
  stepNormalizers,
  updateAdvantages,
  type TrainingSequence,
  type UpdateBatch,
} from './update_batch.js';

/** A step's episodes: the SDK's batch of them, and the trainer's own episodes when it ran them. */
interface CollectedEpisodes<Problem> {
  batch: TokenBatch;
  episodes?: Episode<Problem>[];
  dynamicSampling?: NonNullable<GRPOStepMetrics['dynamicSampling']>;
}

/** Whether a group's rewards differ (a group of one counts, as verl keeps it): group-relative advantages need that. */
function hasSignal(rewards: readonly number[]): boolean {
  return rewards.length === 1 || Math.max(...rewards) > Math.min(...rewards);
}

/** verl's guard: the generation batches are spent before enough groups had a signal. */
function tooManyBatches(batches: number, kept: number, target: number): Error {
  return new Error(
    `GRPOTrainer: dynamic sampling ran ${batches} generation batches (options.dynamicSampling.maxBatches) and kept ${kept} of ` +
    `${target} groups with unequal rewards; the problems may be too hard or too easy for the policy`,
  );
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

  /** One step: rollouts (or the agent's episodes), filters, masks, advantages, PPO updates, metrics. */
  async step(): Promise<GRPOStepMetrics> {
    const started = performance.now();
    const options = this.options;
    const groupSize = options.groupSize;
    const policy = options.policy;
    if (options.loss.klCoef > 0 && !this.reference) this.reference = await policy.frozenCopy();

    const collected = options.agent ? await this.agentEpisodes(options.agent) : await this.environmentEpisodes();
    const { batch, episodes } = collected;
    // The sampler's lag, when it reports versions on the trainer's scale (0, 1, ... steps).
    const lag = batch.policyVersions.every((v) => v <= this.stepCount) ? stalenessStats(batch, this.stepCount) : undefined;
    const filters = options.filters.map((f) => asTrajectoryFilter(f, episodes ?? [], groupSize));
    const { keep, report } = applyFilters(batch, filters);
    const filtered: Record<string, FilterCount> = {};
    for (const f of report.filters) {
      filtered[f.name] = { trajectories: f.flaggedTrajectories, removed: f.removedTrajectories, tokens: f.removedTokens };
    }
    if (episodes) await options.onEpisodes?.(episodes, keep);
    await options.onBatch?.(batch, keep, report);
    if (options.trajectoryLogFile) await appendTrajectoryLog(options.trajectoryLogFile, this.stepCount + 1, batch, report);
    const sequences: TrainingSequence[] = Array.from({ length: batch.size }, (_, i) => {
      const start = batch.seqOffsets[i];
      const end = start + batch.lengths[i];
      return {
        tokens: batch.tokens.subarray(start, end),
        roles: batch.roles.subarray(start, end),
        behaviourLogp: batch.behaviourLogprobs.subarray(start, end),
        reward: episodes ? episodes[i].reward : batch.rewards[i],
        group: batch.groupIds[i],
        kind: 'episode',
        keep: keep[i] === 1,
      };
    });
    let stepLevel: GRPOStepMetrics['stepLevel'];
    if (options.stepLevel) {
      const step = episodes
        ? await stepLevelSequences(episodes, options.stepLevel, {
            policy,
            createEnvironment: options.createEnvironment!,
            maxTurnTokens: options.maxTurnTokens,
            random: this.random,
          })
        : attemptSequences(batch);
      sequences.push(...step.sequences);
      stepLevel = step.metrics;
    }
    const rolloutSeconds = (performance.now() - started) / 1000;

    const { update, correction } = await this.prepareUpdate(sequences, batch);
    const updateStats = await this.update(update);
    const seconds = (performance.now() - started) / 1000;

    const rewards = episodes ? episodes.map((e) => e.reward) : Array.from(batch.rewards);
    const metrics: GRPOStepMetrics = {
      step: this.stepCount + 1,
      reward: mean(rewards),
      successRate: episodes ? mean(episodes.map((e) => (e.success ? 1 : 0))) : mean(rewards.map((r) => (r > 0 ? 1 : 0))),
      episodes: batch.size,
      filtered,
      keptTrajectories: sum(keep),
      tokens: update.batch.tokens.length,
      trainedTokens: sum(update.mask),
      ...updateStats,
      ...(stepLevel ? { stepLevel } : {}),
      ...(lag && lag.versioned > 0 ? { staleness: { mean: lag.mean, max: lag.max } } : {}),
      ...(collected.dynamicSampling ? { dynamicSampling: collected.dynamicSampling } : {}),
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

  /**
   * The step's episodes through the environments: `promptsPerStep` groups, or with dynamic
   * sampling, generation batches until that many groups with unequal rewards are kept.
   */
  private async environmentEpisodes(): Promise<CollectedEpisodes<Problem>> {
    const options = this.options;
    const groupSize = options.groupSize;
    const kept: Episode<Problem>[] = [];
    const dynamic = options.dynamicSampling;
    let droppedGroups = 0;
    for (let batches = 1; ; batches++) {
      const prompts = this.nextProblems();
      const problems = prompts.flatMap((p) => Array<Problem>(groupSize).fill(p));
      const groups = problems.map((_, i) => Math.floor(i / groupSize));
      const episodes = await rollout(options.policy, this.environmentsFor(problems.length), problems, groups, options, this.random);
      if (!dynamic) return { batch: toTokenBatch(episodes, `step${this.stepCount + 1}`), episodes };
      for (let g = 0; g < prompts.length; g++) {
        const group = episodes.slice(g * groupSize, (g + 1) * groupSize);
        if (!hasSignal(group.map((e) => e.reward))) {
          droppedGroups++;
          continue;
        }
        const index = kept.length / groupSize;
        kept.push(...group.map((e) => ({ ...e, group: index })));
      }
      const target = prompts.length;
      if (kept.length >= target * groupSize) {
        const surplusGroups = kept.length / groupSize - target;
        kept.length = target * groupSize;
        return { batch: toTokenBatch(kept, `step${this.stepCount + 1}`), episodes: kept, dynamicSampling: { batches, droppedGroups, surplusGroups } };
      }
      if (batches >= dynamic.maxBatches) throw tooManyBatches(batches, kept.length / groupSize, target);
    }
  }

  /** The step's episodes from the agent, packed with their token record; dynamic sampling as above. */
  private async agentEpisodes(agent: AgentRollouts): Promise<CollectedEpisodes<Problem>> {
    const options = this.options;
    const target = options.promptsPerStep;
    const dynamic = options.dynamicSampling;
    const kept: Trajectory[][] = [];
    const seen = new Set<string>();
    let droppedGroups = 0;
    let batches = 0;
    for (let attempt = 0; ; attempt++) {
      batches = attempt + 1;
      const trajectories = await agent.collect({ step: this.stepCount + 1, attempt, groups: target, groupSize: options.groupSize });
      checkArray('agent.collect(request)', trajectories);
      const groups = new Map<string, Trajectory[]>();
      trajectories.forEach((trajectory, i) => {
        const name = `agent.collect(request)[${i}]`;
        checkObject(name, trajectory);
        if (typeof trajectory.groupId !== 'string') throw typeError(`${name}.groupId`, 'a string (the group of the episode)', trajectory.groupId);
        if (typeof trajectory.reward !== 'number' || !Number.isFinite(trajectory.reward)) throw typeError(`${name}.reward`, 'a finite number', trajectory.reward);
        if (seen.has(trajectory.groupId)) throw rangeError(`${name}.groupId`, 'a group id not used earlier in the step', trajectory.groupId);
        const members = groups.get(trajectory.groupId) ?? [];
        members.push(trajectory);
        groups.set(trajectory.groupId, members);
      });
      for (const [id, members] of groups) {
        seen.add(id);
        if (dynamic && !hasSignal(members.map((t) => t.reward!))) droppedGroups++;
        else kept.push(members);
      }
      if (!dynamic || kept.length >= target) break;
      if (batches >= dynamic.maxBatches) throw tooManyBatches(batches, kept.length, target);
    }
    const surplusGroups = dynamic ? kept.length - target : 0;
    const trajectories = (dynamic ? kept.slice(0, target) : kept).flat();
    const batch = packTrajectories(trajectories, { tokenizer: agent.tokenizer, ...(agent.template ? { template: agent.template } : {}) });
    batch.exact.forEach((exact, i) => {
      if (exact !== 1) throw rangeError(`agent.collect(request): trajectory '${trajectories[i]!.id}'`, 'a token record of every span (the ids the engine saw and sampled; use a token-in/token-out policy)', 'a span re-tokenised from text');
    });
    return dynamic
      ? { batch, dynamicSampling: { batches, droppedGroups, surplusGroups } }
      : { batch };
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
    const source = this.options.problems!;
    if (typeof source === 'function') return source(this.stepCount);
    return Array.from({ length: this.options.promptsPerStep }, () => source[this.random.below(source.length)]);
  }

  private environmentsFor(count: number): Environment<Problem>[] {
    while (this.environments.length < count) this.environments.push(this.options.createEnvironment!());
    return this.environments.slice(0, count);
  }

  /**
   * Flattens the sequences, builds the masks, scores old (and reference) log-probs (and the
   * policy's Σπ² when the estimator reads it), and computes the advantages (carried back
   * through the episodes' turns with turn-level credit when that is on; `episodes` is the
   * episodes' batch, the update batch's first sequences).
   */
  private async prepareUpdate(sequences: TrainingSequence[], episodes: TokenBatch): Promise<{ update: UpdateBatch; correction?: RolloutCorrectionMetrics }> {
    const { behaviourLogp: rolloutLogp, ...packed } = packUpdate(sequences);
    const recompute = this.options.oldLogprobs === 'recompute';
    const withSumPiSquared = this.options.advantage.needsSumPiSquared;
    const scored = recompute || withSumPiSquared ? await this.score(this.options.policy, packed.batch, withSumPiSquared) : undefined;
    const oldLogp = recompute ? scored!.logp : rolloutLogp;
    const refLogp = this.reference && this.options.loss.klCoef > 0 ? (await this.score(this.reference, packed.batch)).logp : undefined;
    const scoredUpdate = { ...packed, oldLogp, rolloutLogp, ...(refLogp ? { refLogp } : {}) };
    const update: UpdateBatch = { ...scoredUpdate, advantages: updateAdvantages(this.options.advantage, scoredUpdate, scored?.sumPiSquared) };
    if (this.options.turnCredit) applyTurnCredit(update.advantages, update.batch.seqOffsets, episodes, this.options.turnCredit);
    return recompute ? { update, correction: correctRollout(update, this.options.rolloutCorrection) } : { update };
  }

  /** Log-probs (and Σπ² when asked) of the whole batch, scored micro-batch by micro-batch. */
  private async score(policy: Policy, batch: PolicyBatch, withSumPiSquared = false): Promise<{ logp: Float32Array; sumPiSquared?: Float32Array }> {
    const logp = new Float32Array(batch.tokens.length);
    const sumPiSquared = withSumPiSquared ? new Float32Array(batch.tokens.length) : undefined;
    const indices = range(batch.seqOffsets.length - 1);
    for (const micro of chunk(indices, this.options.microBatchSize ?? indices.length)) {
      const sub = gatherSequences(batch, micro);
      const outputs = await policy.logprobs(sub.batch, withSumPiSquared ? { withSumPiSquared } : undefined);
      scatter(logp, outputs.logp, sub.positions);
      if (sumPiSquared) {
        if (!outputs.sumPiSquared) {
          throw typeError('options.policy', `a policy whose logprobs() gives sumPiSquared (advantageEstimator '${this.options.advantage.estimator}' reads it)`, policy);
        }
        scatter(sumPiSquared, outputs.sumPiSquared, sub.positions);
      }
    }
    return { logp, ...(sumPiSquared ? { sumPiSquared } : {}) };
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
      ...(o.stepLevel ? { stepLevelCoef: o.stepLevel.coef, episodeCoef: o.stepLevel.episodeCoef } : {}),
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
