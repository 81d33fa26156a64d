/**
 * Import and export of OpenAI-style chat messages with tool calls, the format agent
 * frameworks and vLLM/TRL datasets use.
 */
import type { ChatMessage } from '../chat_client/types.js';
import type { ToolStatus } from '../tools/types.js';
import { parseTrajectory, type Trajectory, type Turn } from './model.js';
import { checkArray, checkObject, checkString, rangeError, typeError } from '../check.js';

/**
 * An OpenAI-style chat message (the chat client's `ChatMessage`) with one tirl extension:
 * `status` on tool (and feedback user) messages carries the tool's execution status;
 * readers that do not know it ignore it.
 */
export interface TrajectoryChatMessage extends ChatMessage {
  status?: ToolStatus;
}

/** Episode-level fields that chat messages do not carry. */
export interface FromChatOptions {
  /** Episode id (required: the chat format has none). */
  id: string;
  reward?: number;
  groupId?: string;
  truncated?: boolean;
  metadata?: Record<string, unknown>;
  /** Status of tool messages without a `status` field. Default 'success'. */
  defaultStatus?: ToolStatus;
}

/** Tool name given to a user message that answers an assistant turn (inline-code agents get interpreter output that way). */
export const USER_FEEDBACK_TOOL = 'user';

/**
 * Builds a trajectory from chat messages: an optional system message, the user prompt, then
 * assistant messages, each optionally followed by one tool message or one user message (its
 * response). An assistant message may carry at most one tool call.
 * @throws TypeError/RangeError naming the offending message, e.g. `messages[3].tool_calls`.
 */
export function fromChatMessages(messages: readonly TrajectoryChatMessage[], options: FromChatOptions): Trajectory {
  checkArray('messages', messages);
  checkObject('options', options);
  const defaultStatus = options.defaultStatus ?? 'success';
  let index = 0;
  const message = (i: number) => checkObject(`messages[${i}]`, messages[i]) as unknown as TrajectoryChatMessage;
  const content = (i: number) => {
    const value = message(i).content;
    return value === null || value === undefined ? '' : checkString(`messages[${i}].content`, value);
  };
  let system: string | undefined;
  if (index < messages.length && message(index).role === 'system') system = content(index++);
  if (index >= messages.length || message(index).role !== 'user') {
    throw typeError(`messages[${index}]`, 'a user message with the prompt', messages[index]);
  }
  const prompt = content(index++);
  const turns: Turn[] = [];
  while (index < messages.length) {
    const assistant = message(index);
    if (assistant.role !== 'assistant') {
      throw typeError(`messages[${index}].role`, "'assistant'", assistant.role);
    }
    const turn: Turn = { action: { text: content(index) } };
    const calls = assistant.tool_calls ?? [];
    checkArray(`messages[${index}].tool_calls`, calls);
    if (calls.length > 1) throw rangeError(`messages[${index}].tool_calls`, 'at most one tool call', calls);
    if (calls.length === 1) {
      const fn = checkObject(`messages[${index}].tool_calls[0].function`, calls[0]?.function);
      turn.action.toolCall = {
        name: checkString(`messages[${index}].tool_calls[0].function.name`, fn.name),
        arguments: checkString(`messages[${index}].tool_calls[0].function.arguments`, fn.arguments),
      };
      if (calls[0]!.id !== undefined) turn.action.toolCall.id = checkString(`messages[${index}].tool_calls[0].id`, calls[0]!.id);
    }
    index++;
    if (index < messages.length && (message(index).role === 'tool' || message(index).role === 'user')) {
      const reply = message(index);
      const toolName = reply.role === 'user'
        ? USER_FEEDBACK_TOOL
        : reply.name ?? turn.action.toolCall?.name ?? 'tool';
      turn.response = { toolName, status: reply.status ?? defaultStatus, text: content(index) };
      if (reply.tool_call_id !== undefined) turn.response.toolCallId = reply.tool_call_id;
      index++;
    }
    turns.push(turn);
  }
  const trajectory: Record<string, unknown> = { id: options.id, prompt, turns };
  if (system !== undefined) trajectory.system = system;
  for (const key of ['reward', 'groupId', 'truncated', 'metadata'] as const) {
    if (options[key] !== undefined) trajectory[key] = options[key];
  }
  // One validation path for every way a trajectory is made.
  return parseTrajectory(trajectory);
}

/**
 * Exports a trajectory as chat messages; the inverse of `fromChatMessages`. Token ids,
 * log-probs and episode fields (id, reward, group) are not part of the chat format. The
 * format requires tool-call ids: a call without one gets `call_<turn index>`.
 */
export function toChatMessages(trajectory: Trajectory): TrajectoryChatMessage[] {
  checkObject('trajectory', trajectory);
  const messages: TrajectoryChatMessage[] = [];
  if (trajectory.system !== undefined) messages.push({ role: 'system', content: trajectory.system });
  messages.push({ role: 'user', content: trajectory.prompt });
  trajectory.turns.forEach(({ action, response }, t) => {
    const assistant: TrajectoryChatMessage = { role: 'assistant', content: action.text };
    if (action.toolCall !== undefined) {
      const { id = `call_${t}`, name, arguments: args } = action.toolCall;
      assistant.tool_calls = [{ id, type: 'function', function: { name, arguments: args } }];
    }
    messages.push(assistant);
    if (response === undefined) return;
    const reply: TrajectoryChatMessage = response.toolName === USER_FEEDBACK_TOOL
      ? { role: 'user', content: response.text, status: response.status }
      : { role: 'tool', content: response.text, name: response.toolName, status: response.status };
    if (response.toolCallId !== undefined) reply.tool_call_id = response.toolCallId;
    messages.push(reply);
  });
  return messages;
}
