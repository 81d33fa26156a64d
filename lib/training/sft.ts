/**
 * Supervised fine-tuning on action tokens: the negative log-likelihood of what the model
 * wrote, with the prompt, tool output and padding masked out by the `feedbackMask` kernel.
 * The first stage of tool-integrated recipes (a TIRGen warm start, THOR's and AceSearcher's
 * supervised stages) before the RL trainers take over.
 */
import { feedbackMask, Role, sequenceLogprobs, sequenceLogprobsBackward } from '../kernels/index.js';
import type { TokenBatch } from '../trajectory/index.js';
import { checkArray, checkInteger, checkObject, rangeError, typeError } from '../check.js';
import { appendJsonLine } from './jsonl_log.js';
import { SeededRandom } from './random.js';
import { packSequences } from './rollout.js';
import type { Policy } from './trainable_policy.js';

/** One training sequence: its tokens and the role of each (see `Role`); only action tokens (role 1) are learned. */
export interface SFTExample {
  tokens: ArrayLike<number>;
  /** Role code of each token: 0 prompt, 1 action, 2 feedback (tool output), 3 padding. */
  roles: ArrayLike<number>;
}

/**
 * How the per-token losses become one number: 'token-mean' averages over every action
 * token of the batch (long answers weigh more); 'seq-mean-token-mean' averages each
 * sequence's action tokens, then the sequences.
 */
export type SFTAggregation = 'token-mean' | 'seq-mean-token-mean';

/** Options of {@link SFTTrainer}. */
export interface SFTTrainerOptions {
  /** The policy to train. */
  policy: Policy;
  /**
   * The training set: examples, or a `TokenBatch` of trajectories (from `packTrajectories`,
   * whose recorded token ids and roles are used as they are; padding is dropped).
   * Needed by {@link SFTTrainer.train}; {@link SFTTrainer.step} may be given its batch instead.
   */
  examples?: readonly SFTExample[] | TokenBatch;
  /** Sequences per optimizer step in {@link SFTTrainer.train}. Default 8. */
  batchSize?: number;
  /** Default 'token-mean'. */
  aggregation?: SFTAggregation;
  /** Clip the gradient's global L2 norm to this. Default 1; Infinity turns clipping off. */
  maxGradNorm?: number;
  /** Seed of the batch order in {@link SFTTrainer.train} (epochs of shuffled examples). Default 0. */
  seed?: number;
  /** JSONL file receiving one line of {@link SFTStepMetrics} per step. */
  logFile?: string;
  /** Called after each step. */
  onStep?: (metrics: SFTStepMetrics) => void | Promise<void>;
}

/** Metrics of one SFT step. */
export interface SFTStepMetrics {
  /** Steps completed, this one included. */
  step: number;
  /** The loss: mean negative log-likelihood of the action tokens (nats), as aggregated. */
  loss: number;
  sequences: number;
  /** Action tokens trained on. */
  actionTokens: number;
  /** Global L2 norm of the gradient before clipping. */
  gradNorm: number;
  seconds: number;
}

/** Examples of a packed batch: each sequence without its padding. */
function batchExamples(batch: TokenBatch): SFTExample[] {
  return Array.from({ length: batch.size }, (_, i) => {
    const start = batch.seqOffsets[i]!;
    const end = start + batch.lengths[i]!;
    return { tokens: batch.tokens.subarray(start, end), roles: batch.roles.subarray(start, end) };
  });
}

function isTokenBatch(value: unknown): value is TokenBatch {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && (value as TokenBatch).seqOffsets instanceof Int32Array;
}

function checkExamples(name: string, value: unknown): SFTExample[] {
  if (isTokenBatch(value)) return batchExamples(value);
  return checkArray(name, value).map((example, i) => {
    const raw = checkObject(`${name}[${i}]`, example);
    const tokens = raw.tokens as ArrayLike<number> | undefined;
    const roles = raw.roles as ArrayLike<number> | undefined;
    if (tokens === null || typeof tokens !== 'object' || typeof tokens.length !== 'number') throw typeError(`${name}[${i}].tokens`, 'an array of token ids', tokens);
    if (roles === null || typeof roles !== 'object' || typeof roles.length !== 'number') throw typeError(`${name}[${i}].roles`, 'an array of role codes', roles);
    if (roles.length !== tokens.length) throw rangeError(`${name}[${i}].roles`, `${tokens.length} role codes (one per token)`, roles.length);
    return { tokens, roles };
  });
}

/**
 * Supervised fine-tuning of any trainable {@link Policy}: each step packs its sequences,
 * masks everything but action tokens with `feedbackMask`, sums each sequence's action
 * log-probs with `sequenceLogprobs`, and back-propagates the mean negative log-likelihood
 * through `sequenceLogprobsBackward` and the policy. Prompt and tool-output tokens are
 * context only: their log-probs get no gradient.
 */
export class SFTTrainer {
  /** Steps completed. */
  stepCount = 0;
  readonly metrics: SFTStepMetrics[] = [];
  readonly random: SeededRandom;
  readonly #policy: Policy;
  readonly #examples: SFTExample[] | undefined;
  readonly #batchSize: number;
  readonly #aggregation: SFTAggregation;
  readonly #maxGradNorm: number;
  readonly #logFile: string | undefined;
  readonly #onStep: SFTTrainerOptions['onStep'];
  #order: number[] = [];

  /** @throws TypeError or RangeError naming a bad option. */
  constructor(options: SFTTrainerOptions) {
    checkObject('options', options);
    const policy = options.policy as Policy | undefined;
    if (policy === null || typeof policy !== 'object' || typeof policy.accumulateGradients !== 'function' || typeof policy.applyGradients !== 'function') {
      throw typeError('options.policy', 'a trainable Policy', policy);
    }
    this.#policy = policy;
    this.#examples = options.examples === undefined ? undefined : checkExamples('options.examples', options.examples);
    if (this.#examples !== undefined && this.#examples.length === 0) throw rangeError('options.examples', 'at least one example', 0);
    this.#batchSize = checkInteger('options.batchSize', options.batchSize, 8, 1, Number.MAX_SAFE_INTEGER);
    const aggregation = options.aggregation ?? 'token-mean';
    if (aggregation !== 'token-mean' && aggregation !== 'seq-mean-token-mean') {
      throw typeError('options.aggregation', "'token-mean' or 'seq-mean-token-mean'", aggregation);
    }
    this.#aggregation = aggregation;
    const maxGradNorm = options.maxGradNorm ?? 1;
    if (typeof maxGradNorm !== 'number' || !(maxGradNorm > 0)) throw rangeError('options.maxGradNorm', 'a number > 0 (Infinity: no clipping)', maxGradNorm);
    this.#maxGradNorm = maxGradNorm;
    this.random = new SeededRandom(checkInteger('options.seed', options.seed, 0, 0, 2 ** 32 - 1));
    if (options.logFile !== undefined && typeof options.logFile !== 'string') throw typeError('options.logFile', 'a file path', options.logFile);
    this.#logFile = options.logFile;
    if (options.onStep !== undefined && typeof options.onStep !== 'function') throw typeError('options.onStep', 'a function', options.onStep);
    this.#onStep = options.onStep;
  }

  /**
   * Runs steps until `steps` are done in total, each on the next `batchSize` examples of a
   * shuffled pass over `options.examples` (reshuffled every epoch).
   * @returns the metrics of the steps it ran.
   */
  async train(steps: number): Promise<SFTStepMetrics[]> {
    checkInteger('steps', steps, 0, 0, Number.MAX_SAFE_INTEGER);
    const examples = this.#examples;
    if (examples === undefined) throw typeError('options.examples', 'the training set (train draws its batches from it)', undefined);
    const ran: SFTStepMetrics[] = [];
    while (this.stepCount < steps) {
      const batch: SFTExample[] = [];
      while (batch.length < Math.min(this.#batchSize, examples.length)) {
        if (this.#order.length === 0) this.#order = this.random.shuffled(Array.from(examples.keys()));
        batch.push(examples[this.#order.pop()!]!);
      }
      ran.push(await this.step(batch));
    }
    return ran;
  }

  /**
   * One optimizer step on `examples` (all of them, one forward/backward pass). A batch
   * without action tokens takes no optimizer step and reports loss 0.
   * @throws TypeError or RangeError naming a bad example.
   */
  async step(examples: readonly SFTExample[] | TokenBatch): Promise<SFTStepMetrics> {
    const started = performance.now();
    const sequences = checkExamples('examples', examples);
    if (sequences.length === 0) throw rangeError('examples', 'at least one example', 0);
    const batch = packSequences(sequences.map((s) => Int32Array.from(s.tokens)));
    const roles = new Uint8Array(batch.tokens.length);
    sequences.forEach((s, i) => roles.set(Array.from(s.roles), batch.seqOffsets[i]!));
    for (let t = 0; t < roles.length; t++) {
      if (roles[t]! > Role.padding) throw rangeError('examples roles', 'role codes 0 to 3', roles[t]);
    }
    const { mask, actionTokens } = feedbackMask({ roles, seqOffsets: batch.seqOffsets });
    const total = actionTokens.reduce((a, b) => a + b, 0);
    const average = this.#aggregation === 'seq-mean-token-mean';
    const trained = actionTokens.reduce((count, n) => count + (n > 0 ? 1 : 0), 0);
    let loss = 0;
    let gradNorm = 0;
    if (total > 0) {
      await this.#policy.accumulateGradients(batch, ({ logp }) => {
        const perSequence = sequenceLogprobs({ logp, mask, seqOffsets: batch.seqOffsets, average });
        // token-mean: -Σ logp / action tokens; seq-mean-token-mean: -Σ (mean logp of a sequence) / sequences trained.
        const divisor = average ? trained : total;
        loss = -perSequence.reduce((a, b) => a + b, 0) / divisor;
        const gradSeq = new Float32Array(perSequence.length).fill(-1 / divisor);
        return { gradLogp: sequenceLogprobsBackward({ gradSeq, mask, seqOffsets: batch.seqOffsets, average }) };
      });
      ({ gradNorm } = await this.#policy.applyGradients(this.#maxGradNorm === Infinity ? {} : { maxGradNorm: this.#maxGradNorm }));
    }
    this.stepCount += 1;
    const metrics: SFTStepMetrics = {
      step: this.stepCount, loss, sequences: sequences.length, actionTokens: total, gradNorm, seconds: (performance.now() - started) / 1000,
    };
    this.metrics.push(metrics);
    if (this.#logFile !== undefined) await appendJsonLine(this.#logFile, metrics);
    await this.#onStep?.(metrics);
    return metrics;
  }
}
