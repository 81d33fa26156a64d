export * from './feedback_mask.js';
