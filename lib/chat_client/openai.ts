import type { ChatCompletion, ChatPolicy, ChatRequest, TokenCandidate, TokenLogprob } from './types.js';
import { checkInteger, checkNonEmptyString, checkNumber, checkObject, checkOptions, typeError } from '../check.js';

/** Options of {@link OpenAIChatClient}. */
export interface OpenAIChatClientOptions {
  /** Base URL of the API, with its version path, e.g. `http://127.0.0.1:8000/v1`. */
  baseUrl: string;
  /** Model name sent with each request. */
  model: string;
  /** Sent as `Authorization: Bearer <apiKey>` when given. */
  apiKey?: string;
  /** Whole-request limit in milliseconds, streaming included (default 120000). */
  timeoutMs?: number;
  /** Extra HTTP headers for every request. */
  headers?: Record<string, string>;
}

/** What went wrong with a request: the server's answer (`http`, with `status`), the time
 * limit, the caller's abort, the connection, or an answer that is not the wire format. */
export type PolicyErrorKind = 'http' | 'timeout' | 'aborted' | 'network' | 'protocol';

/** A chat request failed; `kind` says how, `status` and `body` carry an HTTP error. */
export class PolicyRequestError extends Error {
  override name = 'PolicyRequestError';
  readonly kind: PolicyErrorKind;
  readonly status: number | undefined;
  readonly body: string | undefined;

  constructor(kind: PolicyErrorKind, message: string, details: { status?: number; body?: string; cause?: unknown } = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.kind = kind;
    this.status = details.status;
    this.body = details.body;
  }
}

const TOKEN_ID_PREFIX = /^token_id:(\d+)$/;

interface WireLogprob {
  token?: unknown;
  id?: unknown;
  logprob?: unknown;
  top_logprobs?: unknown;
}

function candidateOf(entry: WireLogprob): TokenCandidate {
  const token = typeof entry.token === 'string' ? entry.token : '';
  const candidate: TokenCandidate = { token, logprob: typeof entry.logprob === 'number' ? entry.logprob : Number.NaN };
  const prefixed = TOKEN_ID_PREFIX.exec(token);
  if (prefixed !== null) candidate.tokenId = Number(prefixed[1]);
  else if (typeof entry.id === 'number') candidate.tokenId = entry.id;
  return candidate;
}

function logprobsOf(content: unknown): TokenLogprob[] {
  if (!Array.isArray(content)) return [];
  return content.map((entry: WireLogprob) => ({
    ...candidateOf(entry),
    topLogprobs: Array.isArray(entry.top_logprobs) ? entry.top_logprobs.map((top: WireLogprob) => candidateOf(top)) : [],
  }));
}

function numberArray(value: unknown): number[] | undefined {
  return Array.isArray(value) && value.every((item) => typeof item === 'number') ? value : undefined;
}

function argumentsText(value: unknown): string {
  // Some servers send the arguments as an object instead of JSON text.
  return typeof value === 'string' ? value : value === undefined ? '' : JSON.stringify(value);
}

function usageOf(value: unknown): ChatCompletion['usage'] {
  if (typeof value !== 'object' || value === null) return undefined;
  const usage = value as Record<string, unknown>;
  const promptTokens = Number(usage.prompt_tokens ?? 0);
  const completionTokens = Number(usage.completion_tokens ?? 0);
  return { promptTokens, completionTokens, totalTokens: Number(usage.total_tokens ?? promptTokens + completionTokens) };
}

/** Fills `tokenIds` from the log-prob tokens when every one carries its id. */
function completeTokenIds(completion: ChatCompletion): ChatCompletion {
  if (completion.tokenIds === undefined && completion.logprobs !== undefined && completion.logprobs.length > 0 &&
      completion.logprobs.every((entry) => entry.tokenId !== undefined)) {
    completion.tokenIds = completion.logprobs.map((entry) => entry.tokenId!);
  }
  return completion;
}

/** The message of an error body in the OpenAI, vLLM or SGLang shape, else the text itself. @internal */
export function errorMessageOf(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { message?: unknown } | string; message?: unknown };
    if (typeof parsed.error === 'object' && typeof parsed.error?.message === 'string') return parsed.error.message;
    if (typeof parsed.error === 'string') return parsed.error;
    if (typeof parsed.message === 'string') return parsed.message;
  } catch {
    // not JSON: use the text
  }
  return body.slice(0, 500);
}

/**
 * Client for an OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp server,
 * …), using Node's built-in fetch. It sends messages with tools, and returns the answer's
 * text, tool calls, and token ids and log-probabilities when the server returns them;
 * streaming (server-sent events) and non-streaming answers come back in the same shape.
 * Only the first choice is read.
 */
export class OpenAIChatClient implements ChatPolicy {
  readonly #endpoint: string;
  readonly #model: string;
  readonly #timeoutMs: number;
  readonly #headers: Record<string, string>;

  /** Throws a TypeError or RangeError for a bad option, naming it. */
  constructor(options: OpenAIChatClientOptions) {
    const checked = checkObject('options', options);
    const baseUrl = checkNonEmptyString('options.baseUrl', checked.baseUrl);
    let url: URL;
    try {
      url = new URL(baseUrl);
    } catch {
      throw typeError('options.baseUrl', 'an http(s) URL', baseUrl);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw typeError('options.baseUrl', 'an http(s) URL', baseUrl);
    }
    this.#endpoint = `${baseUrl.replace(/\/+$/, '')}/chat/completions`;
    this.#model = checkNonEmptyString('options.model', checked.model);
    this.#timeoutMs = checkInteger('options.timeoutMs', checked.timeoutMs, 120_000, 1, 86_400_000);
    const headers = checkOptions('options.headers', checked.headers);
    this.#headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    for (const [name, value] of Object.entries(headers)) {
      if (typeof value !== 'string') throw typeError(`options.headers.${name}`, 'a string', value);
      this.#headers[name.toLowerCase()] = value;
    }
    if (checked.apiKey !== undefined) {
      this.#headers.authorization = `Bearer ${checkNonEmptyString('options.apiKey', checked.apiKey)}`;
    }
  }

  /**
   * Sends `request` and resolves with the first choice. Rejects with a
   * {@link PolicyRequestError} when the server answers with an error status, the time
   * limit passes, the caller aborts, the connection fails or the answer is malformed;
   * with a TypeError or RangeError for a bad request.
   */
  async chat(request: ChatRequest): Promise<ChatCompletion> {
    const body = this.#body(request);
    const timeoutMs = checkInteger('request.timeoutMs', request.timeoutMs, this.#timeoutMs, 1, 86_400_000);
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = request.signal === undefined ? timeout : AbortSignal.any([timeout, request.signal]);
    const failure = (error: unknown): PolicyRequestError => {
      if (error instanceof PolicyRequestError) return error;
      if (timeout.aborted) return new PolicyRequestError('timeout', `No complete answer from ${this.#endpoint} within ${timeoutMs} ms`, { cause: error });
      if (request.signal?.aborted) return new PolicyRequestError('aborted', 'The request was aborted', { cause: error });
      const detail = error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error);
      return new PolicyRequestError('network', `Could not reach ${this.#endpoint}: ${detail}`, { cause: error });
    };
    try {
      const response = await fetch(this.#endpoint, { method: 'POST', headers: this.#headers, body: JSON.stringify(body), signal });
      if (!response.ok) {
        const text = await response.text();
        throw new PolicyRequestError('http', `${this.#endpoint} answered ${response.status}: ${errorMessageOf(text)}`, {
          status: response.status, body: text,
        });
      }
      const isStream = (response.headers.get('content-type') ?? '').includes('text/event-stream');
      if (isStream) return await this.#readStream(response, request.onDelta);
      const text = await response.text();
      return this.#parseCompletion(text);
    } catch (error) {
      throw failure(error);
    }
  }

  #body(request: ChatRequest): Record<string, unknown> {
    const checked = checkObject('request', request);
    const messages = checked.messages;
    if (!Array.isArray(messages) || messages.length === 0) {
      throw typeError('request.messages', 'a non-empty array of messages', messages);
    }
    messages.forEach((message, index) => {
      const role = checkObject(`request.messages[${index}]`, message).role;
      if (role !== 'system' && role !== 'user' && role !== 'assistant' && role !== 'tool') {
        throw typeError(`request.messages[${index}].role`, "'system', 'user', 'assistant' or 'tool'", role);
      }
    });
    const body: Record<string, unknown> = { model: this.#model, messages };
    if (request.tools !== undefined) {
      if (!Array.isArray(request.tools)) throw typeError('request.tools', 'an array of tools', request.tools);
      if (request.tools.length > 0) body.tools = request.tools;
    }
    if (request.toolChoice !== undefined) {
      const choice: unknown = request.toolChoice;
      if (choice !== 'auto' && choice !== 'none' && choice !== 'required' && (typeof choice !== 'object' || choice === null)) {
        throw typeError('request.toolChoice', "'auto', 'none', 'required' or { type: 'function', function: { name } }", choice);
      }
      body.tool_choice = choice;
    }
    if (request.temperature !== undefined) body.temperature = checkNumber('request.temperature', request.temperature, 1, 0, 100);
    if (request.topP !== undefined) body.top_p = checkNumber('request.topP', request.topP, 1, 0, 1);
    if (request.maxTokens !== undefined) body.max_tokens = checkInteger('request.maxTokens', request.maxTokens, 1, 1, 1 << 30);
    if (request.stop !== undefined) {
      const stop: unknown = request.stop;
      if (typeof stop !== 'string' && !(Array.isArray(stop) && stop.every((item) => typeof item === 'string'))) {
        throw typeError('request.stop', 'a string or an array of strings', stop);
      }
      body.stop = stop;
    }
    if (request.seed !== undefined) body.seed = checkInteger('request.seed', request.seed, 0, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
    if (request.logprobs === true || request.topLogprobs !== undefined) body.logprobs = true;
    if (request.topLogprobs !== undefined) body.top_logprobs = checkInteger('request.topLogprobs', request.topLogprobs, 0, 0, 20);
    if (request.returnTokenIds === true) {
      body.return_tokens_as_token_ids = true;
      body.return_token_ids = true;
    }
    if (request.stream === true) {
      body.stream = true;
      body.stream_options = { include_usage: true };
    }
    if (request.onDelta !== undefined && typeof request.onDelta !== 'function') {
      throw typeError('request.onDelta', 'a function', request.onDelta);
    }
    Object.assign(body, checkOptions('request.extraBody', request.extraBody));
    return body;
  }

  #parseCompletion(text: string): ChatCompletion {
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw new PolicyRequestError('protocol', `${this.#endpoint} answered with something that is not JSON: ${text.slice(0, 200)}`, { body: text });
    }
    const choice = Array.isArray(parsed.choices) ? (parsed.choices[0] as Record<string, unknown> | undefined) : undefined;
    const message = choice?.message as Record<string, unknown> | undefined;
    if (typeof message !== 'object' || message === null) {
      throw new PolicyRequestError('protocol', `${this.#endpoint} answered without choices[0].message`, { body: text });
    }
    const completion: ChatCompletion = {
      id: String(parsed.id ?? ''),
      model: String(parsed.model ?? this.#model),
      content: typeof message.content === 'string' ? message.content : null,
      toolCalls: Array.isArray(message.tool_calls)
        ? message.tool_calls.map((call: Record<string, any>, index: number) => ({
          id: String(call.id ?? `call_${index}`),
          type: 'function' as const,
          function: { name: String(call.function?.name ?? ''), arguments: argumentsText(call.function?.arguments) },
        }))
        : [],
      finishReason: typeof choice!.finish_reason === 'string' ? choice!.finish_reason : null,
    };
    const reasoning = message.reasoning_content ?? message.reasoning;
    if (typeof reasoning === 'string') completion.reasoning = reasoning;
    const logprobs = choice!.logprobs as { content?: unknown } | null | undefined;
    if (logprobs !== null && logprobs !== undefined) completion.logprobs = logprobsOf(logprobs.content);
    const tokenIds = numberArray(choice!.token_ids);
    if (tokenIds !== undefined) completion.tokenIds = tokenIds;
    const promptTokenIds = numberArray(parsed.prompt_token_ids ?? choice!.prompt_token_ids);
    if (promptTokenIds !== undefined) completion.promptTokenIds = promptTokenIds;
    const usage = usageOf(parsed.usage);
    if (usage !== undefined) completion.usage = usage;
    return completeTokenIds(completion);
  }

  async #readStream(response: Response, onDelta: ChatRequest['onDelta']): Promise<ChatCompletion> {
    const completion: ChatCompletion = { id: '', model: this.#model, content: null, toolCalls: [], finishReason: null };
    const toolCalls: Array<{ id?: string; name: string; arguments: string }> = [];
    let content = '';
    let reasoning = '';
    let sawContent = false;
    let done = false;
    const apply = (data: string): void => {
      let chunk: Record<string, any>;
      try {
        chunk = JSON.parse(data) as Record<string, any>;
      } catch {
        throw new PolicyRequestError('protocol', `A streamed event from ${this.#endpoint} is not JSON: ${data.slice(0, 200)}`, { body: data });
      }
      if (chunk.error !== undefined) {
        throw new PolicyRequestError('http', `${this.#endpoint} reported an error mid-stream: ${errorMessageOf(data)}`, { body: data });
      }
      if (typeof chunk.id === 'string' && completion.id === '') completion.id = chunk.id;
      if (typeof chunk.model === 'string') completion.model = chunk.model;
      const promptTokenIds = numberArray(chunk.prompt_token_ids);
      if (promptTokenIds !== undefined) completion.promptTokenIds = promptTokenIds;
      const usage = usageOf(chunk.usage);
      if (usage !== undefined) completion.usage = usage;
      const choice = Array.isArray(chunk.choices) ? chunk.choices.find((item: any) => (item?.index ?? 0) === 0) : undefined;
      if (choice === undefined) return;
      const delta = (choice.delta ?? {}) as Record<string, any>;
      if (typeof delta.content === 'string' && delta.content.length > 0) {
        content += delta.content;
        sawContent = true;
        onDelta?.({ content: delta.content });
      }
      const reasoningPiece = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoningPiece === 'string' && reasoningPiece.length > 0) {
        reasoning += reasoningPiece;
        onDelta?.({ reasoning: reasoningPiece });
      }
      if (Array.isArray(delta.tool_calls)) {
        for (const piece of delta.tool_calls as Array<Record<string, any>>) {
          const index = typeof piece.index === 'number' ? piece.index : toolCalls.length;
          const call = (toolCalls[index] ??= { name: '', arguments: '' });
          if (typeof piece.id === 'string') call.id = piece.id;
          // The name arrives whole, once (some servers repeat it in later pieces).
          if (typeof piece.function?.name === 'string' && call.name === '') call.name = piece.function.name;
          const argumentsPiece = piece.function?.arguments === undefined ? '' : argumentsText(piece.function.arguments);
          call.arguments += argumentsPiece;
          onDelta?.({
            toolCall: {
              index,
              ...(typeof piece.id === 'string' ? { id: piece.id } : {}),
              ...(typeof piece.function?.name === 'string' ? { name: piece.function.name } : {}),
              ...(argumentsPiece !== '' ? { arguments: argumentsPiece } : {}),
            },
          });
        }
      }
      if (choice.logprobs !== null && choice.logprobs !== undefined) {
        (completion.logprobs ??= []).push(...logprobsOf(choice.logprobs.content));
      }
      const tokenIds = numberArray(choice.token_ids);
      if (tokenIds !== undefined) (completion.tokenIds ??= []).push(...tokenIds);
      if (typeof choice.finish_reason === 'string') completion.finishReason = choice.finish_reason;
    };

    const decoder = new TextDecoder();
    let buffered = '';
    let eventData: string[] = [];
    const handleLine = (rawLine: string): void => {
      const line = rawLine.endsWith('\r') ? rawLine.slice(0, -1) : rawLine;
      if (line === '') {
        // A blank line ends an event.
        if (eventData.length > 0) {
          const data = eventData.join('\n');
          eventData = [];
          if (data.trim() === '[DONE]') done = true;
          else if (!done) apply(data);
        }
        return;
      }
      if (line.startsWith(':')) return; // comment / keep-alive
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') eventData.push(value);
    };
    if (response.body === null) throw new PolicyRequestError('protocol', `${this.#endpoint} sent an empty stream`);
    for await (const chunk of response.body) {
      buffered += decoder.decode(chunk as Uint8Array, { stream: true });
      let newline = buffered.indexOf('\n');
      while (newline >= 0) {
        handleLine(buffered.slice(0, newline));
        buffered = buffered.slice(newline + 1);
        newline = buffered.indexOf('\n');
      }
    }
    buffered += decoder.decode();
    if (buffered.length > 0) handleLine(buffered);
    handleLine('');
    if (!done && completion.finishReason === null) {
      throw new PolicyRequestError('protocol', `The stream from ${this.#endpoint} ended before the answer was finished`);
    }
    completion.content = sawContent ? content : null;
    if (reasoning.length > 0) completion.reasoning = reasoning;
    completion.toolCalls = toolCalls.filter((call) => call !== undefined).map((call, index) => ({
      id: call.id ?? `call_${index}`, type: 'function', function: { name: call.name, arguments: call.arguments },
    }));
    return completeTokenIds(completion);
  }
}
