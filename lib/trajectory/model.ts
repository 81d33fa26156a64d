/**
 * The episode model: a trajectory is a prompt followed by turns; each turn separates the
 * model's action from the tool's response (AlphaApollo's split), so credit, masks and
 * filters can address either side. Everything here is plain JSON.
 */
import type { ToolStatus } from '../tools/types.js';
import {
  checkArray, checkFiniteNumber, checkNonNegativeInteger, checkObject, checkString, rangeError, typeError,
} from '../check.js';

/** A structured tool call made by an action, as OpenAI-style chat messages carry it. */
export interface ActionToolCall {
  /** Call id that links the call to its response; optional. */
  id?: string;
  /** Tool (function) name. */
  name: string;
  /** Arguments exactly as the model wrote them (usually a JSON string, or code). */
  arguments: string;
}

/**
 * Where an action's token ids come from: 'tokens' when the rollout engine returned the ids it
 * sampled (token in, token out); 'text' when it returned text only and the ids were made by
 * tokenising that text afterwards, so they may differ from what was sampled.
 */
export type TokenSource = 'tokens' | 'text';

/** What the model produced in one turn. */
export interface Action {
  /** Visible text of the turn: reasoning, and inline code or a final answer when the model writes them as text. */
  text: string;
  /** Structured tool call, when the model made one through a tool-call channel. */
  toolCall?: ActionToolCall;
  /** Token ids the policy sampled for this turn, including its end-of-turn token; when given they are used verbatim. */
  tokenIds?: number[];
  /** Behaviour-policy log-probabilities (natural log) of `tokenIds`, one per id, as the rollout engine computed them. */
  logprobs?: number[];
  /** How `tokenIds` were obtained; absent means 'tokens' when `tokenIds` is given. */
  tokenSource?: TokenSource;
  /** Version of the policy weights that sampled this action (an integer the trainer counts up); overrides the trajectory's. */
  policyVersion?: number;
}

/** What the tool or environment answered to a turn's action: the text the model reads next. */
export interface ToolFeedback {
  /** Name of the tool that answered (for inline code, the interpreter, e.g. "python"). */
  toolName: string;
  /** Whether the call ran ('success'), failed ('error') or ran out of time ('timeout'). */
  status: ToolStatus;
  /** The response text shown to the model. */
  text: string;
  /** Id of the tool call this answers; optional. */
  toolCallId?: string;
}

/** One model action and, when there was one, the response to it. */
export interface Turn {
  action: Action;
  response?: ToolFeedback;
  /**
   * The token ids that followed the action in the context, tokenised once when they were
   * appended: the response, and the next turn's generation prompt when a turn follows.
   * When given they are used verbatim (role feedback); else the template renders them.
   */
  feedbackTokenIds?: number[];
}

/** One episode of a tool-using agent. */
export interface Trajectory {
  /** Unique id of the episode. */
  id: string;
  /** System message, when the episode had one. */
  system?: string;
  /** The task as the user stated it. */
  prompt: string;
  /**
   * The token ids of the context before the first action (system message, tools, prompt and
   * the generation prompt), exactly as sent to the policy. When given they are used verbatim
   * (role prompt); else the template renders them.
   */
  promptTokenIds?: number[];
  turns: Turn[];
  /** Version of the policy weights that sampled the episode (actions may override it per turn). */
  policyVersion?: number;
  /** Scalar outcome reward of the episode. */
  reward?: number;
  /** Rollout group (episodes sampled for the same prompt), for group-relative advantages. */
  groupId?: string;
  /** Whether the rollout stopped early (length or turn budget), so the episode is incomplete. */
  truncated?: boolean;
  /** Free-form JSON metadata carried along untouched. */
  metadata?: Record<string, unknown>;
}

const TOOL_STATUSES: readonly ToolStatus[] = ['success', 'error', 'timeout'];

function optionalString(name: string, value: unknown): string | undefined {
  return value === undefined ? undefined : checkString(name, value);
}

function numberArray(name: string, value: unknown, integer: boolean): number[] {
  const items = checkArray(name, value);
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    if (typeof item !== 'number' || (integer ? !Number.isInteger(item) || item < 0 : Number.isNaN(item))) {
      throw typeError(`${name}[${i}]`, integer ? 'a non-negative integer' : 'a number', item);
    }
  }
  return items as number[];
}

function parseAction(name: string, value: unknown): Action {
  const raw = checkObject(name, value);
  const action: Action = { text: checkString(`${name}.text`, raw.text) };
  if (raw.toolCall !== undefined) {
    const call = checkObject(`${name}.toolCall`, raw.toolCall);
    action.toolCall = {
      name: checkString(`${name}.toolCall.name`, call.name),
      arguments: checkString(`${name}.toolCall.arguments`, call.arguments),
    };
    const id = optionalString(`${name}.toolCall.id`, call.id);
    if (id !== undefined) action.toolCall.id = id;
  }
  if (raw.tokenIds !== undefined) action.tokenIds = numberArray(`${name}.tokenIds`, raw.tokenIds, true).slice();
  if (raw.tokenSource !== undefined) {
    if (raw.tokenSource !== 'tokens' && raw.tokenSource !== 'text') throw typeError(`${name}.tokenSource`, "'tokens' or 'text'", raw.tokenSource);
    action.tokenSource = raw.tokenSource;
  }
  if (raw.policyVersion !== undefined) action.policyVersion = checkNonNegativeInteger(`${name}.policyVersion`, raw.policyVersion);
  if (raw.logprobs !== undefined) {
    action.logprobs = numberArray(`${name}.logprobs`, raw.logprobs, false).slice();
    if (action.tokenIds === undefined) {
      throw typeError(`${name}.tokenIds`, 'token ids alongside logprobs', raw.tokenIds);
    }
    if (action.logprobs.length !== action.tokenIds.length) {
      throw rangeError(`${name}.logprobs`, `${action.tokenIds.length} log-probs (one per token id)`, action.logprobs);
    }
  }
  return action;
}

function parseResponse(name: string, value: unknown): ToolFeedback {
  const raw = checkObject(name, value);
  const status = raw.status;
  if (!TOOL_STATUSES.includes(status as ToolStatus)) {
    throw typeError(`${name}.status`, "'success', 'error' or 'timeout'", status);
  }
  const response: ToolFeedback = {
    toolName: checkString(`${name}.toolName`, raw.toolName),
    status: status as ToolStatus,
    text: checkString(`${name}.text`, raw.text),
  };
  const toolCallId = optionalString(`${name}.toolCallId`, raw.toolCallId);
  if (toolCallId !== undefined) response.toolCallId = toolCallId;
  return response;
}

/**
 * Validates plain JSON (for example one parsed JSONL line) and returns a fresh `Trajectory`.
 * Unknown fields are dropped; `metadata` is kept as given.
 * @throws TypeError or RangeError naming the offending field, e.g. `trajectory.turns[2].response.status`.
 */
export function parseTrajectory(value: unknown, name = 'trajectory'): Trajectory {
  const raw = checkObject(name, value);
  const turns = checkArray(`${name}.turns`, raw.turns).map((turnValue, i) => {
    const turnName = `${name}.turns[${i}]`;
    const turnRaw = checkObject(turnName, turnValue);
    const turn: Turn = { action: parseAction(`${turnName}.action`, turnRaw.action) };
    if (turnRaw.response !== undefined) turn.response = parseResponse(`${turnName}.response`, turnRaw.response);
    if (turnRaw.feedbackTokenIds !== undefined) {
      turn.feedbackTokenIds = numberArray(`${turnName}.feedbackTokenIds`, turnRaw.feedbackTokenIds, true).slice();
    }
    return turn;
  });
  const trajectory: Trajectory = {
    id: checkString(`${name}.id`, raw.id),
    prompt: checkString(`${name}.prompt`, raw.prompt),
    turns,
  };
  const system = optionalString(`${name}.system`, raw.system);
  if (system !== undefined) trajectory.system = system;
  if (raw.promptTokenIds !== undefined) trajectory.promptTokenIds = numberArray(`${name}.promptTokenIds`, raw.promptTokenIds, true).slice();
  if (raw.policyVersion !== undefined) trajectory.policyVersion = checkNonNegativeInteger(`${name}.policyVersion`, raw.policyVersion);
  if (raw.reward !== undefined) trajectory.reward = checkFiniteNumber(`${name}.reward`, raw.reward);
  const groupId = optionalString(`${name}.groupId`, raw.groupId);
  if (groupId !== undefined) trajectory.groupId = groupId;
  if (raw.truncated !== undefined) {
    if (typeof raw.truncated !== 'boolean') throw typeError(`${name}.truncated`, 'a boolean', raw.truncated);
    trajectory.truncated = raw.truncated;
  }
  if (raw.metadata !== undefined) trajectory.metadata = checkObject(`${name}.metadata`, raw.metadata);
  return trajectory;
}
