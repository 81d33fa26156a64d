/**
 * Trajectory filters. A filter masks, it never drops: it flags sequences of a `TokenBatch`,
 * `applyFilters` turns the flags into the per-sequence `keep` array that `feedbackMask`
 * consumes, and the report says what each filter removed. The batch keeps every trajectory.
 */
import type { TokenBatch } from '../trajectory/batch.js';
import type { Trajectory } from '../trajectory/model.js';
import { isVoidTurn, type VoidTurnOptions } from './void-turn.js';
import { checkArray, checkNonNegativeInteger, checkObject, rangeError, typeError } from '../check.js';

/** A rule that flags sequences to remove from the policy loss. */
export interface TrajectoryFilter {
  /** Name used in reports and log annotations. */
  readonly name: string;
  /** Returns a Uint8Array[B]: 1 where the sequence is to be removed. */
  flag(batch: TokenBatch): Uint8Array;
}

/** What one filter removed. */
export interface FilterStats {
  name: string;
  /** Sequences this filter flagged, whether or not an earlier filter had removed them. */
  flaggedTrajectories: number;
  /** Sequences this filter removed that no earlier filter had removed. */
  removedTrajectories: number;
  /** Action tokens of the sequences counted in `removedTrajectories`. */
  removedTokens: number;
  /** Ids of the trajectories counted in `removedTrajectories`. */
  removedIds: string[];
}

/** The outcome of `applyFilters`. */
export interface FilterReport {
  trajectories: number;
  keptTrajectories: number;
  removedTrajectories: number;
  /** Action tokens of the whole batch. */
  actionTokens: number;
  /** Action tokens of removed sequences. */
  removedTokens: number;
  /** Per filter, in the order applied. */
  filters: FilterStats[];
  /** Per sequence, the name of the first filter that removed it, or null if kept. */
  removedBy: (string | null)[];
}

function checkBatch(batch: TokenBatch): void {
  checkObject('batch', batch);
  if (!Number.isInteger(batch.size) || !Array.isArray(batch.trajectories) || batch.trajectories.length !== batch.size) {
    throw typeError('batch', 'a TokenBatch from packTrajectories', batch);
  }
}

/**
 * Applies filters in order and combines their flags. The returned `keep` (Uint8Array[B],
 * 1 = kept) goes to `feedbackMask({ roles, seqOffsets, keep })`. If `keep` is given, its
 * zeros count as already removed (by an earlier stage) and it is not modified.
 */
export function applyFilters(batch: TokenBatch, filters: readonly TrajectoryFilter[], keep?: Uint8Array): { keep: Uint8Array; report: FilterReport } {
  checkBatch(batch);
  checkArray('filters', filters);
  if (keep !== undefined && (!(keep instanceof Uint8Array) || keep.length !== batch.size)) {
    throw typeError('keep', `a Uint8Array of length ${batch.size}`, keep);
  }
  const kept = keep === undefined ? new Uint8Array(batch.size).fill(1) : keep.slice();
  const removedBy: (string | null)[] = new Array(batch.size).fill(null);
  const stats: FilterStats[] = [];
  filters.forEach((filter, f) => {
    if (filter === null || typeof filter !== 'object' || typeof filter.flag !== 'function') throw typeError(`filters[${f}]`, 'a TrajectoryFilter', filter);
    const flags = filter.flag(batch);
    if (!(flags instanceof Uint8Array) || flags.length !== batch.size) throw typeError(`filters[${f}].flag(batch)`, `a Uint8Array of length ${batch.size}`, flags);
    const entry: FilterStats = { name: filter.name, flaggedTrajectories: 0, removedTrajectories: 0, removedTokens: 0, removedIds: [] };
    for (let i = 0; i < batch.size; i++) {
      if (flags[i] === 0) continue;
      entry.flaggedTrajectories++;
      if (kept[i] === 0) continue;
      kept[i] = 0;
      removedBy[i] = filter.name;
      entry.removedTrajectories++;
      entry.removedTokens += batch.actionTokenCounts[i]!;
      entry.removedIds.push(batch.trajectories[i]!.id);
    }
    stats.push(entry);
  });
  let actionTokens = 0;
  let removedTokens = 0;
  let keptTrajectories = 0;
  for (let i = 0; i < batch.size; i++) {
    actionTokens += batch.actionTokenCounts[i]!;
    if (kept[i] === 1) keptTrajectories++;
    else removedTokens += batch.actionTokenCounts[i]!;
  }
  return {
    keep: kept,
    report: {
      trajectories: batch.size, keptTrajectories, removedTrajectories: batch.size - keptTrajectories,
      actionTokens, removedTokens, filters: stats, removedBy,
    },
  };
}

/**
 * SimpleTIR's void-turn filter: flags a trajectory with any void turn (see `isVoidTurn`).
 * A turn with a structured tool call is never void.
 */
export function voidTurnFilter(options: VoidTurnOptions = {}): TrajectoryFilter {
  checkObject('options', options);
  return {
    name: 'void-turn',
    flag(batch) {
      checkBatch(batch);
      return Uint8Array.from(batch.trajectories, (trajectory: Trajectory) => trajectory.turns.some(
        (turn) => turn.action.toolCall === undefined && isVoidTurn(turn.action.text, options),
      ) ? 1 : 0);
    },
  };
}

/** Flags episodes cut by packing (`batch.truncated`) or marked `truncated` by the rollout. */
export function truncatedFilter(): TrajectoryFilter {
  return {
    name: 'truncated',
    flag(batch) {
      checkBatch(batch);
      return Uint8Array.from(batch.trajectories, (trajectory, i) => (batch.truncated[i] === 1 || trajectory.truncated === true ? 1 : 0));
    },
  };
}

/**
 * THOR's filter of episodes with failed executions: flags a trajectory with any turn whose
 * tool response has status 'error' or 'timeout' (code that did not run, a tool that failed),
 * so that only episodes whose every call ran stay in the episode-level loss.
 */
export function failedExecutionFilter(): TrajectoryFilter {
  return {
    name: 'failed-execution',
    flag(batch) {
      checkBatch(batch);
      return Uint8Array.from(batch.trajectories, (trajectory) =>
        trajectory.turns.some((turn) => turn.response !== undefined && turn.response.status !== 'success') ? 1 : 0);
    },
  };
}

/** Flags episodes with more than `maxTurns` turns. */
export function maxTurnsFilter(maxTurns: number): TrajectoryFilter {
  checkNonNegativeInteger('maxTurns', maxTurns);
  return {
    name: 'max-turns',
    flag(batch) {
      checkBatch(batch);
      return Uint8Array.from(batch.trajectories, (trajectory) => (trajectory.turns.length > maxTurns ? 1 : 0));
    },
  };
}

/**
 * DAPO dynamic sampling: flags every member of a group whose rewards are all equal (within
 * `tolerance`, default 0), since group-relative advantages give it no learning signal.
 * Groups of one are flagged for the same reason.
 * @throws RangeError if a trajectory has no reward.
 */
export function equalRewardGroupFilter(tolerance = 0): TrajectoryFilter {
  if (typeof tolerance !== 'number' || !(tolerance >= 0)) throw rangeError('tolerance', 'a non-negative number', tolerance);
  return {
    name: 'equal-reward-group',
    flag(batch) {
      checkBatch(batch);
      const groups = batch.groupKeys.length;
      const lowest = new Float64Array(groups).fill(Infinity);
      const highest = new Float64Array(groups).fill(-Infinity);
      for (let i = 0; i < batch.size; i++) {
        const reward = batch.rewards[i]!;
        if (Number.isNaN(reward)) throw rangeError(`batch.trajectories[${i}].reward`, 'a reward for every trajectory', batch.trajectories[i]!.reward);
        const g = batch.groupIds[i]!;
        lowest[g] = Math.min(lowest[g]!, reward);
        highest[g] = Math.max(highest[g]!, reward);
      }
      return Uint8Array.from(batch.groupIds, (g) => (highest[g]! - lowest[g]! <= tolerance ? 1 : 0));
    },
  };
}

/**
 * Trajectories annotated for export: a copy of each with `metadata.filteredBy` set to the
 * filter that removed it (null when kept), so logs keep the dropped episodes and the reason.
 */
export function annotateFiltered(batch: TokenBatch, report: FilterReport): Trajectory[] {
  checkBatch(batch);
  if (report === null || typeof report !== 'object' || !Array.isArray(report.removedBy) || report.removedBy.length !== batch.size) {
    throw typeError('report', `a FilterReport for ${batch.size} trajectories`, report);
  }
  return batch.trajectories.map((trajectory, i) => ({
    ...trajectory,
    metadata: { ...trajectory.metadata, filteredBy: report.removedBy[i] },
  }));
}
