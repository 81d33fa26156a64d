import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

/** Element type of a logits array: `'f32'` (a `Float32Array`) or `'bf16'` (a `Uint16Array` of raw bfloat16 bits). */
export type LogitsDtype = 'f32' | 'bf16';

/** The logits and labels both {@link tokenLogprobs} and {@link tokenLogprobsBackward} read. */
export interface TokenLogitsInput {
  /**
   * Logits, `[N * vocabSize]`, one row of `vocabSize` per token, back to back: a
   * `Float32Array`, or with `dtype: 'bf16'` a `Uint16Array` holding bfloat16 bit patterns
   * (the upper 16 bits of each float32; read as bf16, accumulated in f32/f64).
   */
  logits: Float32Array | Uint16Array;
  /** Entries per row V: an integer >= 1. */
  vocabSize: number;
  /** Token whose log-probability is taken, per row, `[N]`: each in `[0, vocabSize)`. N = `labels.length`. */
  labels: Int32Array;
  /**
   * Softmax temperature T in [1e-37, 1e37] (beyond, log2(e) / T is no longer a normal
   * float): probabilities are `softmax(logits / T)`. Default 1.
   */
  temperature?: number;
  /** Element type of `logits`; must match its array type. Default `'f32'`. */
  dtype?: LogitsDtype;
}

export interface TokenLogprobsOptions extends TokenLogitsInput {
  /** Also return the entropy of each row's distribution (nats). Default false. */
  withEntropy?: boolean;
  /** Arrays to write into instead of allocating (`logp`, `entropy`: `[N]` each; `entropy` is used only with `withEntropy`). */
  out?: { logp?: Float32Array; entropy?: Float32Array };
}

export interface TokenLogprobsResult {
  /** log softmax(logits / T)[label] per token, `[N]` (nats, <= 0). */
  logp: Float32Array;
  /** Entropy of softmax(logits / T) per token, `[N]` (nats); present only with `withEntropy`. */
  entropy?: Float32Array;
}

export interface TokenLogprobsBackwardOptions extends TokenLogitsInput {
  /** dLoss/dlogp per token, `[N]`. */
  gradLogp: Float32Array;
  /** dLoss/dentropy per token, `[N]`. Default: the loss does not depend on the entropy. */
  gradEntropy?: Float32Array;
  /**
   * Where to write dLoss/dlogits, `[N * vocabSize]` f32. It may be the (f32) `logits`
   * array itself, for an in-place backward that overwrites the logits with their gradient
   * (bitwise the same result, except with `gradEntropy`, where it agrees to float
   * rounding); a partial overlap with `logits` is refused.
   */
  out?: Float32Array;
}

declare module '../native.js' {
  interface NativeAddon {
    tokenLogprobs(options: TokenLogprobsOptions): TokenLogprobsResult;
    tokenLogprobsAsync(options: TokenLogprobsOptions): Promise<TokenLogprobsResult>;
    tokenLogprobsBackward(options: TokenLogprobsBackwardOptions): Float32Array;
    tokenLogprobsBackwardAsync(options: TokenLogprobsBackwardOptions): Promise<Float32Array>;
  }
}

/**
 * Log-probability of each label under softmax(logits / temperature), and optionally the
 * entropy of that distribution, without materialising the probabilities: each row is
 * read from memory once (an online softmax over L1-sized blocks).
 *
 * @throws TypeError for a wrong argument type (including a logits array that does not
 *   match `dtype`); RangeError for a length or value out of range (a label outside
 *   `[0, vocabSize)`, `temperature` outside [1e-37, 1e37],
 *   `logits.length != labels.length * vocabSize`).
 */
export function tokenLogprobs(options: OnDevice<TokenLogprobsOptions>): OnDevice<TokenLogprobsResult>;
export function tokenLogprobs(options: TokenLogprobsOptions): TokenLogprobsResult;
export function tokenLogprobs(options: TokenLogprobsOptions | OnDevice<TokenLogprobsOptions>): TokenLogprobsResult | OnDevice<TokenLogprobsResult> {
  return native.tokenLogprobs(options as TokenLogprobsOptions);
}

/**
 * {@link tokenLogprobs} off the event loop (run at once, settling at the next microtask, when
 * its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function tokenLogprobsAsync(options: OnDevice<TokenLogprobsOptions>): Promise<OnDevice<TokenLogprobsResult>>;
export function tokenLogprobsAsync(options: TokenLogprobsOptions): Promise<TokenLogprobsResult>;
export function tokenLogprobsAsync(
  options: TokenLogprobsOptions | OnDevice<TokenLogprobsOptions>,
): Promise<TokenLogprobsResult | OnDevice<TokenLogprobsResult>> {
  return native.tokenLogprobsAsync(options as TokenLogprobsOptions);
}

/**
 * The gradient of a loss L(logp, entropy) with respect to the logits, given dL/dlogp and
 * optionally dL/dentropy: `dlogits_v = (gLogp * (1[v = label] - p_v) - gEntropy * p_v *
 * (log p_v + H)) / T`. Returns `[N * vocabSize]` f32 (the `out` array when given).
 *
 * @throws TypeError / RangeError as {@link tokenLogprobs}, and for gradients whose length
 *   is not N or an `out` that overlaps `logits` without being it.
 */
export function tokenLogprobsBackward(options: OnDevice<TokenLogprobsBackwardOptions>): OnDevice<Float32Array>;
export function tokenLogprobsBackward(options: TokenLogprobsBackwardOptions): Float32Array;
export function tokenLogprobsBackward(options: TokenLogprobsBackwardOptions | OnDevice<TokenLogprobsBackwardOptions>): Float32Array | OnDevice<Float32Array> {
  return native.tokenLogprobsBackward(options as TokenLogprobsBackwardOptions);
}

/**
 * {@link tokenLogprobsBackward} off the event loop (run at once, settling at the next
 * microtask, when its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same
 * errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function tokenLogprobsBackwardAsync(options: OnDevice<TokenLogprobsBackwardOptions>): Promise<OnDevice<Float32Array>>;
export function tokenLogprobsBackwardAsync(options: TokenLogprobsBackwardOptions): Promise<Float32Array>;
export function tokenLogprobsBackwardAsync(
  options: TokenLogprobsBackwardOptions | OnDevice<TokenLogprobsBackwardOptions>,
): Promise<Float32Array | OnDevice<Float32Array>> {
  return native.tokenLogprobsBackwardAsync(options as TokenLogprobsBackwardOptions);
}
