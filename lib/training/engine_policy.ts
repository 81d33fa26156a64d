/**
 * A trainer's policy whose turns are sampled by a rollout engine: the trainer policy scores
 * and trains, a {@link TokenPolicy} (llama.cpp in process, or a vLLM / SGLang server through
 * `TokenCompletionClient`) samples token in, token out with its own log-probs. Which engine
 * samples is a constructor argument; the trainer never sees the difference, except in the
 * rollout/trainer log-prob mismatch that rollout correction measures and corrects.
 */
import type { TokenPolicy } from '../chat_client/tokens.js';
import { checkNumber, checkObject, typeError } from '../check.js';
import type {
  ObservationRole,
  Policy,
  PolicyBatch,
  PolicyLogprobs,
  PolicyOutputGradient,
  SampledTurn,
  SampleOptions,
} from './trainable_policy.js';

/** Options of {@link EnginePolicy}. */
export interface EnginePolicyOptions {
  /** The policy that encodes observations, scores batches and is trained. */
  trainer: Policy;
  /** The engine that samples turns. */
  engine: TokenPolicy;
  /** Text of sampled ids, what the environment receives. */
  decode: (tokens: Int32Array) => string;
  /** Ids that end a turn (kept in the turn). */
  stopTokenIds: readonly number[];
  /**
   * Sampling temperature sent to the engine. Default 1. The trainer scores with its own; a
   * difference is a rollout/trainer mismatch (which is what rollout correction is for).
   */
  temperature?: number;
  /** Nucleus sampling in the engine, in (0, 1]. Default 1 (off). */
  topP?: number;
}

/**
 * A {@link Policy} that samples with a rollout engine and trains with `trainer`. Each turn's
 * behaviour log-probs are the engine's; its weight version (`TokenCompletion.weightVersion`,
 * when the engine reports one) rides with the turn as `policyVersion`. Keeping the engine's
 * weights in step with the trainer's is the caller's (export and reload after optimizer steps).
 */
export class EnginePolicy implements Policy {
  readonly trainer: Policy;
  readonly engine: TokenPolicy;
  private readonly options: Required<Omit<EnginePolicyOptions, 'trainer' | 'engine'>>;

  /** @throws TypeError / RangeError naming a bad option. */
  constructor(options: EnginePolicyOptions) {
    checkObject('options', options);
    if (typeof options.trainer?.logprobs !== 'function') throw typeError('options.trainer', 'a Policy', options.trainer);
    if (typeof options.engine?.complete !== 'function') throw typeError('options.engine', 'a TokenPolicy (with complete())', options.engine);
    if (typeof options.decode !== 'function') throw typeError('options.decode', 'a function', options.decode);
    if (!Array.isArray(options.stopTokenIds)) throw typeError('options.stopTokenIds', 'an array of token ids', options.stopTokenIds);
    this.trainer = options.trainer;
    this.engine = options.engine;
    this.options = {
      decode: options.decode,
      stopTokenIds: [...options.stopTokenIds],
      temperature: checkNumber('options.temperature', options.temperature, 1, 0, 1e6),
      topP: checkNumber('options.topP', options.topP, 1, Number.MIN_VALUE, 1),
    };
  }

  encode(text: string, role: ObservationRole): Int32Array {
    return this.trainer.encode(text, role);
  }

  /** One engine request per context, all in flight together; seeds drawn from `options.random`. */
  async sampleTurns(contexts: readonly Int32Array[], options: SampleOptions): Promise<SampledTurn[]> {
    const seeds = contexts.map(() => Math.floor(options.random() * 2 ** 31));
    const completions = await Promise.all(contexts.map((context, i) => this.engine.complete({
      promptTokenIds: Array.from(context),
      maxTokens: options.maxTokens,
      temperature: this.options.temperature,
      topP: this.options.topP,
      n: 1,
      seed: seeds[i]!,
      stopTokenIds: this.options.stopTokenIds,
    })));
    return completions.map((completion) => {
      const sample = completion.samples[0]!;
      const tokens = Int32Array.from(sample.tokenIds);
      const version = completion.weightVersion === undefined ? NaN : Number(completion.weightVersion);
      return {
        tokens,
        logprobs: Float32Array.from(sample.logprobs),
        text: this.options.decode(tokens),
        ...(Number.isInteger(version) ? { policyVersion: version } : {}),
      };
    });
  }

  logprobs(batch: PolicyBatch, options?: { withEntropy?: boolean }): Promise<PolicyLogprobs> {
    return this.trainer.logprobs(batch, options);
  }

  accumulateGradients(
    batch: PolicyBatch,
    lossGradient: (outputs: PolicyLogprobs) => PolicyOutputGradient,
    options?: { withEntropy?: boolean },
  ): Promise<PolicyLogprobs> {
    return this.trainer.accumulateGradients(batch, lossGradient, options);
  }

  applyGradients(options?: { maxGradNorm?: number }): Promise<{ gradNorm: number }> {
    return this.trainer.applyGradients(options);
  }

  /** A frozen copy of the trainer policy (it samples with the trainer's own sampler). */
  frozenCopy(): Promise<Policy> {
    return this.trainer.frozenCopy();
  }

  saveState(dir: string): Promise<void> {
    return this.trainer.saveState(dir);
  }

  loadState(dir: string): Promise<void> {
    return this.trainer.loadState(dir);
  }

  dispose(): void {
    this.trainer.dispose?.();
  }
}
