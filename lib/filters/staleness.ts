/**
 * Asynchronous rollouts: episodes sampled by older weights than the trainer's. Staleness of
 * a sequence is the trainer's policy version minus the version that sampled it
 * (`TokenBatch.policyVersions`, the oldest of its actions); sequences staler than
 * `maxStaleness` versions are filtered out, and the stale fraction is reported.
 */
import type { TokenBatch } from '../trajectory/batch.js';
import type { TrajectoryFilter } from './filters.js';
import { checkNonNegativeInteger, rangeError, typeError } from '../check.js';

/** How stale a batch is. */
export interface StalenessStats {
  /** Staleness of each sequence in versions; -1 where its version is unknown. */
  staleness: Int32Array;
  /** Sequences with a known version. */
  versioned: number;
  /** Mean and largest staleness over them (0 when none). */
  mean: number;
  max: number;
  /** Sequences staler than `maxStaleness`, and their share of the whole batch. */
  stale: number;
  staleFraction: number;
}

function trainerVersionOf(value: number | (() => number), name: string): number {
  return checkNonNegativeInteger(name, typeof value === 'function' ? value() : value);
}

/**
 * The staleness of every sequence against the trainer's `trainerVersion`.
 * @param maxStaleness sequences staler than this count as stale. Default Infinity.
 * @throws RangeError when a sequence's version is newer than the trainer's.
 */
export function stalenessStats(batch: Pick<TokenBatch, 'size' | 'policyVersions'>, trainerVersion: number, maxStaleness = Infinity): StalenessStats {
  checkNonNegativeInteger('trainerVersion', trainerVersion);
  if (maxStaleness !== Infinity) checkNonNegativeInteger('maxStaleness', maxStaleness);
  if (!(batch.policyVersions instanceof Int32Array)) throw typeError('batch.policyVersions', 'an Int32Array', batch.policyVersions);
  const staleness = new Int32Array(batch.size);
  let versioned = 0;
  let sum = 0;
  let max = 0;
  let stale = 0;
  for (let i = 0; i < batch.size; i++) {
    const version = batch.policyVersions[i]!;
    if (version < 0) { staleness[i] = -1; continue; }
    const lag = trainerVersion - version;
    if (lag < 0) throw rangeError(`batch.policyVersions[${i}]`, `a version at most the trainer's ${trainerVersion}`, version);
    staleness[i] = lag;
    versioned++;
    sum += lag;
    max = Math.max(max, lag);
    if (lag > maxStaleness) stale++;
  }
  return { staleness, versioned, mean: versioned > 0 ? sum / versioned : 0, max, stale, staleFraction: batch.size > 0 ? stale / batch.size : 0 };
}

/**
 * Flags sequences sampled more than `maxStaleness` policy versions before the trainer's
 * current one (sequences of unknown version are kept). Use it with `applyFilters`; its
 * report's `removedTrajectories / trajectories` is the stale fraction.
 * @param trainerVersion the trainer's version now, or a function read at each call.
 */
export function staleFilter(options: { trainerVersion: number | (() => number); maxStaleness: number }): TrajectoryFilter {
  const maxStaleness = checkNonNegativeInteger('options.maxStaleness', options.maxStaleness);
  if (typeof options.trainerVersion !== 'function') trainerVersionOf(options.trainerVersion, 'options.trainerVersion');
  return {
    name: 'stale',
    flag(batch: TokenBatch): Uint8Array {
      const { staleness } = stalenessStats(batch, trainerVersionOf(options.trainerVersion, 'options.trainerVersion'), maxStaleness);
      return Uint8Array.from(staleness, (lag) => (lag > maxStaleness ? 1 : 0));
    },
  };
}
