/**
 * The tool environment: the policy writes an action turn, either a tool call
 * `<calc> expr </calc>` or a final answer `<ans> n </ans>`. A tool call is executed by
 * the calculator and its output comes back as a feedback turn `<out> value </out>`
 * (`<out> <err> </out>` when it fails). A turn with neither a complete tool call nor a
 * final answer is void (SimpleTIR) and ends the episode.
 */
import { calculate, resolveReferences, type ReferenceContext } from './calculator.js';
import type { Environment, StepResult } from '../../lib/index.js';
import type { Problem } from './problems.js';
import { TOKEN, VOCAB, decode, encode } from './vocab.js';

export type TurnKind = 'tool-call' | 'answer' | 'void';

export interface TurnOutcome {
  kind: TurnKind;
  /** Feedback tokens to append after a tool call. */
  feedback: number[];
  /** Whether the tool ran ('success') or failed ('error'); absent for answers and void turns. */
  toolStatus?: 'success' | 'error';
  /** The answer of an answer turn, references resolved. */
  answer?: string;
  /** The tool's result of a successful tool call. */
  result?: string;
}

/** Most tokens one action turn may have before it is cut (and, lacking a closing marker, void). */
export const MAX_TURN_TOKENS = 14;
/** Most action turns in one episode. */
export const MAX_TURNS = 3;

/**
 * Reads one action turn: exactly `<calc> expression </calc>` (run by the tool, with the
 * question's numbers bound to #1.. and the last result to #r) or `<ans> value </ans>`;
 * anything else is void.
 */
export function classifyTurn(action: readonly number[], context: ReferenceContext): TurnOutcome {
  const open = action[0];
  const close = action[action.length - 1];
  const body = action.slice(1, -1).map((id) => VOCAB[id]);
  const bodyIsPlain = body.every((t) => /^([0-9+\-*/()]|#[0-9r])$/.test(t));
  if (action.length >= 3 && open === TOKEN.calc && close === TOKEN.calcEnd && bodyIsPlain) {
    const resolved = resolveReferences(body.join(''), context);
    const result = resolved.ok ? calculate(resolved.value) : resolved;
    if (!result.ok) return { kind: 'tool-call', feedback: [TOKEN.out, TOKEN.err, TOKEN.outEnd], toolStatus: 'error' };
    const value = result.value.toString();
    return { kind: 'tool-call', feedback: [TOKEN.out, ...encode(value), TOKEN.outEnd], toolStatus: 'success', result: value };
  }
  if (action.length >= 3 && open === TOKEN.ans && close === TOKEN.ansEnd && bodyIsPlain) {
    const resolved = resolveReferences(body.join(''), context);
    return { kind: 'answer', feedback: [], answer: resolved.ok ? resolved.value : undefined };
  }
  return { kind: 'void', feedback: [] };
}

/** The episode's reward: 1 for the exact answer, else 0. */
export function rewardFor(problem: Problem, answer: string | undefined): number {
  return answer !== undefined && answer === problem.answer ? 1 : 0;
}

/**
 * One episode's world for the trainers: poses the problem, runs each tool call through
 * the calculator, feeds back its output, and ends the episode at an answer (reward 1 when
 * exact), at a void turn, or when the policy runs out of turns.
 */
export class ArithmeticEnvironment implements Environment<Problem> {
  private problem: Problem | undefined;
  private lastResult: string | undefined;
  private turns = 0;

  reset(problem: Problem): string {
    this.problem = problem;
    this.lastResult = undefined;
    this.turns = 0;
    return problem.text;
  }

  step(action: string): StepResult {
    const problem = this.problem;
    if (problem === undefined) throw new Error('ArithmeticEnvironment.step before reset');
    this.turns++;
    const outcome = classifyTurn(actionTokens(action), { quantities: problem.quantities, lastResult: this.lastResult });
    if (outcome.kind === 'answer') {
      const reward = rewardFor(problem, outcome.answer);
      return { feedback: '', reward, done: true, success: reward === 1 };
    }
    if (outcome.kind === 'void') return { feedback: '', reward: 0, done: true, success: false };
    this.lastResult = outcome.result ?? this.lastResult;
    const done = this.turns >= MAX_TURNS;
    return {
      feedback: done ? '' : decode(outcome.feedback),
      tool: { name: 'calculator', status: outcome.toolStatus ?? 'error' },
      reward: 0,
      done,
      success: false,
    };
  }
}

/** Token ids of an action's text; text outside the vocabulary makes the turn void. */
export function actionTokens(action: string): number[] {
  try {
    return encode(action);
  } catch {
    return [];
  }
}

/** Whether an action's text is a void turn (for the trainer's void-turn filter). */
export function isVoidAction(action: string): boolean {
  return classifyTurn(actionTokens(action), { quantities: [] }).kind === 'void';
}
