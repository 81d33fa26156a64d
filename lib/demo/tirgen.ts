/**
 * Warm-start data, TIRGen style: a generator proposes tool-integrated solutions (one
 * tool call, or a chain of calls that solves a multi-step problem step by step) with the
 * mistakes a weak model makes (wrong references, wrong operators, unbalanced
 * parentheses, answers guessed without the tool); a refiner executes every tool call and
 * keeps only traces whose calls all run and whose final answer checks.
 */
import { Role } from '../kernels/index.js';
import { classifyTurn, rewardFor } from './environment.js';
import { appendTokens, newEpisode, type Episode } from './episode.js';
import type { Problem } from './problems.js';
import type { Random } from './random.js';
import { TOKEN, encode } from './vocab.js';

/** A proposed solution: tool calls, then the answer (`#r` = the last tool result). */
export interface Proposal {
  calls: string[];
  answer: string;
}

/** The generator: plausible solutions, some wrong in the ways weak models are. */
export function propose(problem: Problem, rng: Random): Proposal {
  // The final answer either refers to the tool's result or copies its digits.
  const answer = rng.next() < 0.75 ? '#r' : 'copy';
  const roll = rng.next();
  if (problem.expression === '#1+#2*#3' && roll < 0.4) return { calls: ['#2*#3', '#1+#r'], answer };
  if (roll < 0.6) return { calls: [problem.expression], answer };
  if (roll < 0.7) return { calls: [problem.expression.replace('#1', '#3')], answer };
  if (roll < 0.8) return { calls: [problem.expression.replace(/[*+-]/, (op) => (op === '*' ? '+' : '*'))], answer };
  if (roll < 0.88) return { calls: [`(${problem.expression}`], answer };
  return { calls: [], answer: rng.next() < 0.5 ? '#1' : String(rng.int(1, 99999)) };
}

/**
 * The refiner: runs the proposal through the real tool, turn by turn, and returns the
 * episode only if every call executes and the final answer is right.
 */
export function refine(problem: Problem, proposal: Proposal, prompt: readonly number[]): Episode | null {
  const episode = newEpisode(problem, prompt);
  let lastResult: string | undefined;
  for (const call of proposal.calls) {
    const action = [TOKEN.calc, ...encode(call), TOKEN.calcEnd];
    const outcome = classifyTurn(action, { quantities: problem.quantities, lastResult });
    if (outcome.toolStatus !== 'success') return null;
    const start = episode.tokens.length;
    appendTokens(episode, action, Role.action);
    episode.turns.push({ kind: 'tool-call', toolStatus: 'success', start, end: episode.tokens.length });
    appendTokens(episode, outcome.feedback, Role.feedback);
    lastResult = outcome.result;
  }
  const written = proposal.answer === 'copy' ? lastResult : proposal.answer;
  if (written === undefined) return null;
  const action = [TOKEN.ans, ...encode(written), TOKEN.ansEnd];
  const outcome = classifyTurn(action, { quantities: problem.quantities, lastResult });
  if (rewardFor(problem, outcome.answer) !== 1) return null;
  const start = episode.tokens.length;
  appendTokens(episode, action, Role.action);
  episode.turns.push({ kind: 'answer', start, end: episode.tokens.length });
  episode.answer = outcome.answer;
  episode.reward = 1;
  return episode;
}

/** Generates proposals until `count` verified traces are kept; reports how many were proposed. */
export function buildWarmStartData(
  nextProblem: () => Problem,
  promptOf: (problem: Problem) => number[],
  count: number,
  rng: Random,
): { episodes: Episode[]; proposed: number } {
  const episodes: Episode[] = [];
  let proposed = 0;
  while (episodes.length < count) {
    const problem = nextProblem();
    proposed++;
    const kept = refine(problem, propose(problem, rng), promptOf(problem));
    if (kept) episodes.push(kept);
  }
  return { episodes, proposed };
}
