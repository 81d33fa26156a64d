/**
 * DPO over preference pairs, in iterative rounds (AceSearcher): each round regenerates its
 * pairs with the current policy and trains against a reference that is the policy as the
 * round began.
 */
import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

import { dpoLoss, feedbackMask, Role, sequenceLogprobs, sequenceLogprobsBackward } from '../kernels/index.js';
import { latestCheckpoint, writeCheckpoint } from './checkpoint.js';
import type { Policy, PolicyBatch } from './policy.js';
import { SeededRandom } from './random.js';
import { packSequences } from './rollout.js';

type DpoOptions = Parameters<typeof dpoLoss>[0];

/**
 * A preferred and a dispreferred completion of one prompt, as token ids (the trajectory
 * SDK's preference pairs, tokenized). Completion tokens
 * are trained on unless their roles say otherwise (e.g. tool feedback inside a multi-turn
 * completion, role 2).
 */
export interface TokenPreferencePair {
  prompt: Int32Array;
  chosen: Int32Array;
  rejected: Int32Array;
  /** Roles of the chosen completion's tokens (see `Role`); default all action. */
  chosenRoles?: Uint8Array;
  /** Roles of the rejected completion's tokens; default all action. */
  rejectedRoles?: Uint8Array;
}

/** Options of {@link DPOTrainer}. */
export interface DPOTrainerOptions {
  /** The policy to train. */
  policy: Policy;
  /**
   * The pairs of a round, generated with the current policy (round 0 may return a fixed
   * dataset). Called once at the start of each round.
   */
  pairs: (round: number, policy: Policy, random: SeededRandom) => Promise<readonly TokenPreferencePair[]> | readonly TokenPreferencePair[];
  /** Rounds of regenerate → train → refresh the reference. Default 1. */
  rounds?: number;
  /** Passes over each round's pairs. Default 1. */
  epochsPerRound?: number;
  /** Pairs per optimizer step. Default: all of the round's pairs. */
  pairsPerStep?: number;
  /** Pairs per forward/backward pass; gradients accumulate up to `pairsPerStep`. Default: `pairsPerStep`. */
  microBatchSize?: number;
  /** dpoLoss settings: beta 0.1, labelSmoothing 0, variant 'sigmoid' ('ipo' scores per-token averages). */
  beta?: number;
  labelSmoothing?: number;
  variant?: NonNullable<DpoOptions['variant']>;
  /** Clip the gradient's global L2 norm to this. Default 1; Infinity turns clipping off. */
  maxGradNorm?: number;
  /** Seed of the trainer's generator (pair shuffles, and handed to `pairs`). Default 0. */
  seed?: number;
  /** JSONL file receiving one line of {@link DPOStepMetrics} per optimizer step. */
  logFile?: string;
  /** Called after each optimizer step. */
  onStep?: (metrics: DPOStepMetrics) => void | Promise<void>;
  /** Called when a round ends, before the reference is refreshed. */
  onRound?: (round: number, metrics: readonly DPOStepMetrics[]) => void | Promise<void>;
  /** Directory of checkpoints, written after every optimizer step; `train` resumes from the latest. */
  checkpointDir?: string;
}

/** Metrics of one DPO optimizer step. */
export interface DPOStepMetrics {
  /** Optimizer steps completed, this one included. */
  step: number;
  round: number;
  epoch: number;
  pairs: number;
  loss: number;
  /** Fraction of pairs whose chosen reward beats the rejected one. */
  rewardAccuracy: number;
  /** Mean β·(policy − reference) log-prob of the chosen and rejected completions. */
  chosenReward: number;
  rejectedReward: number;
  margin: number;
  gradNorm: number;
  seconds: number;
}

interface PairBatch {
  batch: PolicyBatch;
  mask: Uint8Array;
}

const CHECKPOINT_FORMAT = 'tirl-dpo-checkpoint';

/** Progress within the rounds: where a resumed run continues. */
interface DPOProgress {
  round: number;
  epoch: number;
  /** Optimizer steps done in the current epoch. */
  stepInEpoch: number;
  /** Shuffled pair order of the current epoch. */
  order: number[];
}

/** The DPO trainer; `await trainer.train()` runs all rounds, resuming from `checkpointDir`. */
export class DPOTrainer {
  /** Optimizer steps completed. */
  stepCount = 0;
  readonly metrics: DPOStepMetrics[] = [];
  readonly random: SeededRandom;
  private readonly options: DPOTrainerOptions;
  private reference: Policy | undefined;
  private pairs: readonly TokenPreferencePair[] | undefined;
  private referenceLogp: { chosen: Float32Array; rejected: Float32Array } | undefined;
  private progress: DPOProgress = { round: 0, epoch: 0, stepInEpoch: 0, order: [] };

  constructor(options: DPOTrainerOptions) {
    this.options = options;
    this.random = new SeededRandom(options.seed ?? 0);
  }

  /** Runs every round; returns the metrics of the steps it ran. */
  async train(): Promise<DPOStepMetrics[]> {
    const o = this.options;
    if (o.checkpointDir) {
      const checkpoint = await latestCheckpoint(o.checkpointDir);
      if (checkpoint) await this.load(checkpoint);
    }
    const ran: DPOStepMetrics[] = [];
    const rounds = o.rounds ?? 1;
    const epochs = o.epochsPerRound ?? 1;
    while (this.progress.round < rounds) {
      if (!this.reference) await this.startRound();
      const pairs = this.pairs!;
      const perStep = Math.max(1, o.pairsPerStep ?? pairs.length);
      const stepsPerEpoch = Math.ceil(pairs.length / perStep);
      while (this.progress.epoch < epochs) {
        if (this.progress.order.length !== pairs.length) this.progress.order = this.random.shuffled(range(pairs.length));
        while (this.progress.stepInEpoch < stepsPerEpoch) {
          const start = this.progress.stepInEpoch * perStep;
          const metrics = await this.step(this.progress.order.slice(start, start + perStep));
          this.progress.stepInEpoch += 1;
          ran.push(metrics);
          if (o.checkpointDir) await writeCheckpoint(o.checkpointDir, this.stepCount, (dir) => this.save(dir));
        }
        this.progress = { ...this.progress, epoch: this.progress.epoch + 1, stepInEpoch: 0, order: [] };
      }
      await o.onRound?.(this.progress.round, this.metrics.filter((m) => m.round === this.progress.round));
      this.reference?.dispose?.();
      this.reference = undefined;
      this.pairs = undefined;
      this.progress = { round: this.progress.round + 1, epoch: 0, stepInEpoch: 0, order: [] };
    }
    return ran;
  }

  /** Writes the trainer's state (policy, reference, pairs, progress, generator, metrics) into `dir`. */
  async save(dir: string): Promise<void> {
    await mkdir(join(dir, 'policy'), { recursive: true });
    await this.options.policy.saveState(join(dir, 'policy'));
    if (this.reference) {
      await mkdir(join(dir, 'reference'), { recursive: true });
      await this.reference.saveState(join(dir, 'reference'));
    }
    const state = {
      format: CHECKPOINT_FORMAT,
      step: this.stepCount,
      randomState: this.random.state,
      progress: this.progress,
      pairs: this.pairs?.map(pairToJson),
      metrics: this.metrics,
    };
    await writeFile(join(dir, 'trainer.json'), JSON.stringify(state));
  }

  /** Restores what {@link DPOTrainer.save} wrote; the JSONL log is rewritten to the restored steps. */
  async load(dir: string): Promise<void> {
    const state = JSON.parse(await readFile(join(dir, 'trainer.json'), 'utf8'));
    if (state.format !== CHECKPOINT_FORMAT) throw new Error(`DPOTrainer: ${dir} is not a DPO checkpoint`);
    await this.options.policy.loadState(join(dir, 'policy'));
    this.reference?.dispose?.();
    this.reference = undefined;
    this.pairs = undefined;
    if (state.pairs) {
      this.reference = await this.options.policy.frozenCopy();
      await this.reference.loadState(join(dir, 'reference'));
      this.pairs = (state.pairs as PairJson[]).map(pairFromJson);
      this.referenceLogp = await this.scorePairs(this.reference, this.pairs);
    }
    this.stepCount = state.step;
    this.random.state = state.randomState;
    this.progress = state.progress;
    this.metrics.splice(0, this.metrics.length, ...state.metrics);
    if (this.options.logFile) {
      await mkdir(dirname(this.options.logFile), { recursive: true });
      await writeFile(this.options.logFile, this.metrics.map((m) => JSON.stringify(m) + '\n').join(''));
    }
  }

  /** Freezes the current policy as the reference and generates the round's pairs with it. */
  private async startRound(): Promise<void> {
    this.reference = await this.options.policy.frozenCopy();
    this.pairs = await this.options.pairs(this.progress.round, this.options.policy, this.random);
    this.referenceLogp = await this.scorePairs(this.reference, this.pairs);
  }

  /** One optimizer step over `indices` of the round's pairs, in micro-batches. */
  private async step(indices: readonly number[]): Promise<DPOStepMetrics> {
    const started = performance.now();
    const o = this.options;
    const pairs = this.pairs!;
    const reference = this.referenceLogp!;
    const total = indices.length;
    const sums = { loss: 0, rewardAccuracy: 0, chosenReward: 0, rejectedReward: 0 };
    for (const micro of chunk(indices, o.microBatchSize ?? o.pairsPerStep ?? total)) {
      const { batch, mask } = pairBatch(micro.map((i) => pairs[i]));
      const average = o.variant === 'ipo';
      const share = micro.length / total;
      await o.policy.accumulateGradients(batch, ({ logp }) => {
        const perSequence = sequenceLogprobs({ logp, mask, seqOffsets: batch.seqOffsets, average });
        const result = dpoLoss({
          policyChosen: evens(perSequence),
          policyRejected: odds(perSequence),
          refChosen: Float32Array.from(micro, (i) => reference.chosen[i]),
          refRejected: Float32Array.from(micro, (i) => reference.rejected[i]),
          ...(o.beta !== undefined ? { beta: o.beta } : {}),
          ...(o.labelSmoothing !== undefined ? { labelSmoothing: o.labelSmoothing } : {}),
          ...(o.variant !== undefined ? { variant: o.variant } : {}),
        });
        sums.loss += result.loss * share;
        sums.rewardAccuracy += result.rewardAccuracy * share;
        sums.chosenReward += mean(result.chosenRewards) * share;
        sums.rejectedReward += mean(result.rejectedRewards) * share;
        // The loss is a mean over the micro-batch's pairs; scaled by its share it becomes
        // its part of the mean over the step's pairs.
        const gradSeq = new Float32Array(perSequence.length);
        for (let p = 0; p < micro.length; p++) {
          gradSeq[2 * p] = result.gradChosen[p] * share;
          gradSeq[2 * p + 1] = result.gradRejected[p] * share;
        }
        return { gradLogp: sequenceLogprobsBackward({ gradSeq, mask, seqOffsets: batch.seqOffsets, average }) };
      });
    }
    const { gradNorm } = await o.policy.applyGradients(o.maxGradNorm === Infinity ? {} : { maxGradNorm: o.maxGradNorm ?? 1 });
    this.stepCount += 1;
    const metrics: DPOStepMetrics = {
      step: this.stepCount,
      round: this.progress.round,
      epoch: this.progress.epoch,
      pairs: total,
      ...sums,
      margin: sums.chosenReward - sums.rejectedReward,
      gradNorm,
      seconds: (performance.now() - started) / 1000,
    };
    this.metrics.push(metrics);
    if (o.logFile) {
      await mkdir(dirname(o.logFile), { recursive: true });
      await appendFile(o.logFile, JSON.stringify(metrics) + '\n');
    }
    await o.onStep?.(metrics);
    return metrics;
  }

  /** Summed (or, for IPO, averaged) completion log-probs of every pair under `policy`. */
  private async scorePairs(policy: Policy, pairs: readonly TokenPreferencePair[]) {
    const chosen = new Float32Array(pairs.length);
    const rejected = new Float32Array(pairs.length);
    const size = this.options.microBatchSize ?? this.options.pairsPerStep ?? pairs.length;
    for (const micro of chunk(range(pairs.length), size)) {
      const { batch, mask } = pairBatch(micro.map((i) => pairs[i]));
      const { logp } = await policy.logprobs(batch);
      const perSequence = sequenceLogprobs({ logp, mask, seqOffsets: batch.seqOffsets, average: this.options.variant === 'ipo' });
      micro.forEach((i, k) => {
        chosen[i] = perSequence[2 * k];
        rejected[i] = perSequence[2 * k + 1];
      });
    }
    return { chosen, rejected };
  }
}

/** Pairs as sequences chosen_0, rejected_0, chosen_1, ...; the mask covers trained completion tokens. */
function pairBatch(pairs: readonly TokenPreferencePair[]): PairBatch {
  const sequences: Int32Array[] = [];
  const roles: Uint8Array[] = [];
  for (const pair of pairs) {
    for (const [completion, completionRoles] of [
      [pair.chosen, pair.chosenRoles],
      [pair.rejected, pair.rejectedRoles],
    ] as const) {
      const tokens = new Int32Array(pair.prompt.length + completion.length);
      tokens.set(pair.prompt);
      tokens.set(completion, pair.prompt.length);
      const r = new Uint8Array(tokens.length).fill(Role.action);
      r.fill(Role.prompt, 0, pair.prompt.length);
      if (completionRoles) r.set(completionRoles, pair.prompt.length);
      sequences.push(tokens);
      roles.push(r);
    }
  }
  const batch = packSequences(sequences);
  const allRoles = new Uint8Array(batch.tokens.length);
  roles.forEach((r, i) => allRoles.set(r, batch.seqOffsets[i]));
  return { batch, mask: feedbackMask({ roles: allRoles, seqOffsets: batch.seqOffsets }).mask };
}

interface PairJson {
  prompt: number[];
  chosen: number[];
  rejected: number[];
  chosenRoles?: number[];
  rejectedRoles?: number[];
}

function pairToJson(pair: TokenPreferencePair): PairJson {
  return {
    prompt: [...pair.prompt],
    chosen: [...pair.chosen],
    rejected: [...pair.rejected],
    ...(pair.chosenRoles ? { chosenRoles: [...pair.chosenRoles] } : {}),
    ...(pair.rejectedRoles ? { rejectedRoles: [...pair.rejectedRoles] } : {}),
  };
}

function pairFromJson(json: PairJson): TokenPreferencePair {
  return {
    prompt: Int32Array.from(json.prompt),
    chosen: Int32Array.from(json.chosen),
    rejected: Int32Array.from(json.rejected),
    ...(json.chosenRoles ? { chosenRoles: Uint8Array.from(json.chosenRoles) } : {}),
    ...(json.rejectedRoles ? { rejectedRoles: Uint8Array.from(json.rejectedRoles) } : {}),
  };
}

function evens(values: Float32Array): Float32Array {
  return Float32Array.from({ length: values.length / 2 }, (_, i) => values[2 * i]);
}

function odds(values: Float32Array): Float32Array {
  return Float32Array.from({ length: values.length / 2 }, (_, i) => values[2 * i + 1]);
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

function chunk<T>(items: readonly T[], size: number): T[][] {
  const step = Math.max(1, size);
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += step) out.push(items.slice(i, i + step));
  return out;
}

function mean(values: Float32Array): number {
  let total = 0;
  for (const v of values) total += v;
  return values.length ? total / values.length : 0;
}
