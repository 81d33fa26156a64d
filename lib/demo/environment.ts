/**
 * The tool environment: the policy writes an action turn, either a tool call
 * `<calc> expr </calc>` or a final answer `<ans> n </ans>`. A tool call is executed by
 * the calculator and its output comes back as a feedback turn `<out> value </out>`
 * (`<out> <err> </out>` when it fails). A turn with neither a complete tool call nor a
 * final answer is void (SimpleTIR) and ends the episode.
 */
import { calculate, resolveReferences, type ReferenceContext } from './calculator.js';
import type { Problem } from './problems.js';
import { TOKEN, VOCAB, encode } from './vocab.js';

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

/** Whether a generated token ends an action turn. */
export function endsTurn(token: number): boolean {
  return token === TOKEN.calcEnd || token === TOKEN.ansEnd;
}
