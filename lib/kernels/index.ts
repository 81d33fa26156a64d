export * from './feedback_mask.js';
export * from './group_advantages.js';
export * from './dpo_loss.js';
export * from './sequence_logprobs.js';
export * from './ppo_loss.js';
export * from './token_logprobs.js';
export * from './rollout_correction.js';
export * from './advantages.js';
export type { PreparedCall } from './prepared.js';
