/**
 * An agent policy that speaks token ids to the engine: the conversation's context is kept as
 * ids, each turn's sampled ids are appended as the engine returned them, and each tool
 * response is tokenised once, when it is appended. The agent's trajectory is then exactly the
 * sequence the engine saw and sampled, token for token.
 */
import type { TokenPolicy } from '../chat_client/tokens.js';
import { fromChatMessages, type TrajectoryChatMessage as ChatMessage } from '../trajectory/chat.js';
import type { ActionToolCall, ToolFeedback } from '../trajectory/model.js';
import { encodeParts, renderTrajectory, type ChatTemplate, type TemplatePart } from '../trajectory/template.js';
import type { Tokenizer } from '../trajectory/tokenizer.js';
import type { AgentPolicy, GenerateOptions, Generation } from './agent_policy.js';
import { checkArray, checkObject, checkPositiveInteger, rangeError, typeError } from '../check.js';

/** What a tool-call parser makes of a turn's text. */
export interface ParsedTurn {
  /** The text without the tool call's markup. */
  text: string;
  toolCall?: ActionToolCall;
}

/**
 * Reads a Hermes-style tool call, as Qwen2.5/Qwen3 write them:
 * `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`. The first call is kept (a turn
 * has at most one); text that is not such a call is left as it is.
 */
export function parseHermesToolCall(text: string): ParsedTurn {
  const match = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/.exec(text);
  if (match === null) return { text };
  let call: unknown;
  try {
    call = JSON.parse(match[1]!);
  } catch {
    return { text };
  }
  if (call === null || typeof call !== 'object' || typeof (call as { name?: unknown }).name !== 'string') return { text };
  const { name, arguments: args } = call as { name: string; arguments?: unknown };
  return { text: text.slice(0, match.index), toolCall: { name, arguments: typeof args === 'string' ? args : argumentsText(match[1]!, args) } };
}

/** The arguments object as the model wrote it (its spacing kept), when it can be cut out of the call; else re-serialised. */
function argumentsText(body: string, args: unknown): string {
  const key = /"arguments"\s*:\s*/.exec(body);
  const end = body.lastIndexOf('}');
  if (key !== null && end > key.index) {
    const raw = body.slice(key.index + key[0].length, end).trimEnd();
    try {
      if (JSON.stringify(JSON.parse(raw)) === JSON.stringify(args)) return raw;
    } catch {
      // not cut cleanly: re-serialise below
    }
  }
  return JSON.stringify(args ?? {});
}

/** Options of {@link TokenAgentPolicy}. */
export interface TokenAgentPolicyOptions {
  /** The model's tokenizer (e.g. `loadQwen3Tokenizer()`). */
  tokenizer: Tokenizer;
  /** The model's chat template, made with the same tools the agent offers (e.g. `JinjaChatTemplate.fromTokenizer(tokenizer, { tools })`). */
  template: ChatTemplate;
  /** Most tokens per turn. */
  maxTokens: number;
  temperature?: number;
  topP?: number;
  seed?: number;
  /** Ids that end a turn. Default: the id of the template's `endOfTurn` token, when it has one. */
  stopTokenIds?: readonly number[];
  /** Version of the weights the engine serves, recorded on each action: a number, or a function read at each call. */
  policyVersion?: number | (() => number);
  /** Splits a tool call off a turn's text. Default `parseHermesToolCall`. */
  parseToolCall?: (text: string) => ParsedTurn;
  /** Conversations whose context ids are kept for their next turn (oldest dropped first). Default 10000. */
  maxConversations?: number;
}

/** A stable key of a conversation's messages. */
function keyOf(messages: readonly ChatMessage[]): string {
  return JSON.stringify(messages.map((message) => [
    message.role, message.content ?? '', message.tool_call_id ?? null,
    message.tool_calls?.map((call) => [call.function.name, call.function.arguments]) ?? null,
  ]));
}

function feedbackOf(message: ChatMessage): ToolFeedback {
  const feedback: ToolFeedback = {
    toolName: message.role === 'user' ? 'user' : message.name ?? 'tool',
    status: message.status ?? 'success',
    text: message.content ?? '',
  };
  if (message.tool_call_id !== undefined) feedback.toolCallId = message.tool_call_id;
  return feedback;
}

/**
 * An {@link AgentPolicy} over a token API (`TokenCompletionClient` for vLLM, SGLang or
 * `tirl serve`). Each generation carries `promptTokenIds` (the context sent), the sampled
 * `tokenIds` with the engine's `logprobs`, `tokenSource: 'tokens'` and the policy version,
 * so the agents' trajectories hold an exact token record (`takeGeneration`).
 */
export class TokenAgentPolicy implements AgentPolicy {
  readonly #client: TokenPolicy;
  readonly #tokenizer: Tokenizer;
  readonly #template: ChatTemplate;
  readonly #sampling: { maxTokens: number; temperature?: number; topP?: number; seed?: number; stopTokenIds: number[] };
  readonly #policyVersion: number | (() => number) | undefined;
  readonly #parse: (text: string) => ParsedTurn;
  readonly #maxConversations: number;
  readonly #contexts = new Map<string, number[]>();
  #calls = 0;

  /** @throws TypeError or RangeError naming a bad option. */
  constructor(client: TokenPolicy, options: TokenAgentPolicyOptions) {
    if (client === null || typeof client !== 'object' || typeof client.complete !== 'function') {
      throw typeError('client', 'a token policy (an object with a complete(request) method)', client);
    }
    checkObject('options', options);
    const tokenizer = options.tokenizer;
    if (tokenizer === null || typeof tokenizer !== 'object' || typeof tokenizer.encode !== 'function') throw typeError('options.tokenizer', 'a Tokenizer', tokenizer);
    const template = options.template;
    if (template === null || typeof template !== 'object' || typeof template.prompt !== 'function') throw typeError('options.template', 'a ChatTemplate', template);
    this.#client = client;
    this.#tokenizer = tokenizer;
    this.#template = template;
    const endOfTurn = (template as { endOfTurn?: unknown }).endOfTurn;
    const stopTokenIds = options.stopTokenIds === undefined
      ? (typeof endOfTurn === 'string' ? [tokenizer.specialTokenId(endOfTurn)] : [])
      : checkArray('options.stopTokenIds', options.stopTokenIds).map((id, i) => {
        if (!Number.isInteger(id) || (id as number) < 0) throw typeError(`options.stopTokenIds[${i}]`, 'a token id', id);
        return id as number;
      });
    this.#sampling = { maxTokens: checkPositiveInteger('options.maxTokens', options.maxTokens), stopTokenIds };
    if (options.temperature !== undefined) this.#sampling.temperature = options.temperature;
    if (options.topP !== undefined) this.#sampling.topP = options.topP;
    if (options.seed !== undefined) this.#sampling.seed = options.seed;
    const version = options.policyVersion;
    if (version !== undefined && typeof version !== 'function' && (!Number.isInteger(version) || version < 0)) {
      throw typeError('options.policyVersion', 'a non-negative integer or a function returning one', version);
    }
    this.#policyVersion = version;
    if (options.parseToolCall !== undefined && typeof options.parseToolCall !== 'function') throw typeError('options.parseToolCall', 'a function', options.parseToolCall);
    this.#parse = options.parseToolCall ?? parseHermesToolCall;
    this.#maxConversations = options.maxConversations === undefined ? 10_000 : checkPositiveInteger('options.maxConversations', options.maxConversations);
  }

  /**
   * Samples the next turn of `messages`; tools must be the ones the template was made with.
   * A stop sequence (`options.stop`) that is one token of the tokenizer is sent as a stop id,
   * others as stop strings; either way the turn keeps it.
   */
  async generate(messages: readonly ChatMessage[], options: GenerateOptions = {}): Promise<Generation> {
    checkArray('messages', messages);
    checkObject('options', options);
    const context = this.#context(messages);
    const seed = this.#sampling.seed === undefined ? {} : { seed: this.#sampling.seed + this.#calls };
    this.#calls++;
    const stopStrings: string[] = [];
    const stopTokenIds = this.#sampling.stopTokenIds.slice();
    for (const [i, text] of checkArray('options.stop', options.stop ?? []).entries()) {
      if (typeof text !== 'string' || text === '') throw typeError(`options.stop[${i}]`, 'a non-empty string', text);
      const ids = this.#stopIds(text);
      if (ids.length === 1) stopTokenIds.push(ids[0]!);
      else stopStrings.push(text);
    }
    const completion = await this.#client.complete({
      ...this.#sampling, ...seed, stopTokenIds, ...(stopStrings.length > 0 ? { stop: stopStrings } : {}), promptTokenIds: context, n: 1,
    });
    const sample = completion.samples[0];
    if (sample === undefined) throw rangeError('completion.samples', 'one sample', completion.samples);
    this.#remember(messages, [...context, ...sample.tokenIds]);
    const stop = this.#sampling.stopTokenIds;
    const visible = sample.tokenIds.length > 0 && stop.includes(sample.tokenIds[sample.tokenIds.length - 1]!)
      ? sample.tokenIds.slice(0, -1) : sample.tokenIds;
    const parsed = this.#parse(this.#tokenizer.decode(visible));
    const generation: Generation = {
      text: parsed.text,
      tokenIds: sample.tokenIds.slice(),
      logprobs: sample.logprobs.slice(),
      tokenSource: 'tokens',
      promptTokenIds: context,
    };
    if (parsed.toolCall !== undefined) generation.toolCall = { id: parsed.toolCall.id ?? `call_${this.#calls}`, name: parsed.toolCall.name, arguments: parsed.toolCall.arguments };
    const version = typeof this.#policyVersion === 'function' ? this.#policyVersion() : this.#policyVersion;
    if (version !== undefined) generation.policyVersion = version;
    if (sample.finishReason !== null) generation.finishReason = sample.finishReason;
    return generation;
  }

  /** The context ids of `messages`: a remembered conversation extended by its feedback, else rendered afresh. */
  #context(messages: readonly ChatMessage[]): number[] {
    for (let j = messages.length - 1; j >= 1; j--) {
      const remembered = this.#contexts.get(keyOf(messages.slice(0, j)));
      if (remembered === undefined) continue;
      const rest = messages.slice(j);
      if (rest[0]!.role !== 'assistant' || rest.length < 2 || !rest.slice(1).every((message) => message.role === 'tool' || message.role === 'user')) continue;
      const ids = remembered.slice();
      for (const message of rest.slice(1)) ids.push(...this.#encode(this.#template.response(feedbackOf(message))));
      ids.push(...this.#encode(this.#template.nextTurn()));
      return ids;
    }
    const system = messages[0]?.role === 'system' ? messages[0].content ?? '' : undefined;
    const promptIndex = system === undefined ? 0 : 1;
    if (messages.length === promptIndex + 1 && messages[promptIndex]!.role === 'user') {
      return this.#encode(this.#template.prompt(system, messages[promptIndex]!.content ?? ''));
    }
    // A conversation this policy did not write: rendered from its text by the template.
    const trajectory = fromChatMessages(messages, { id: 'context' });
    const ids = renderTrajectory(trajectory, this.#tokenizer, this.#template).tokens;
    ids.push(...this.#encode(this.#template.nextTurn()));
    return ids;
  }

  /** The ids of a stop sequence: a special token by its text, else the text encoded. */
  #stopIds(text: string): number[] {
    return text in this.#tokenizer.specialTokens ? [this.#tokenizer.specialTokenId(text)] : this.#tokenizer.encode(text);
  }

  #remember(messages: readonly ChatMessage[], ids: number[]): void {
    const key = keyOf(messages);
    this.#contexts.delete(key);
    this.#contexts.set(key, ids);
    while (this.#contexts.size > this.#maxConversations) this.#contexts.delete(this.#contexts.keys().next().value!);
  }

  #encode(parts: TemplatePart[]): number[] {
    return encodeParts(parts, this.#tokenizer);
  }
}
