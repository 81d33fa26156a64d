/**
 * DPO over preference pairs, in iterative rounds (AceSearcher): each round regenerates its
 * pairs with the current policy and trains against a reference that is the policy as the
 * round began.
 */
import { feedbackMask, Role, sequenceLogprobs, sequenceLogprobsBackward } from '../kernels/index.js';
import type { TokenBatch } from '../trajectory/index.js';
import { chunk, mean, range } from './batching.js';
import { latestCheckpoint, loadPolicy, readTrainerState, savePolicy, writeCheckpoint, writeTrainerState } from './checkpoint.js';
import { appendJsonLine, writeJsonLines } from './jsonl_log.js';
import { averagesLogprobs, checkPreferenceLossOptions, preferenceLoss, type PreferenceLossOptions } from './losses.js';
import type { Policy, PolicyBatch } from './trainable_policy.js';
import { SeededRandom } from './random.js';
import { packSequences } from './rollout.js';
import { checkInteger, checkObject, rangeError, typeError } from '../check.js';

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

/** Preference pairs as {@link DPOTrainerOptions.pairs} may give them. */
export type PairSource = readonly TokenPreferencePair[] | TokenBatch;

/** A pair as two whole sequences (prompt and completion) with their token roles. */
interface SequencePair {
  chosen: Int32Array;
  chosenRoles: Uint8Array;
  rejected: Int32Array;
  rejectedRoles: Uint8Array;
}

/** Options of {@link DPOTrainer}. */
export interface DPOTrainerOptions extends PreferenceLossOptions {
  /** The policy to train. */
  policy: Policy;
  /**
   * The pairs of a round, generated with the current policy (round 0 may return a fixed
   * dataset). Called once at the start of each round. Either token pairs, or the SDK's
   * `packPreferencePairs` batch (sequences chosen, rejected, chosen, ...; completions as
   * action tokens) of its AceSearcher pairs.
   */
  pairs: (round: number, policy: Policy, random: SeededRandom) => Promise<PairSource> | PairSource;
  /** Rounds of regenerate → train → refresh the reference. Default 1. */
  rounds?: number;
  /** Passes over each round's pairs. Default 1. */
  epochsPerRound?: number;
  /** Pairs per optimizer step. Default: all of the round's pairs. */
  pairsPerStep?: number;
  /** Pairs per forward/backward pass; gradients accumulate up to `pairsPerStep`. Default: `pairsPerStep`. */
  microBatchSize?: number;
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

/** The trainer's own state in a checkpoint (`trainer.json`). */
interface DPOTrainerState {
  step: number;
  randomState: number;
  progress: DPOProgress;
  /** The round's pairs, as number arrays; absent between rounds. */
  pairs?: Record<keyof SequencePair, number[]>[];
  metrics: DPOStepMetrics[];
}

/** The DPO trainer; `await trainer.train()` runs all rounds, resuming from `checkpointDir`. */
export class DPOTrainer {
  /** Optimizer steps completed. */
  stepCount = 0;
  readonly metrics: DPOStepMetrics[] = [];
  readonly random: SeededRandom;
  private readonly options: DPOTrainerOptions;
  private reference: Policy | undefined;
  private pairs: readonly SequencePair[] | undefined;
  private referenceLogp: { chosen: Float32Array; rejected: Float32Array } | undefined;
  private progress: DPOProgress = { round: 0, epoch: 0, stepInEpoch: 0, order: [] };

  /** @throws TypeError or RangeError naming an option of the wrong type or out of range. */
  constructor(options: DPOTrainerOptions) {
    checkOptions(options);
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
    await savePolicy(dir, 'policy', this.options.policy);
    if (this.reference) await savePolicy(dir, 'reference', this.reference);
    const state = {
      format: CHECKPOINT_FORMAT,
      step: this.stepCount,
      randomState: this.random.state,
      progress: this.progress,
      pairs: this.pairs?.map((pair) => ({
        chosen: [...pair.chosen],
        chosenRoles: [...pair.chosenRoles],
        rejected: [...pair.rejected],
        rejectedRoles: [...pair.rejectedRoles],
      })),
      metrics: this.metrics,
    };
    await writeTrainerState(dir, state);
  }

  /** Restores what {@link DPOTrainer.save} wrote; the JSONL log is rewritten to the restored steps. */
  async load(dir: string): Promise<void> {
    const state = await readTrainerState<DPOTrainerState>(dir, CHECKPOINT_FORMAT, 'DPOTrainer', 'DPO');
    await loadPolicy(dir, 'policy', this.options.policy);
    this.reference?.dispose?.();
    this.reference = undefined;
    this.pairs = undefined;
    if (state.pairs) {
      this.reference = await this.options.policy.frozenCopy();
      await loadPolicy(dir, 'reference', this.reference);
      this.pairs = state.pairs.map((pair) => ({
        chosen: Int32Array.from(pair.chosen),
        chosenRoles: Uint8Array.from(pair.chosenRoles),
        rejected: Int32Array.from(pair.rejected),
        rejectedRoles: Uint8Array.from(pair.rejectedRoles),
      }));
      this.referenceLogp = await this.scorePairs(this.reference, this.pairs);
    }
    this.stepCount = state.step;
    this.random.state = state.randomState;
    this.progress = state.progress;
    this.metrics.splice(0, this.metrics.length, ...state.metrics);
    if (this.options.logFile) await writeJsonLines(this.options.logFile, this.metrics);
  }

  /** Freezes the current policy as the reference and generates the round's pairs with it. */
  private async startRound(): Promise<void> {
    this.reference = await this.options.policy.frozenCopy();
    this.pairs = sequencePairs(await this.options.pairs(this.progress.round, this.options.policy, this.random));
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
      const average = averagesLogprobs(o);
      const share = micro.length / total;
      await o.policy.accumulateGradients(batch, ({ logp }) => {
        const perSequence = sequenceLogprobs({ logp, mask, seqOffsets: batch.seqOffsets, average });
        const result = preferenceLoss(o, {
          policyChosen: evens(perSequence),
          policyRejected: odds(perSequence),
          refChosen: Float32Array.from(micro, (i) => reference.chosen[i]),
          refRejected: Float32Array.from(micro, (i) => reference.rejected[i]),
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
    if (o.logFile) await appendJsonLine(o.logFile, metrics);
    await o.onStep?.(metrics);
    return metrics;
  }

  /** Summed (or, for IPO, averaged) completion log-probs of every pair under `policy`. */
  private async scorePairs(policy: Policy, pairs: readonly SequencePair[]) {
    const chosen = new Float32Array(pairs.length);
    const rejected = new Float32Array(pairs.length);
    const size = this.options.microBatchSize ?? this.options.pairsPerStep ?? pairs.length;
    for (const micro of chunk(range(pairs.length), size)) {
      const { batch, mask } = pairBatch(micro.map((i) => pairs[i]));
      const { logp } = await policy.logprobs(batch);
      const perSequence = sequenceLogprobs({ logp, mask, seqOffsets: batch.seqOffsets, average: averagesLogprobs(this.options) });
      micro.forEach((i, k) => {
        chosen[i] = perSequence[2 * k];
        rejected[i] = perSequence[2 * k + 1];
      });
    }
    return { chosen, rejected };
  }
}

function checkOptions(options: DPOTrainerOptions): void {
  checkObject('options', options);
  if (typeof options.pairs !== 'function') throw typeError('options.pairs', 'a function', options.pairs);
  for (const name of ['rounds', 'epochsPerRound', 'pairsPerStep', 'microBatchSize'] as const) {
    checkInteger(`options.${name}`, options[name], 1, 1, Number.MAX_SAFE_INTEGER);
  }
  checkInteger('options.seed', options.seed, 0, 0, 2 ** 32 - 1);
  checkPreferenceLossOptions(options);
  const maxGradNorm = options.maxGradNorm ?? 1;
  if (typeof maxGradNorm !== 'number' || !(maxGradNorm > 0)) {
    throw rangeError('options.maxGradNorm', 'a number > 0 (Infinity: no clipping)', maxGradNorm);
  }
}

/** Pairs as sequences chosen_0, rejected_0, chosen_1, ...; the mask covers trained completion tokens. */
function pairBatch(pairs: readonly SequencePair[]): PairBatch {
  const batch = packSequences(pairs.flatMap((pair) => [pair.chosen, pair.rejected]));
  const roles = new Uint8Array(batch.tokens.length);
  pairs.forEach((pair, k) => {
    roles.set(pair.chosenRoles, batch.seqOffsets[2 * k]);
    roles.set(pair.rejectedRoles, batch.seqOffsets[2 * k + 1]);
  });
  return { batch, mask: feedbackMask({ roles, seqOffsets: batch.seqOffsets }).mask };
}

/** Whole sequences with roles, from token pairs or from a `packPreferencePairs` batch. */
function sequencePairs(source: PairSource): SequencePair[] {
  if (Array.isArray(source)) return (source as readonly TokenPreferencePair[]).map(fromTokenPair);
  const batch = source as TokenBatch;
  if (batch.size % 2 !== 0) {
    throw new RangeError(`DPOTrainer: Expected a packPreferencePairs batch (an even number of sequences) for pairs but received ${batch.size} sequences`);
  }
  const sequence = (i: number) => {
    // Padding (a padded batch) is not part of the sequence.
    const end = batch.seqOffsets[i] + batch.lengths[i];
    return { tokens: batch.tokens.slice(batch.seqOffsets[i], end), roles: batch.roles.slice(batch.seqOffsets[i], end) };
  };
  return Array.from({ length: batch.size / 2 }, (_, k) => {
    const chosen = sequence(2 * k);
    const rejected = sequence(2 * k + 1);
    return { chosen: chosen.tokens, chosenRoles: chosen.roles, rejected: rejected.tokens, rejectedRoles: rejected.roles };
  });
}

function fromTokenPair(pair: TokenPreferencePair): SequencePair {
  const whole = (completion: Int32Array, completionRoles: Uint8Array | undefined) => {
    const tokens = new Int32Array(pair.prompt.length + completion.length);
    tokens.set(pair.prompt);
    tokens.set(completion, pair.prompt.length);
    const roles = new Uint8Array(tokens.length).fill(Role.action);
    roles.fill(Role.prompt, 0, pair.prompt.length);
    if (completionRoles) roles.set(completionRoles, pair.prompt.length);
    return { tokens, roles };
  };
  const chosen = whole(pair.chosen, pair.chosenRoles);
  const rejected = whole(pair.rejected, pair.rejectedRoles);
  return { chosen: chosen.tokens, chosenRoles: chosen.roles, rejected: rejected.tokens, rejectedRoles: rejected.roles };
}

function evens(values: Float32Array): Float32Array {
  return Float32Array.from({ length: values.length / 2 }, (_, i) => values[2 * i]);
}

function odds(values: Float32Array): Float32Array {
  return Float32Array.from({ length: values.length / 2 }, (_, i) => values[2 * i + 1]);
}
