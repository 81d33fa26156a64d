export * from './feedback_mask.js';
export * from './ppo_loss.js';
