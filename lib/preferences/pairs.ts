import { checkArray, checkFiniteNumber, checkObject, checkString, rangeError } from '../check.js';
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
    pairs.push({
      questionId: id, kind: 'decomposition', prompt: text,
      chosen: decompositions[best]!.text, rejected: decompositions[worst]!.text,
      chosenScore: scores[best]!, rejectedScore: scores[worst]!,
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
    const subQuestion = decomposition.subQuestions?.[step];
    pairs.push({
      questionId: id, kind: 'intermediate', step,
      prompt: subQuestion === undefined ? context : `${context}\n\n${subQuestion}`,
      chosen: chosenAnswers[step]!, rejected: rejectedAnswers[step]!,
      chosenScore: bestSolution.reward, rejectedScore: worstSolution.reward,
    });
  }
  pairs.push({
    questionId: id, kind: 'final', prompt: context,
    chosen: bestSolution.text, rejected: worstSolution.text,
    chosenScore: bestSolution.reward, rejectedScore: worstSolution.reward,
  });
  return pairs;
}
