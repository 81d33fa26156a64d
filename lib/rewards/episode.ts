/**
 * Episode rewards: the score of an agent's final answer against its task's gold answer(s).
 * The agents use them as their default `reward` option (see `RewardFunction`).
 */
import { answersMatch } from './math.js';
import { qaExactMatch } from './qa.js';

/** What an episode reward reads of a task: its reference answer(s). */
export interface GoldAnswers {
  /** Reference answer(s); a task without one gets no reward. */
  gold?: string | readonly string[];
}

/** Math-style reward: 1 when the answer equals any gold answer (`answersMatch`), else 0. */
export function mathReward(answer: string | null, task: GoldAnswers): number {
  if (answer === null || task.gold === undefined) return 0;
  const golds = typeof task.gold === 'string' ? [task.gold] : task.gold;
  return golds.some((gold) => answersMatch(answer, gold)) ? 1 : 0;
}

/** QA reward: SQuAD exact match of the answer with any gold answer (`qaExactMatch`). */
export function qaReward(answer: string | null, task: GoldAnswers): number {
  return answer === null || task.gold === undefined ? 0 : qaExactMatch(answer, task.gold);
}
