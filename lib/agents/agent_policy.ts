/**
 * The agents' view of a policy: chat messages in, one assistant turn out. Small on purpose,
 * so an OpenAI-compatible server, a scripted list of answers in a test, or a tiny local
 * model can all stand behind it.
 */
import type { ChatCompletion, ChatMessage as WireMessage, ChatPolicy, ChatRequest } from '../chat_client/index.js';
import type { OpenAIToolSpec } from '../tools/registry.js';
import type { TrajectoryChatMessage as ChatMessage } from '../trajectory/chat.js';
import type { Action } from '../trajectory/model.js';
import { checkArray, checkObject, rangeError, typeError } from '../check.js';

/** Per-call options an agent passes to its policy. */
export interface GenerateOptions {
  /** Tools the model may call (OpenAI `tools` format, e.g. `registry.toOpenAITools()`); none when absent or empty. */
  tools?: OpenAIToolSpec[];
  /**
   * Stop sequences: the turn ends once its text ends with one (e.g. the output fence after
   * an inline code block, so the model waits for the code's output), and the turn's text and
   * ids keep it. None when absent or empty.
   */
  stop?: readonly string[];
}

/**
 * One assistant turn: the trajectory model's `Action` (text, at most one tool call, token
 * ids and log-probs when known), plus why generation stopped.
 */
export interface Generation extends Action {
  /** 'stop', 'length', 'tool_calls', … as the policy reports it; 'length' means the turn was cut off. */
  finishReason?: string;
  /**
   * The whole context the policy read, as token ids, when it reports them (a token-in,
   * token-out policy, or a server that returns `prompt_token_ids`). Agents record it in the
   * trajectory's token record (`takeGeneration`), not in the action.
   */
  promptTokenIds?: number[];
}

/** Anything that writes the next assistant turn of a conversation. */
export interface AgentPolicy {
  /**
   * Writes the assistant turn that follows `messages` (system, user, assistant and tool
   * messages in the SDK's chat format, oldest first).
   */
  generate(messages: readonly ChatMessage[], options?: GenerateOptions): Promise<Generation>;
}

/** Throws a TypeError naming `name` unless `value` has a `generate` function. */
export function checkPolicy(name: string, value: unknown): AgentPolicy {
  if (value === null || typeof value !== 'object' || typeof (value as AgentPolicy).generate !== 'function') {
    throw typeError(name, 'a policy (an object with a generate(messages) method)', value);
  }
  return value as AgentPolicy;
}

/** What a scripted policy may answer: plain text, or a whole action (with a tool call or token ids). */
export type ScriptedResponse = string | Generation;

/** Computes a scripted answer from the conversation and the 0-based call number. */
export type ScriptFunction = (messages: readonly ChatMessage[], call: number) => ScriptedResponse | Promise<ScriptedResponse>;

function copyMessages(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((message) => structuredClone(message));
}

/**
 * A policy that answers from a script: a list of responses given in order, or a function of
 * the conversation. It keeps every conversation it was shown in `calls`, so tests can check
 * exactly what an agent put in context. Used by the tests and offline examples.
 */
export class ScriptedPolicy implements AgentPolicy {
  readonly #script: ScriptFunction;
  readonly #calls: ChatMessage[][] = [];
  readonly #options: (GenerateOptions | undefined)[] = [];

  /**
   * @param script responses in the order they are asked for (an Error is thrown once they
   * run out), or a function computing each response.
   * @throws TypeError when `script` is neither, or a listed response is neither a string nor an action.
   */
  constructor(script: readonly ScriptedResponse[] | ScriptFunction) {
    if (typeof script === 'function') {
      this.#script = script;
      return;
    }
    const responses = checkArray('script', script).map((response, i) => {
      if (typeof response === 'string') return response;
      const action = checkObject(`script[${i}]`, response);
      if (typeof action.text !== 'string') throw typeError(`script[${i}].text`, 'a string', action.text);
      return structuredClone(response as Generation);
    });
    this.#script = (_messages, call) => {
      if (call >= responses.length) {
        throw new Error(`ScriptedPolicy has ${responses.length} responses but was asked for response ${call + 1}`);
      }
      return responses[call]!;
    };
  }

  /** Every conversation the policy was shown, one array of messages per call, in call order (copies). */
  get calls(): readonly (readonly ChatMessage[])[] {
    return this.#calls;
  }

  /** The options of every call, in call order. */
  get callOptions(): readonly (GenerateOptions | undefined)[] {
    return this.#options;
  }

  /** Answers with the next scripted response. */
  async generate(messages: readonly ChatMessage[], options?: GenerateOptions): Promise<Generation> {
    checkArray('messages', messages);
    const call = this.#calls.length;
    this.#calls.push(copyMessages(messages));
    this.#options.push(options);
    const response = await this.#script(messages, call);
    if (typeof response === 'string') return { text: response };
    if (response === null || typeof response !== 'object' || typeof response.text !== 'string') {
      throw typeError(`script response ${call + 1}`, 'a string or an action with text', response);
    }
    return structuredClone(response);
  }
}

/** Request fields a {@link ChatCompletionPolicy} sends with every call. */
export type ChatCompletionDefaults = Omit<ChatRequest, 'messages' | 'tools'>;

/**
 * Turns trajectory chat messages into the wire format: the tirl `status` field is left out,
 * and a tool message that answers no tool call (output of code the model wrote inline) is
 * sent as a user message, since servers reject tool messages without a matching call.
 */
function toWireMessages(messages: readonly ChatMessage[]): WireMessage[] {
  let openCallIds: string[] = [];
  return messages.map((message, index) => {
    checkObject(`messages[${index}]`, message);
    const out: WireMessage = { role: message.role, content: message.content };
    if (message.role === 'assistant') {
      openCallIds = [];
      if (message.tool_calls !== undefined && message.tool_calls.length > 0) {
        out.tool_calls = message.tool_calls.map((call) => structuredClone(call));
        openCallIds = message.tool_calls.map((call) => call.id);
      }
    } else if (message.role === 'tool') {
      const answered = message.tool_call_id ?? openCallIds[0];
      if (answered === undefined || !openCallIds.includes(answered)) {
        out.role = 'user';
      } else {
        out.tool_call_id = answered;
        if (message.name !== undefined) out.name = message.name;
        openCallIds = openCallIds.filter((id) => id !== answered);
      }
    } else if (message.name !== undefined) {
      out.name = message.name;
    }
    return out;
  });
}

/**
 * Reads a chat completion as one turn. Reasoning the server returned apart
 * (`reasoning_content`) is kept, inside `<think>…</think>` before the answer, since it is part
 * of what the model generated. A turn holds at most one tool call (the trajectory model's
 * rule); parallel calls are turned off in the request, and of several the first is kept.
 */
function generationOf(completion: ChatCompletion): Generation {
  const content = completion.content ?? '';
  const text = completion.reasoning === undefined ? content : `<think>${completion.reasoning}</think>${content}`;
  const generation: Generation = { text };
  const call = completion.toolCalls[0];
  if (call !== undefined) {
    generation.toolCall = { id: call.id, name: call.function.name, arguments: call.function.arguments };
  }
  if (completion.promptTokenIds !== undefined) generation.promptTokenIds = completion.promptTokenIds.slice();
  if (completion.tokenIds === undefined) {
    // A text-only server: the template will tokenise this turn's text.
    generation.tokenSource = 'text';
  } else {
    generation.tokenIds = completion.tokenIds.slice();
    const logprobs = completion.logprobs;
    // Log-probs belong in the trajectory only when they line up one to one with the ids.
    if (logprobs !== undefined && logprobs.length === completion.tokenIds.length && logprobs.every((entry) => Number.isFinite(entry.logprob))) {
      generation.logprobs = logprobs.map((entry) => entry.logprob);
    }
  }
  if (completion.finishReason !== null) generation.finishReason = completion.finishReason;
  return generation;
}

/**
 * An {@link AgentPolicy} backed by an OpenAI-compatible chat-completions client
 * (`OpenAIChatClient` from `lib/chat_client`, or anything with its `chat` method).
 */
export class ChatCompletionPolicy implements AgentPolicy {
  readonly #client: ChatPolicy;
  readonly #defaults: ChatCompletionDefaults;

  /**
   * @param client the chat client, e.g. `new OpenAIChatClient({ baseUrl, model })`.
   * @param defaults request fields sent with every call (temperature, maxTokens, logprobs,
   * returnTokenIds, stop, …). Default none: the server's own defaults apply.
   * @throws TypeError when `client` has no `chat` method or `defaults` is not an object.
   */
  constructor(client: ChatPolicy, defaults: ChatCompletionDefaults = {}) {
    if (client === null || typeof client !== 'object' || typeof client.chat !== 'function') {
      throw typeError('client', 'a chat client (an object with a chat(request) method)', client);
    }
    checkObject('defaults', defaults);
    if ('messages' in defaults || 'tools' in defaults) {
      throw rangeError('defaults', 'request fields other than messages and tools', Object.keys(defaults));
    }
    this.#client = client;
    this.#defaults = { ...defaults };
  }

  /**
   * Sends the conversation (and the tools, when there are some) and reads the answer's first
   * choice. Rejects as the client does (`PolicyRequestError` for server and network failures).
   */
  async generate(messages: readonly ChatMessage[], options: GenerateOptions = {}): Promise<Generation> {
    checkArray('messages', messages);
    checkObject('options', options);
    const request: ChatRequest = { ...this.#defaults, messages: toWireMessages(messages) };
    if (options.tools !== undefined && options.tools.length > 0) {
      request.tools = options.tools;
      request.extraBody = { parallel_tool_calls: false, ...this.#defaults.extraBody };
    }
    if (options.stop !== undefined && options.stop.length > 0) {
      // vLLM's flag keeps the stop string in the text, where the agent looks for the code block it closes.
      request.stop = [...options.stop];
      request.extraBody = { include_stop_str_in_output: true, ...request.extraBody ?? this.#defaults.extraBody };
    }
    return generationOf(await this.#client.chat(request));
  }
}
