export * from './feedback_mask.js';
export * from './token_logprobs.js';
