/**
 * GRPO's episode filters: the trainer's own filters over its episodes, and how they join
 * the SDK's `TrajectoryFilter`s in one `applyFilters` pass.
 */
import type { TrajectoryFilter } from '../../filters/index.js';
import type { Episode } from '../rollout.js';

/**
 * A filter over the trainer's own episodes, for rules the SDK's `TrajectoryFilter`s cannot
 * see (e.g. an environment's own action markup). Filters mask; the episodes stay in the
 * metrics and logs.
 */
export interface EpisodeFilter {
  /** Key of this filter's counts in {@link GRPOStepMetrics.filtered}. */
  name: string;
  /** Whether to remove `episode`; `group` holds all episodes of its prompt, itself included. */
  removes(episode: Episode<unknown>, group: readonly Episode<unknown>[]): boolean;
}

/** An episode filter as the SDK's `applyFilters` takes it: flags over the batch of `episodes`. */
export function asTrajectoryFilter(
  filter: TrajectoryFilter | EpisodeFilter,
  episodes: readonly Episode<unknown>[],
  groupSize: number,
): TrajectoryFilter {
  if ('flag' in filter) return filter;
  return {
    name: filter.name,
    flag: () =>
      Uint8Array.from(episodes, (episode, i) => {
        const start = Math.floor(i / groupSize) * groupSize;
        return filter.removes(episode, episodes.slice(start, start + groupSize)) ? 1 : 0;
      }),
  };
}
