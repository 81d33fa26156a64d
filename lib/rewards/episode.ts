/**
 * Episode rewards: the score of an agent's final answer against its task's gold answer(s).
 * The agents use them as their default `reward` option (see `RewardFunction`).
 */
import type { Trajectory } from '../trajectory/model.js';
import { checkFormat } from './format.js';
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

/**
 * QA reward, AceSearcher's EM × format: the SQuAD exact match of the answer with any gold
 * answer (`qaExactMatch`), times 1 when the episode's last turn is well formed (`checkFormat`:
 * its final answer is written as one, `\boxed{…}` or `<answer>…</answer>`, with fences and
 * think tags closed) and 0 when it is not. AceSearcher scores only an answer inside its
 * `<answer>` tags (`extract_answer` in `rollout/create_train_data.py`, ritaranx/AceSearcher
 * commit 16a9b3c3), so an answer left as a bare last line earns nothing. Without a
 * trajectory (a direct call) only the exact match is scored.
 */
export function qaReward(answer: string | null, task: GoldAnswers, trajectory?: Trajectory): number {
  if (answer === null || task.gold === undefined) return 0;
  const last = trajectory?.turns.at(-1)?.action.text;
  if (trajectory !== undefined && (last === undefined || !checkFormat(last))) return 0;
  return qaExactMatch(answer, task.gold);
}
