import { checkArray, checkFiniteNumber, checkObject, checkString, rangeError } from '../check.js';
import type { Action, Trajectory } from '../trajectory/model.js';
/**
 * AceSearcher preference pairs (MATH.md): for a question, m decompositions × m' solutions
 * each, rewarded (exact match with a format check). Pairs are best vs worst; equal rewards
 * give no pair.
 */

/** One solution of a decomposition: its text, its answers to the sub-questions, its reward. */
export interface Solution {
  text: string;
  /** Answer to each sub-question of the decomposition, in order. */
  intermediateAnswers?: string[];
  reward: number;
  /**
   * The episode that produced it, one conversation: turn 0 the decomposition, turn k the
   * answer to sub-question k (after the documents retrieved for it), the last turn the final
   * answer (as `DecomposerSolver` writes them). When given, the pairs carry the contexts the
   * solver really saw and the real completions (`PreferencePair.context`).
   */
  trajectory?: Trajectory;
}

/** One decomposition of the question and the solutions sampled under it. */
export interface Decomposition {
  text: string;
  /** The sub-questions, in order; they give intermediate-answer pairs their prompt. */
  subQuestions?: string[];
  solutions: Solution[];
}

/** A question with its sampled decompositions. */
export interface PreferenceQuestion {
  id: string;
  question: string;
  decompositions: Decomposition[];
}

/** Which stage of AceSearcher a pair trains. */
export type PairKind = 'decomposition' | 'intermediate' | 'final';

/** A preference pair: two completions of one prompt, the chosen scoring higher. */
export interface PreferencePair {
  questionId: string;
  kind: PairKind;
  /** For 'intermediate' pairs, the 0-based sub-question index. */
  step?: number;
  prompt: string;
  chosen: string;
  rejected: string;
  chosenScore: number;
  rejectedScore: number;
  /**
   * The conversation the completions continue, as the solver saw it: the chosen episode up to
   * the turn the pair is about (its prompt, earlier turns and the response holding the
   * retrieved documents and earlier answers, with their token record when there is one). The
   * rejected completion is placed in the same context, as AceSearcher does (its pairs take the
   * passages and sub-answers of the chosen solution: `rollout/create_train_data.py`,
   * ritaranx/AceSearcher commit 16a9b3c3). Present when the solutions carried trajectories.
   */
  context?: Trajectory;
  /** The chosen completion as the model wrote it (text, token ids, log-probs); with `context`. */
  chosenAction?: Action;
  /** The rejected completion as the model wrote it; with `context`. */
  rejectedAction?: Action;
}

/** `trajectory` cut to its first `turns` turns (the last keeps its response and feedback record), as a fresh copy. */
function contextOf(trajectory: Trajectory, turns: number): Trajectory {
  const { reward: _reward, truncated: _truncated, ...rest } = trajectory;
  return structuredClone({ ...rest, turns: trajectory.turns.slice(0, turns) });
}

/** The pair's fields that carry the real context, when both solutions have the turn. */
function contextFields(chosen: Solution, rejected: Solution, turn: number): Pick<PreferencePair, 'context' | 'chosenAction' | 'rejectedAction'> | undefined {
  if (chosen.trajectory === undefined || rejected.trajectory === undefined) return undefined;
  if (chosen.trajectory.turns.length <= turn || rejected.trajectory.turns.length <= turn) return undefined;
  const chosenAction = structuredClone(chosen.trajectory.turns[turn]!.action);
  const rejectedAction = structuredClone(rejected.trajectory.turns[turn]!.action);
  return { context: contextOf(chosen.trajectory, turn), chosenAction, rejectedAction };
}

/** The text a pair shows as its prompt: the last message of its context (what the completion answers). */
function promptOf(context: Trajectory): string {
  return context.turns.at(-1)?.response?.text ?? context.prompt;
}

function argBest(scores: readonly number[], better: (a: number, b: number) => boolean): number {
  let best = 0;
  for (let i = 1; i < scores.length; i++) if (better(scores[i]!, scores[best]!)) best = i;
  return best;
}

/**
 * Builds the pairs of one question:
 * - decomposition: best vs worst decomposition by mean solution reward (prompt: the question);
 * - final: within the best decomposition, best vs worst solution by reward (prompt: question
 *   and decomposition);
 * - intermediate: for each sub-question j where those two solutions answered differently,
 *   their answers (prompt: question, decomposition and sub-question j when known).
 * Ties pick the first; pairs whose scores are equal are dropped.
 *
 * When the solutions carry their episodes (`Solution.trajectory`, as
 * `decomposerPreferenceQuestion` gives them), each pair instead carries the real context
 * (`context`: the chosen episode before the turn, so the decomposition prompt, the documents
 * retrieved for the sub-question and the earlier answers) and the real completions
 * (`chosenAction`, `rejectedAction`: the turns as generated, token ids included; `chosen` and
 * `rejected` are their texts), and `prompt` is the context's last message. A final pair then
 * needs both episodes to have the same number of turns (a cut-off worst episode gives none).
 * @throws TypeError/RangeError naming the offending field (e.g. a decomposition without solutions).
 */
export function buildPreferencePairs(question: PreferenceQuestion): PreferencePair[] {
  checkObject('question', question);
  const id = checkString('question.id', question.id);
  const text = checkString('question.question', question.question);
  const decompositions = checkArray('question.decompositions', question.decompositions) as Decomposition[];
  const scores = decompositions.map((decomposition, d) => {
    const name = `question.decompositions[${d}]`;
    checkObject(name, decomposition);
    checkString(`${name}.text`, decomposition.text);
    const solutions = checkArray(`${name}.solutions`, decomposition.solutions) as Solution[];
    if (solutions.length === 0) throw rangeError(`${name}.solutions`, 'at least one solution', solutions);
    let sum = 0;
    solutions.forEach((solution, s) => {
      checkObject(`${name}.solutions[${s}]`, solution);
      checkString(`${name}.solutions[${s}].text`, solution.text);
      sum += checkFiniteNumber(`${name}.solutions[${s}].reward`, solution.reward);
    });
    return sum / solutions.length;
  });
  const pairs: PreferencePair[] = [];
  if (decompositions.length === 0) return pairs;
  const best = argBest(scores, (a, b) => a > b);
  const worst = argBest(scores, (a, b) => a < b);
  if (scores[best]! > scores[worst]!) {
    const real = contextFields(decompositions[best]!.solutions[0]!, decompositions[worst]!.solutions[0]!, 0);
    pairs.push({
      questionId: id, kind: 'decomposition', prompt: real === undefined ? text : real.context!.prompt,
      chosen: decompositions[best]!.text, rejected: decompositions[worst]!.text,
      chosenScore: scores[best]!, rejectedScore: scores[worst]!,
      ...real,
    });
  }
  const decomposition = decompositions[best]!;
  const rewards = decomposition.solutions.map((solution) => solution.reward);
  const bestSolution = decomposition.solutions[argBest(rewards, (a, b) => a > b)]!;
  const worstSolution = decomposition.solutions[argBest(rewards, (a, b) => a < b)]!;
  if (!(bestSolution.reward > worstSolution.reward)) return pairs;
  const context = `${text}\n\n${decomposition.text}`;
  const chosenAnswers = bestSolution.intermediateAnswers ?? [];
  const rejectedAnswers = worstSolution.intermediateAnswers ?? [];
  for (let step = 0; step < Math.min(chosenAnswers.length, rejectedAnswers.length); step++) {
    if (chosenAnswers[step] === rejectedAnswers[step]) continue;
    // Turn 0 is the decomposition; the answer to sub-question `step` is turn step + 1.
    const real = contextFields(bestSolution, worstSolution, step + 1);
    if (bestSolution.trajectory !== undefined && real === undefined) continue;
    const subQuestion = decomposition.subQuestions?.[step];
    pairs.push({
      questionId: id, kind: 'intermediate', step,
      prompt: real !== undefined ? promptOf(real.context!) : subQuestion === undefined ? context : `${context}\n\n${subQuestion}`,
      chosen: real?.chosenAction!.text ?? chosenAnswers[step]!, rejected: real?.rejectedAction!.text ?? rejectedAnswers[step]!,
      chosenScore: bestSolution.reward, rejectedScore: worstSolution.reward,
      ...real,
    });
  }
  let real: ReturnType<typeof contextFields>;
  if (bestSolution.trajectory !== undefined) {
    // Both final answers must close episodes of the same length to share one context; a worst
    // episode cut off earlier has no final answer to reject.
    const finalTurn = bestSolution.trajectory.turns.length - 1;
    if (finalTurn < 1 || worstSolution.trajectory?.turns.length !== finalTurn + 1) return pairs;
    real = contextFields(bestSolution, worstSolution, finalTurn);
  }
  pairs.push({
    questionId: id, kind: 'final', prompt: real === undefined ? context : promptOf(real.context!),
    chosen: bestSolution.text, rejected: worstSolution.text,
    chosenScore: bestSolution.reward, rejectedScore: worstSolution.reward,
    ...real,
  });
  return pairs;
}
