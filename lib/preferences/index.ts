export * from './pairs.js';
export * from './dpo.js';
