/**
 * What the agents share: the task they are given, how they score an episode, and how a
 * model's turn becomes a tool execution (a structured tool call, or a code block written
 * inline in the text, SimpleTIR/THOR style).
 */
import { randomUUID } from 'node:crypto';
import { ToolRegistry } from '../tools/registry.js';
import type { ToolResponse as ToolCallResult } from '../tools/types.js';
import type { Action, ToolFeedback, Trajectory } from '../trajectory/model.js';
import { checkArray, checkFiniteNumber, checkObject, checkString, rangeError, stringOption, typeError } from '../check.js';
import type { Generation } from './agent_policy.js';

/** One problem for an agent. */
export interface AgentTask {
  /** The question or problem, as the user states it. */
  prompt: string;
  /** Episode id. Default: a random UUID. */
  id?: string;
  /** Rollout group, copied to the trajectory (episodes sampled for one prompt share it). */
  groupId?: string;
  /** Reference answer(s); when given, the episode gets a reward (see each agent's `reward` option). */
  gold?: string | readonly string[];
  /** JSON metadata copied into the trajectory's `metadata.task`. */
  metadata?: Record<string, unknown>;
}

/**
 * Scores a finished episode: `answer` is the agent's final answer (null when it gave none).
 * Called only for tasks with a `gold`; must return a finite number.
 */
export type RewardFunction = (answer: string | null, task: AgentTask, trajectory: Trajectory) => number;

/** Validates a task; returns it unchanged. */
export function checkTask(task: unknown, name = 'task'): AgentTask {
  const raw = checkObject(name, task);
  checkString(`${name}.prompt`, raw.prompt);
  if (raw.id !== undefined) checkString(`${name}.id`, raw.id);
  if (raw.groupId !== undefined) checkString(`${name}.groupId`, raw.groupId);
  if (raw.gold !== undefined && typeof raw.gold !== 'string' &&
      !(Array.isArray(raw.gold) && raw.gold.every((item) => typeof item === 'string'))) {
    throw typeError(`${name}.gold`, 'a string or an array of strings', raw.gold);
  }
  if (raw.metadata !== undefined) checkObject(`${name}.metadata`, raw.metadata);
  return task as AgentTask;
}

/** A fresh trajectory for `task`, with `metadata.agent` naming the agent that ran it. */
export function startTrajectory(task: AgentTask, agent: string, system: string | undefined): Trajectory {
  const trajectory: Trajectory = { id: task.id ?? randomUUID(), prompt: task.prompt, turns: [] };
  if (system !== undefined) trajectory.system = system;
  if (task.groupId !== undefined) trajectory.groupId = task.groupId;
  trajectory.metadata = { agent };
  if (task.metadata !== undefined) trajectory.metadata.task = structuredClone(task.metadata);
  return trajectory;
}

/**
 * Records the final answer in `metadata.answer` and, when the task has a gold answer, sets
 * the reward with `reward` (the agent's default when the caller gave none).
 */
export function finishTrajectory(trajectory: Trajectory, task: AgentTask, answer: string | null, reward: RewardFunction): Trajectory {
  trajectory.metadata!.answer = answer;
  if (task.gold !== undefined) {
    trajectory.reward = checkFiniteNumber('reward(answer, task, trajectory)', reward(answer, task, trajectory));
  }
  return trajectory;
}

/**
 * The code of the last complete fenced block of `language` in `text` (an opening
 * "```python" fence that ends its line, and a closing "```"), or null when there is none.
 * The last block is the one a tool-integrated model just wrote and waits to see run.
 */
export function lastCodeBlock(text: string, language = 'python'): string | null {
  const lower = text.toLowerCase();
  const fence = '```' + language.toLowerCase();
  let code: string | null = null;
  let at = lower.indexOf(fence);
  while (at >= 0) {
    const lineEnd = text.indexOf('\n', at + fence.length);
    // "```python" must end its line: "```pythonic" is another language.
    const rest = lineEnd < 0 ? '' : text.slice(at + fence.length, lineEnd);
    const close = lineEnd < 0 ? -1 : text.indexOf('```', lineEnd + 1);
    if (lineEnd < 0 || close < 0) break;
    if (rest.trim() === '') code = text.slice(lineEnd + 1, close);
    at = lower.indexOf(fence, close + 3);
  }
  return code;
}

/** Inline code in a pair of delimiters instead of a fenced block, e.g. `{ open: '<calc>', close: '</calc>' }`. */
export interface CodeMarkup {
  open: string;
  close: string;
}

/** The code of the last complete `open … close` block in `text` (trimmed), or null. */
export function lastDelimitedBlock(text: string, markup: CodeMarkup): string | null {
  const close = text.lastIndexOf(markup.close);
  if (close < 0) return null;
  const open = text.lastIndexOf(markup.open, close - markup.open.length);
  if (open < 0 || open + markup.open.length > close) return null;
  return text.slice(open + markup.open.length, close).trim();
}

/**
 * An interpreter that lives for one episode: each inline code cell runs with the state the
 * episode's earlier cells left (variables, imports, functions), as multi-turn TIR builds on
 * earlier cells. `lib/tools`' `SandboxSession` is one, over a sandbox.
 */
export interface CodeSession {
  /** Runs one cell; failures are responses with status 'error' or 'timeout', never rejections. */
  run(code: string): Promise<ToolCallResult>;
  /** Releases the session (called when its episode ends). */
  close?(): void | Promise<void>;
}

/** Reads the final answer out of a turn's text, or null when it gives none. */
export type AnswerExtractor = (text: string) => string | null;

/** The text a model reads for a tool's result: what it printed, then what went wrong. */
export function responseText(result: ToolCallResult): string {
  const parts: string[] = [];
  if (result.result !== undefined && result.result !== '') parts.push(result.result);
  if (result.status !== 'success' && result.error !== undefined && result.error !== '') parts.push(result.error);
  if (result.status === 'timeout' && parts.length === 0) parts.push('The call timed out.');
  return parts.join('\n');
}

/** How agents run the tools a model asks for. */
export interface ToolUseOptions {
  /** The tools the model may call. Default: an empty registry. */
  tools?: ToolRegistry;
  /**
   * Name of the registered tool that runs code written inline in the text (a fenced block;
   * the tool takes `{ code }`, as `codeExecutionTool(sandbox)` does). Default 'python', used
   * when the registry has a tool of that name; a name given explicitly must be registered.
   */
  codeTool?: string;
  /** Language tag of the fences whose code `codeTool` runs. Default 'python'. */
  codeFence?: string;
  /** Delimiters of inline code instead of ```fences (e.g. a model trained on `<calc> … </calc>`). */
  codeMarkup?: CodeMarkup;
  /**
   * Makes the interpreter of one episode: inline code then runs in it, cell after cell with
   * the state of the earlier ones, instead of in `codeTool` (a fresh run per cell). Called at
   * the start of each episode; the session is closed when it ends.
   */
  codeSession?: (task: AgentTask) => CodeSession;
  /**
   * Stop sequences sent with each generation while inline code is run, so the model stops
   * after its code block and waits for the output instead of writing past it (THOR, ToRA).
   * Default: the output fence '```output' for fenced code, the closing delimiter for
   * `codeMarkup`; [] sends none.
   */
  stop?: readonly string[];
}

/** Validated {@link ToolUseOptions}. */
export interface ToolUse {
  tools: ToolRegistry;
  /** Undefined when inline code is not run by a registered tool. */
  codeTool: string | undefined;
  codeFence: string;
  codeMarkup: CodeMarkup | undefined;
  codeSession: ((task: AgentTask) => CodeSession) | undefined;
  /** Stop sequences of each generation ([] when inline code is not run). */
  stop: string[];
}

/** Validates {@link ToolUseOptions}; `prefix` names the options object in errors. */
export function toolUse(options: ToolUseOptions, prefix = 'options'): ToolUse {
  const tools = options.tools ?? new ToolRegistry();
  if (!(tools instanceof ToolRegistry)) throw typeError(`${prefix}.tools`, 'a ToolRegistry', tools);
  let codeTool: string | undefined;
  if (options.codeTool !== undefined) {
    codeTool = checkString(`${prefix}.codeTool`, options.codeTool);
    if (!tools.has(codeTool)) throw rangeError(`${prefix}.codeTool`, `a registered tool (${tools.names.join(', ') || 'none registered'})`, codeTool);
  } else if (tools.has('python')) {
    codeTool = 'python';
  }
  const codeFence = stringOption(`${prefix}.codeFence`, options.codeFence) ?? 'python';
  if (!/^[A-Za-z0-9_+-]+$/.test(codeFence)) throw rangeError(`${prefix}.codeFence`, 'a language tag of letters, digits, _, + or -', codeFence);
  let codeMarkup: CodeMarkup | undefined;
  if (options.codeMarkup !== undefined) {
    const markup = checkObject(`${prefix}.codeMarkup`, options.codeMarkup);
    if (typeof markup.open !== 'string' || markup.open === '') throw typeError(`${prefix}.codeMarkup.open`, 'a non-empty string', markup.open);
    if (typeof markup.close !== 'string' || markup.close === '') throw typeError(`${prefix}.codeMarkup.close`, 'a non-empty string', markup.close);
    codeMarkup = { open: markup.open, close: markup.close };
  }
  const codeSession = options.codeSession;
  if (codeSession !== undefined && typeof codeSession !== 'function') throw typeError(`${prefix}.codeSession`, 'a function returning a CodeSession', codeSession);
  const runsCode = codeTool !== undefined || codeSession !== undefined;
  let stop: string[];
  if (options.stop !== undefined) {
    stop = checkArray(`${prefix}.stop`, options.stop).map((item, i) => {
      if (typeof item !== 'string' || item === '') throw typeError(`${prefix}.stop[${i}]`, 'a non-empty string', item);
      return item;
    });
  } else {
    stop = !runsCode ? [] : codeMarkup !== undefined ? [codeMarkup.close] : ['```output'];
  }
  return { tools, codeTool, codeFence, codeMarkup, codeSession, stop };
}

/** The code of the inline block `text` ends its turn with, in the format `use` reads; null for none. */
export function inlineCode(text: string, use: ToolUse): string | null {
  return use.codeMarkup !== undefined ? lastDelimitedBlock(text, use.codeMarkup) : lastCodeBlock(text, use.codeFence);
}

/**
 * Runs what `action` asks for: its structured tool call, else its last inline code block
 * (when a code tool is set). Returns the response for the trajectory, or undefined when the
 * action asked for nothing (a reasoning or answer turn). Tool failures are responses with
 * status 'error' or 'timeout', never exceptions.
 */
export async function executeAction(action: Action, use: ToolUse, session?: CodeSession): Promise<ToolFeedback | undefined> {
  if (action.toolCall !== undefined) {
    const result = await use.tools.call(action.toolCall.name, action.toolCall.arguments);
    const response: ToolFeedback = { toolName: action.toolCall.name, status: result.status, text: responseText(result) };
    if (action.toolCall.id !== undefined) response.toolCallId = action.toolCall.id;
    return response;
  }
  if (session === undefined && use.codeTool === undefined) return undefined;
  const code = inlineCode(action.text, use);
  if (code === null) return undefined;
  const toolName = use.codeTool ?? use.codeFence;
  const result = session !== undefined ? await session.run(code) : await use.tools.call(use.codeTool!, { code });
  return { toolName, status: result.status, text: responseText(result) };
}

/** The episode's interpreter when the agent has `codeSession`, else undefined. */
export function openSession(use: ToolUse, task: AgentTask): CodeSession | undefined {
  if (use.codeSession === undefined) return undefined;
  const session = use.codeSession(task);
  if (session === null || typeof session !== 'object' || typeof session.run !== 'function') {
    throw typeError('codeSession(task)', 'a CodeSession (an object with a run(code) method)', session);
  }
  return session;
}

/**
 * Splits a policy's generation into the action to record and why it stopped, and records the
 * context ids the policy reported (`promptTokenIds`) in the trajectory's token record: the
 * first context becomes `promptTokenIds`, a later one extends the record by the previous
 * turn's `feedbackTokenIds`. Call it before pushing the new turn. When a context does not
 * extend the record (the server re-rendered the conversation differently), the record is
 * left without that span and `metadata.contextDrift` lists the turn and the first differing
 * index, so the drift is visible rather than trained on.
 */
export function takeGeneration(trajectory: Trajectory, generation: Generation): { action: Action; finishReason?: string } {
  const { finishReason, promptTokenIds, ...action } = generation;
  if (promptTokenIds !== undefined) recordContext(trajectory, promptTokenIds);
  return finishReason === undefined ? { action } : { action, finishReason };
}

function recordContext(trajectory: Trajectory, context: readonly number[]): void {
  const turns = trajectory.turns;
  if (turns.length === 0) {
    trajectory.promptTokenIds = context.slice();
    return;
  }
  if (trajectory.promptTokenIds === undefined) return;
  const recorded = trajectory.promptTokenIds.slice();
  for (let t = 0; t < turns.length; t++) {
    const { action, feedbackTokenIds } = turns[t]!;
    if (action.tokenIds === undefined || action.tokenSource === 'text') return;
    recorded.push(...action.tokenIds);
    if (t + 1 < turns.length) {
      if (feedbackTokenIds === undefined) return;
      recorded.push(...feedbackTokenIds);
    }
  }
  let at = 0;
  while (at < recorded.length && at < context.length && recorded[at] === context[at]) at++;
  if (at === recorded.length) {
    turns[turns.length - 1]!.feedbackTokenIds = context.slice(recorded.length);
    return;
  }
  const metadata = (trajectory.metadata ??= {});
  const drift = Array.isArray(metadata.contextDrift) ? metadata.contextDrift as unknown[] : [];
  drift.push({ turn: turns.length, index: at });
  metadata.contextDrift = drift;
}
