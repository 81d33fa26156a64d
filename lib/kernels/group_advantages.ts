import type { OnDevice } from '../cuda.js';
import { native } from '../native.js';

export interface GroupAdvantagesOptions {
  /** Scalar reward of each sequence, `[B]`. */
  rewards: Float32Array;
  /**
   * Group of each reward, `[B]`: any int32 values (negative too), in any order, not
   * necessarily contiguous. Give exactly one of `groupIds` and `groupSize`.
   */
  groupIds?: Int32Array;
  /**
   * Size of contiguous groups: rewards `[k * groupSize, (k + 1) * groupSize)` form group k.
   * An integer >= 1 that divides `B`. Give exactly one of `groupIds` and `groupSize`.
   */
  groupSize?: number;
  /** Divide by the group's unbiased std (GRPO). `false` only centres (Dr.GRPO). Default `true`. */
  scaleByStd?: boolean;
  /** Added to the std before dividing; a finite number >= 0. Default `1e-6`. */
  epsilon?: number;
  /** Array to write the advantages into, `[B]`, instead of allocating. */
  out?: Float32Array;
}

declare module '../native.js' {
  interface NativeAddon {
    groupAdvantages(options: GroupAdvantagesOptions): Float32Array;
    groupAdvantagesAsync(options: GroupAdvantagesOptions): Promise<Float32Array>;
  }
}

/**
 * Group-normalized advantages (GRPO, Dr.GRPO; MATH.md): A = (r - mean_g) / (std_g + epsilon)
 * with the unbiased std (n - 1), or r - mean_g without `scaleByStd`. As in verl, a group
 * of one has mean 0 and std 1. A zero-variance group gets 0 (also with `epsilon` 0).
 * Means and variances are computed in double in two passes, in input order within each
 * group, so results are bitwise identical for any thread count. A NaN or Inf reward makes
 * its own group NaN and no other.
 *
 * @returns The advantages, `[B]` (`out` when given).
 * @throws TypeError for a wrong argument type, or unless exactly one of `groupIds` and
 *   `groupSize` is given; RangeError for a length or value out of range (`groupIds`
 *   length not B, `groupSize` not dividing B, negative `epsilon`).
 */
export function groupAdvantages(options: OnDevice<GroupAdvantagesOptions>): OnDevice<Float32Array>;
export function groupAdvantages(options: GroupAdvantagesOptions): Float32Array;
export function groupAdvantages(options: GroupAdvantagesOptions | OnDevice<GroupAdvantagesOptions>): Float32Array | OnDevice<Float32Array> {
  return native.groupAdvantages(options as GroupAdvantagesOptions);
}

/**
 * {@link groupAdvantages} off the event loop (run at once, settling at the next microtask, when
 * its arrays hold at most 64 KiB: README, "Async calls"). Rejects with the same errors.
 * While it runs, JavaScript may change or transfer its arrays: those on an ordinary
 * ArrayBuffer were copied when the call was made, and a given `out` receives the result
 * when the Promise settles (a TypeError if `out` was detached meanwhile). Arrays on a
 * SharedArrayBuffer, and DeviceArrays, are used in place, without a copy: see "Async calls"
 * in the README.
 */
export function groupAdvantagesAsync(options: OnDevice<GroupAdvantagesOptions>): Promise<OnDevice<Float32Array>>;
export function groupAdvantagesAsync(options: GroupAdvantagesOptions): Promise<Float32Array>;
export function groupAdvantagesAsync(
  options: GroupAdvantagesOptions | OnDevice<GroupAdvantagesOptions>,
): Promise<Float32Array | OnDevice<Float32Array>> {
  return native.groupAdvantagesAsync(options as GroupAdvantagesOptions);
}
