export type {
  ChatCompletion,
  ChatDelta,
  ChatMessage,
  ChatPolicy,
  ChatRequest,
  TokenCandidate,
  TokenLogprob,
  ToolCall,
  ToolChoice,
} from './types.js';
export { OpenAIChatClient, PolicyRequestError, type OpenAIChatClientOptions, type PolicyErrorKind } from './openai.js';
export { EndpointPool, type EndpointPoolOptions, type EndpointStats, type PoolResponse, type PoolStats } from './pool.js';
export {
  parseSglangGeneration, parseVllmCompletion, TokenCompletionClient, type TokenApi, type TokenCompletion,
  type TokenCompletionClientOptions, type TokenPolicy, type TokenSample, type TokenSamplingRequest,
} from './tokens.js';
export { LlamaCppEngine, loadNodeLlamaCpp, type LlamaCppEngineOptions } from './llama_cpp.js';
