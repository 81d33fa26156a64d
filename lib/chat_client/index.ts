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
