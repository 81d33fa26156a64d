import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

export interface SequenceLogprobsOptions {
  /** Log-prob of each token (nats), `[N]`, all sequences back to back. */
  logp: Float32Array;
  /** Loss mask, `[N]`: nonzero includes the token (e.g. from `feedbackMask`). */
  mask: Uint8Array;
  /** Sequence boundaries, `[B + 1]`: starts at 0, never decreases, ends at N (like `cu_seqlens`). */
  seqOffsets: Int32Array;
  /** Mean over the masked tokens instead of their sum (IPO's per-token average). Default `false`. */
  average?: boolean;
  /** Array to write the `[B]` result into instead of allocating. */
  out?: Float32Array;
}

export interface SequenceLogprobsBackwardOptions {
  /** d loss / d (sequence log-prob), `[B]`. */
  gradSeq: Float32Array;
  /** The forward's loss mask, `[N]`. */
  mask: Uint8Array;
  /** The forward's sequence boundaries, `[B + 1]`. */
  seqOffsets: Int32Array;
  /** Whether the forward averaged. Default `false`. */
  average?: boolean;
  /** Array to write the `[N]` gradient into instead of allocating. */
  out?: Float32Array;
}

declare module '../native.js' {
  interface NativeAddon {
    sequenceLogprobs(options: SequenceLogprobsOptions): Float32Array;
    sequenceLogprobsAsync(options: SequenceLogprobsOptions): Promise<Float32Array>;
    sequenceLogprobsBackward(options: SequenceLogprobsBackwardOptions): Float32Array;
    sequenceLogprobsBackwardAsync(options: SequenceLogprobsBackwardOptions): Promise<Float32Array>;
  }
}

/**
 * Per-sequence log-prob: the sum of its masked token log-probs, or with `average` their
 * mean (a sequence with no masked tokens gets 0). Sums run in double. Masked-out tokens
 * are skipped, not multiplied by 0, so a NaN there does not reach the result.
 *
 * @returns `[B]` (`out` when given).
 * @throws TypeError for a wrong argument type; RangeError for mismatched lengths or
 *   seqOffsets not starting at 0, decreasing, or not ending at N.
 */
export function sequenceLogprobs(options: OnDevice<SequenceLogprobsOptions>): OnDevice<Float32Array>;
export function sequenceLogprobs(options: SequenceLogprobsOptions): Float32Array;
export function sequenceLogprobs(options: SequenceLogprobsOptions | OnDevice<SequenceLogprobsOptions>): Float32Array | OnDevice<Float32Array> {
  return native.sequenceLogprobs(options as SequenceLogprobsOptions);
}

/**
 * {@link sequenceLogprobs} off the event loop (run at once, settling at the next microtask,
 * when its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function sequenceLogprobsAsync(options: OnDevice<SequenceLogprobsOptions>): Promise<OnDevice<Float32Array>>;
export function sequenceLogprobsAsync(options: SequenceLogprobsOptions): Promise<Float32Array>;
export function sequenceLogprobsAsync(
  options: SequenceLogprobsOptions | OnDevice<SequenceLogprobsOptions>,
): Promise<Float32Array | OnDevice<Float32Array>> {
  return native.sequenceLogprobsAsync(options as SequenceLogprobsOptions);
}

/**
 * Gradient of {@link sequenceLogprobs}: d loss / d logp[t] = mask[t] * gradSeq[i], divided
 * by the masked count of sequence i with `average` (0 for a sequence without masked
 * tokens). Masked-out tokens get exactly 0.
 *
 * @returns `[N]` (`out` when given).
 * @throws TypeError for a wrong argument type; RangeError for mismatched lengths or bad
 *   seqOffsets.
 */
export function sequenceLogprobsBackward(options: OnDevice<SequenceLogprobsBackwardOptions>): OnDevice<Float32Array>;
export function sequenceLogprobsBackward(options: SequenceLogprobsBackwardOptions): Float32Array;
export function sequenceLogprobsBackward(options: SequenceLogprobsBackwardOptions | OnDevice<SequenceLogprobsBackwardOptions>): Float32Array | OnDevice<Float32Array> {
  return native.sequenceLogprobsBackward(options as SequenceLogprobsBackwardOptions);
}

/**
 * {@link sequenceLogprobsBackward} off the event loop (run at once, settling at the next
 * microtask, when its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same
 * errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function sequenceLogprobsBackwardAsync(options: OnDevice<SequenceLogprobsBackwardOptions>): Promise<OnDevice<Float32Array>>;
export function sequenceLogprobsBackwardAsync(options: SequenceLogprobsBackwardOptions): Promise<Float32Array>;
export function sequenceLogprobsBackwardAsync(
  options: SequenceLogprobsBackwardOptions | OnDevice<SequenceLogprobsBackwardOptions>,
): Promise<Float32Array | OnDevice<Float32Array>> {
  return native.sequenceLogprobsBackwardAsync(options as SequenceLogprobsBackwardOptions);
}
