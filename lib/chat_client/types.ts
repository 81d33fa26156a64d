import type { OpenAIToolSpec } from '../tools/registry.js';

/*
 * The chat interface every policy implements (the OpenAI-compatible client, a scripted or
 * local policy), in the OpenAI chat-completions wire format.
 */

/** A tool call in the OpenAI wire format; `arguments` is JSON text written by the model. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A chat message in the OpenAI wire format. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  name?: string;
  /** Tool calls made by an assistant message. */
  tool_calls?: ToolCall[];
  /** For a 'tool' message: the id of the call it answers. */
  tool_call_id?: string;
}

/** How the model may use tools: the OpenAI `tool_choice` values. */
export type ToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };

/** One sampling request. Unset fields are left to the server's defaults. */
export interface ChatRequest {
  messages: ChatMessage[];
  /** Tools the model may call, e.g. `registry.toOpenAITools()`. */
  tools?: OpenAIToolSpec[];
  toolChoice?: ToolChoice;
  temperature?: number;
  topP?: number;
  /** Most tokens to generate (`max_tokens`). */
  maxTokens?: number;
  stop?: string | string[];
  seed?: number;
  /** Ask for the log-probability of every generated token (`logprobs: true`). */
  logprobs?: boolean;
  /** Also the top-k alternatives per token, 0–20 (`top_logprobs`); implies `logprobs`. */
  topLogprobs?: number;
  /** Ask a vLLM server for token ids: `return_tokens_as_token_ids` (log-prob tokens come as
   * "token_id:N") and `return_token_ids` (ids of the prompt and the completion). */
  returnTokenIds?: boolean;
  /** Stream the answer over server-sent events; the result is the same, assembled. */
  stream?: boolean;
  /** Called with each piece of a streamed answer as it arrives. */
  onDelta?: (delta: ChatDelta) => void;
  /** More fields for the request body, sent as given (server-specific sampling options). */
  extraBody?: Record<string, unknown>;
  /** Cancels the request. */
  signal?: AbortSignal;
  /** Overrides the client's `timeoutMs` for this request. */
  timeoutMs?: number;
}

/** A piece of a streamed answer. */
export interface ChatDelta {
  content?: string;
  reasoning?: string;
  /** Index into the answer's tool calls, with the parts of it that just arrived. */
  toolCall?: { index: number; id?: string; name?: string; arguments?: string };
}

/** A candidate token and its log-probability. */
export interface TokenCandidate {
  /** The token as the server wrote it (vLLM with `returnTokenIds`: "token_id:N"). */
  token: string;
  /** Its id, when the server gave it (vLLM "token_id:N", llama.cpp `id`). */
  tokenId?: number;
  /** Natural-log probability. */
  logprob: number;
}

/** A generated token with its log-probability and the top alternatives asked for. */
export interface TokenLogprob extends TokenCandidate {
  topLogprobs: TokenCandidate[];
}

/** The policy's answer (the first choice). */
export interface ChatCompletion {
  id: string;
  model: string;
  /** Text of the answer; null when the model only called tools. */
  content: string | null;
  /** Reasoning text, for servers that return it apart (`reasoning_content`). */
  reasoning?: string;
  toolCalls: ToolCall[];
  /** 'stop', 'length', 'tool_calls', … as the server said; null if it did not. */
  finishReason: string | null;
  /** Per generated token, when log-probs were asked for and returned. */
  logprobs?: TokenLogprob[];
  /** Ids of the generated tokens, when the server returned them. */
  tokenIds?: number[];
  /** Ids of the prompt tokens, when the server returned them (vLLM `return_token_ids`). */
  promptTokenIds?: number[];
  usage?: { promptTokens: number; completionTokens: number; totalTokens: number };
}

/** Anything that answers chat requests: the OpenAI-compatible client, or a scripted or
 * local policy in tests and examples. */
export interface ChatPolicy {
  chat(request: ChatRequest): Promise<ChatCompletion>;
}
