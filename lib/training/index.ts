/**
 * Training loops and the interfaces they drive. No tfjs here: its adapter and
 * `TfjsPolicy` live in `tirl/tfjs`.
 */
export * from './checkpoint.js';
export * from './dpo.js';
export * from './environment.js';
export * from './grpo.js';
export * from './policy.js';
export * from './random.js';
export * from './rollout.js';
