/**
 * The policy a trainer drives: it samples turns, scores token batches, and owns its
 * parameters and optimizer. The trainers only see token ids, log-probs and gradients with
 * respect to log-probs, so a policy may be a tfjs model (see `TfjsPolicy` in `tirl/tfjs`),
 * a remote model server, or a hand-written table.
 */

/**
 * A ragged batch of token sequences in the kernels' layout: all tokens back to back,
 * `seqOffsets` (`[B + 1]`, from 0 to N) marking where each sequence starts.
 */
export interface PolicyBatch {
  /** Token ids, `[N]`. */
  tokens: Int32Array;
  /** Sequence boundaries, `[B + 1]`. */
  seqOffsets: Int32Array;
}

/**
 * Per-token outputs of a policy on a {@link PolicyBatch}, `[N]` each, token-aligned:
 * `logp[t] = log π(tokens[t] | the tokens of its sequence before t)`, in nats. The first
 * token of each sequence has no prediction: its entries are 0 and never trained on.
 */
export interface PolicyLogprobs {
  /** Log-probability of each token given its prefix. */
  logp: Float32Array;
  /** Entropy (nats) of the distribution each token was drawn from; present when asked for. */
  entropy?: Float32Array;
  /**
   * Σ_v π_v² of the distribution each token was drawn from (the optimal-token baselines'
   * input); present when asked for with `withSumPiSquared` and the policy can compute it.
   */
  sumPiSquared?: Float32Array;
}

/** A loss's gradient with respect to {@link PolicyLogprobs}, `[N]` each. */
export interface PolicyOutputGradient {
  /** dLoss/dlogp. */
  gradLogp: Float32Array;
  /** dLoss/dentropy; absent means 0. */
  gradEntropy?: Float32Array;
}

/** How to sample one turn. */
export interface SampleOptions {
  /** Most tokens to sample in this turn (the turn ends earlier at the policy's stop token). */
  maxTokens: number;
  /**
   * Uniform random numbers in [0, 1) from the trainer's seeded generator. A policy must draw
   * all its randomness from here so that a resumed run samples what the original would have.
   */
  random: () => number;
}

/** One turn sampled by the policy. */
export interface SampledTurn {
  /** Sampled token ids (including a closing stop token, if the policy emits one). */
  tokens: Int32Array;
  /** Behaviour log-probs of those tokens under the sampling distribution, nats. */
  logprobs: Float32Array;
  /** The action as text, what the environment receives. */
  text: string;
  /**
   * Version of the weights that sampled it, for a policy whose sampler can lag its trainer
   * (a rollout engine synced every few steps); absent when the sampler is the trainer.
   */
  policyVersion?: number;
}

/** Where text enters the context: the problem statement, or a tool's or environment's output. */
export type ObservationRole = 'prompt' | 'feedback';

/**
 * A trainable policy. Gradients accumulate across {@link Policy.accumulateGradients}
 * calls until {@link Policy.applyGradients}, which is what lets a trainer split one
 * optimizer step into micro-batches.
 */
export interface Policy {
  /**
   * Tokenizes an observation for the context, including any template the policy wraps
   * around it (e.g. tool-output markers).
   */
  encode(text: string, role: ObservationRole): Int32Array;

  /**
   * Samples the next turn for each context (token ids so far), one turn per context. The
   * sampling temperature is the policy's own, the same it scores log-probs with.
   */
  sampleTurns(contexts: readonly Int32Array[], options: SampleOptions): Promise<SampledTurn[]>;

  /**
   * Token log-probs (and entropies when `withEntropy`, Σπ² when `withSumPiSquared`) under
   * the current parameters, no gradient. A policy that cannot give Σπ² leaves it out; only
   * the optimal-token-baseline estimators need it.
   */
  logprobs(batch: PolicyBatch, options?: { withEntropy?: boolean; withSumPiSquared?: boolean }): Promise<PolicyLogprobs>;

  /**
   * Runs the batch forward, hands its outputs to `lossGradient` (which computes the loss
   * and returns its gradient with respect to them), and adds the resulting parameter
   * gradient to the accumulated one. Returns the outputs it computed.
   */
  accumulateGradients(
    batch: PolicyBatch,
    lossGradient: (outputs: PolicyLogprobs) => PolicyOutputGradient,
    options?: { withEntropy?: boolean },
  ): Promise<PolicyLogprobs>;

  /**
   * One optimizer step with the accumulated gradient, then clears it. When `maxGradNorm`
   * is set the gradient is first scaled so its global L2 norm is at most that. A
   * non-finite gradient is discarded, not applied.
   *
   * @returns the global L2 norm of the accumulated gradient before clipping.
   */
  applyGradients(options?: { maxGradNorm?: number }): Promise<{ gradNorm: number }>;

  /** A copy with the current parameters that no later training changes (a reference policy). */
  frozenCopy(): Promise<Policy>;

  /** Writes parameters and optimizer state into the directory `dir` (which exists). */
  saveState(dir: string): Promise<void>;

  /** Restores what {@link Policy.saveState} wrote into `dir`. */
  loadState(dir: string): Promise<void>;

  /** Releases what the policy holds (tensors, workers). Optional. */
  dispose?(): void;
}
