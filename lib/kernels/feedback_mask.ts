import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

/** Token roles of the ragged batch layout: what produced each token. */
export const Role = {
  /** Prompt and system text: never trained on. */
  prompt: 0,
  /** Sampled from the policy: the only role trained on. */
  action: 1,
  /** Tool or environment output fed back to the model (masked out, SimpleTIR). */
  feedback: 2,
  /** Padding of a padded batch. */
  padding: 3,
} as const;

export interface FeedbackMaskOptions {
  /** Role of each token, `[N]`: 0 prompt, 1 action, 2 feedback, 3 padding (see {@link Role}). */
  roles: Uint8Array;
  /** Sequence boundaries, `[B + 1]`: starts at 0, never decreases, ends at N (like `cu_seqlens`). */
  seqOffsets: Int32Array;
  /** Per-sequence keep flags, `[B]`: 0 removes a trajectory from the loss (e.g. a filtered one). Default: keep all. */
  keep?: Uint8Array;
  /** Arrays to write into instead of allocating (`mask`: `[N]`, `actionTokens`: `[B]`). */
  out?: { mask?: Uint8Array; actionTokens?: Int32Array };
}

export interface FeedbackMaskResult {
  /** Loss mask, `[N]`: 1 on action tokens of kept sequences, else 0. */
  mask: Uint8Array;
  /** Masked-in tokens per sequence, `[B]`. */
  actionTokens: Int32Array;
}

declare module '../native.js' {
  interface NativeAddon {
    feedbackMask(options: FeedbackMaskOptions): FeedbackMaskResult;
    feedbackMask(options: OnDevice<FeedbackMaskOptions>): OnDevice<FeedbackMaskResult>;
    feedbackMaskAsync(options: FeedbackMaskOptions): Promise<FeedbackMaskResult>;
    feedbackMaskAsync(options: OnDevice<FeedbackMaskOptions>): Promise<OnDevice<FeedbackMaskResult>>;
  }
}

/**
 * The loss mask of a batch from its token roles: only action tokens of kept trajectories
 * are trained on; prompt, tool feedback and padding are masked out. Given device arrays
 * (`cuda.DeviceArray`, all on one GPU) it runs there and returns device arrays.
 *
 * @throws TypeError for a wrong argument type; RangeError for a length or value out of
 *   range (e.g. a role outside 0..3, seqOffsets not ending at `roles.length`).
 */
export function feedbackMask(options: OnDevice<FeedbackMaskOptions>): OnDevice<FeedbackMaskResult>;
export function feedbackMask(options: FeedbackMaskOptions): FeedbackMaskResult;
export function feedbackMask(
  options: FeedbackMaskOptions | OnDevice<FeedbackMaskOptions>,
): FeedbackMaskResult | OnDevice<FeedbackMaskResult> {
  return native.feedbackMask(options as FeedbackMaskOptions);
}

/**
 * {@link feedbackMask} off the event loop (run at once, settling at the next microtask, when
 * its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function feedbackMaskAsync(options: OnDevice<FeedbackMaskOptions>): Promise<OnDevice<FeedbackMaskResult>>;
export function feedbackMaskAsync(options: FeedbackMaskOptions): Promise<FeedbackMaskResult>;
export function feedbackMaskAsync(
  options: FeedbackMaskOptions | OnDevice<FeedbackMaskOptions>,
): Promise<FeedbackMaskResult | OnDevice<FeedbackMaskResult>> {
  return native.feedbackMaskAsync(options as FeedbackMaskOptions);
}
