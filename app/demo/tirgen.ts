/**
 * Warm-start data, TIRGen style: a generator proposes tool-integrated solutions (one
 * tool call, or a chain of calls that solves a multi-step problem step by step) with the
 * mistakes a weak model makes (wrong references, wrong operators, unbalanced
 * parentheses, answers guessed without the tool); a refiner plays each proposal through
 * the real environment and keeps only traces whose tool calls all execute and whose
 * final answer checks.
 */
import { Role, type SeededRandom } from '../../lib/index.js';
import { ArithmeticEnvironment } from './environment.js';
import type { Problem } from './problems.js';
import { TOKEN, encode } from './vocab.js';

/** A proposed solution: the text of each action turn, in order. */
export type Proposal = string[];

/** A verified trace: its tokens and their roles (prompt, action, feedback). */
export interface Trace {
  tokens: number[];
  roles: number[];
}

/** The generator: plausible solutions, some wrong in the ways weak models are. */
export function propose(problem: Problem, rng: SeededRandom): Proposal {
  const call = (expression: string) => `<calc> ${expression} </calc>`;
  // The final answer either refers to the last tool result or copies a number.
  const answer = rng.next() < 0.75 ? '<ans> #r </ans>' : 'copy';
  const roll = rng.next();
  let calls: string[];
  if (problem.expression === '#1+#2*#3' && roll < 0.4) calls = [call('#2*#3'), call('#1+#r')];
  else if (roll < 0.6) calls = [call(problem.expression)];
  else if (roll < 0.7) calls = [call(problem.expression.replace('#1', '#3'))];
  else if (roll < 0.8) calls = [call(problem.expression.replace(/[*+-]/, (op) => (op === '*' ? '+' : '*')))];
  else if (roll < 0.88) calls = [call(`(${problem.expression}`)];
  else return [`<ans> ${rng.next() < 0.5 ? '#1' : String(rng.between(1, 99999))} </ans>`];
  return [...calls, answer];
}

/**
 * The refiner: plays the proposal through the environment (the real calculator) and
 * returns the trace only if every call executes and the final answer is right. A 'copy'
 * answer writes the digits of the last tool result.
 */
export function refine(problem: Problem, proposal: Proposal): Trace | null {
  const environment = new ArithmeticEnvironment();
  const trace: Trace = { tokens: [], roles: [] };
  const append = (tokens: readonly number[], role: number) => {
    trace.tokens.push(...tokens);
    trace.roles.push(...tokens.map(() => role));
  };
  append([TOKEN.bos, ...encode(environment.reset(problem))], Role.prompt);
  let lastOutput = '';
  for (const planned of proposal) {
    const action = planned === 'copy' ? `<ans> ${lastOutput} </ans>` : planned;
    const result = environment.step(action);
    append(encode(action), Role.action);
    if (result.tool && result.tool.status !== 'success') return null;
    if (result.done) return result.success ? trace : null;
    append(encode(result.feedback), Role.feedback);
    lastOutput = result.feedback.replace(/[^0-9]/g, '');
  }
  return null;
}

/** Generates proposals until `count` verified traces are kept; reports how many were proposed. */
export function buildWarmStartData(
  nextProblem: () => Problem,
  count: number,
  rng: SeededRandom,
): { traces: Trace[]; proposed: number } {
  const traces: Trace[] = [];
  let proposed = 0;
  while (traces.length < count) {
    const problem = nextProblem();
    proposed++;
    const kept = refine(problem, propose(problem, rng));
    if (kept) traces.push(kept);
  }
  return { traces, proposed };
}
