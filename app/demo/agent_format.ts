/**
 * The demo model's format for tirl's agents: its tokenizer and chat template (what
 * `tirl serve` renders), its inline code (`<calc> … </calc>`, run by a calculator session
 * that keeps the last result `#r` from turn to turn), its answers (`<ans> … </ans>`) and
 * their reward. With these the SDK's agents run against the served demo policy as they would
 * against a Qwen model with a Python sandbox.
 */
import type { AgentRolloutRequest, AgentTask, CodeMarkup, CodeSession, Tokenizer, ToolResponse, Trajectory, ChatTemplate, VoidTurnOptions } from '../../lib/index.js';
import { calculate, resolveReferences } from './calculator.js';
import type { Problem } from './problems.js';
import { VOCAB, decode, encode } from './vocab.js';

const SPECIAL_TOKENS: Readonly<Record<string, number>> = Object.freeze(
  Object.fromEntries(VOCAB.flatMap((token, id) => (token.startsWith('<') ? [[token, id] as const] : []))),
);

/** The demo vocabulary as the SDK's `Tokenizer`; its markers (`<calc>`, `<out>`, …) are special tokens. */
export const demoTokenizer: Tokenizer = Object.freeze({
  name: 'tirl-demo',
  vocabSize: VOCAB.length,
  specialTokens: SPECIAL_TOKENS,
  encode: (text: string) => encode(text),
  decode: (ids: readonly number[]) => decode(ids),
  specialTokenId(text: string): number {
    const id = SPECIAL_TOKENS[text];
    if (id === undefined) throw new RangeError(`Expected a special token of the demo vocabulary but received ${JSON.stringify(text)}`);
    return id;
  },
});

/** The demo's chat layout, as `tirl serve` renders chats: BOS and the question, actions as sampled, tool output in `<out> … </out>`. */
export const demoChatTemplate: ChatTemplate = Object.freeze({
  name: 'tirl-demo',
  prompt: (_system: string | undefined, prompt: string) => [{ special: '<bos>' }, { text: prompt }],
  action: (action: { text: string }) => [{ text: action.text }],
  response: (response: { text: string }) => [{ special: '<out>' }, { text: response.text }, { special: '</out>' }],
  nextTurn: () => [],
});

/** Inline code in the demo's markup. */
export const DEMO_CODE_MARKUP: CodeMarkup = Object.freeze({ open: '<calc>', close: '</calc>' });

/** SimpleTIR's void-turn rule in the demo's markup (for the SDK's `voidTurnFilter`). */
export const DEMO_VOID_TURN: VoidTurnOptions = Object.freeze({
  codeLanguages: [],
  answerMarkers: [],
  codeMarkup: [DEMO_CODE_MARKUP],
  answerMarkup: [{ open: '<ans>', close: '</ans>' }],
});

/** The answer of an `<ans> … </ans>` turn as written (references such as `#r` unresolved), else null. */
export function demoAnswer(text: string): string | null {
  const close = text.lastIndexOf('</ans>');
  const open = close < 0 ? -1 : text.lastIndexOf('<ans>', close);
  if (open < 0) return null;
  const answer = text.slice(open + '<ans>'.length, close).trim();
  return answer === '' ? null : answer;
}

/** The question's numbers, which `#1`, `#2`, `#3` refer to, from a task made by {@link demoTask}. */
function quantitiesOf(task: AgentTask): string[] {
  const quantities = task.metadata?.quantities;
  return Array.isArray(quantities) ? quantities.map(String) : [];
}

/**
 * The demo's calculator as one episode's interpreter: `#1`.. are the question's numbers and
 * `#r` the result of the episode's last successful cell, the state carried across turns.
 * A failed cell answers `<err>` (what the model was trained to read) and changes nothing.
 */
export class CalculatorSession implements CodeSession {
  #lastResult: string | undefined;

  constructor(readonly quantities: readonly string[]) {}

  async run(code: string): Promise<ToolResponse> {
    const resolved = resolveReferences(code.replace(/\s+/g, ''), { quantities: this.quantities, ...(this.#lastResult === undefined ? {} : { lastResult: this.#lastResult }) });
    const result = resolved.ok ? calculate(resolved.value) : resolved;
    if (!result.ok) return { tool: 'calculator', status: 'error', error: '<err>' };
    this.#lastResult = result.value.toString();
    return { tool: 'calculator', status: 'success', result: this.#lastResult };
  }
}

/** A demo problem as an agent's task (its numbers in `metadata.quantities`). */
export function demoTask(problem: Problem, groupId?: string): AgentTask {
  return { prompt: problem.text, gold: problem.answer, metadata: { quantities: problem.quantities }, ...(groupId === undefined ? {} : { groupId }) };
}

/** What the demo's helpers need of an agent: episodes of a task. */
export interface DemoAgent {
  run(task: AgentTask): Promise<Trajectory>;
}

/**
 * A `GRPOTrainer` `agent.collect`: each group is a fresh problem from `nextProblem` (its
 * `groupId` names the step, attempt and group), with `groupSize` episodes of `agent` on it.
 * Every episode collected is also pushed to `seen`.
 */
export function demoGroupCollector(nextProblem: () => Problem, agent: DemoAgent, seen: Trajectory[] = []) {
  return async ({ step, attempt, groups, groupSize }: AgentRolloutRequest): Promise<Trajectory[]> => {
    const out: Trajectory[] = [];
    for (let g = 0; g < groups; g++) {
      const problem = nextProblem();
      for (let k = 0; k < groupSize; k++) out.push(await agent.run(demoTask(problem, `s${step}a${attempt}g${g}`)));
    }
    seen.push(...out);
    return out;
  };
}

/** The fraction of `problems` that `agent` solves (reward 1), one episode each. */
export async function demoSolveRate(agent: DemoAgent, problems: readonly Problem[]): Promise<number> {
  let solved = 0;
  for (const problem of problems) solved += (await agent.run(demoTask(problem))).reward ?? 0;
  return solved / problems.length;
}

/** The episode's calculator session. */
export function calculatorSession(task: AgentTask): CalculatorSession {
  return new CalculatorSession(quantitiesOf(task));
}

/**
 * 1 when the answer, its references resolved (`#r`: the last successful tool result of the
 * trajectory), is the gold answer; else 0.
 */
export function demoReward(answer: string | null, task: AgentTask, trajectory: Trajectory): number {
  if (answer === null) return 0;
  const results = trajectory.turns.flatMap((turn) => (turn.response?.status === 'success' ? [turn.response.text] : []));
  const lastResult = results[results.length - 1];
  const resolved = resolveReferences(answer.replace(/\s+/g, ''), { quantities: quantitiesOf(task), ...(lastResult === undefined ? {} : { lastResult }) });
  const gold = Array.isArray(task.gold) ? task.gold : [task.gold];
  return resolved.ok && gold.includes(resolved.value) ? 1 : 0;
}
