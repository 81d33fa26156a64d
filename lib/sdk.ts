/**
 * The trajectory SDK: episodes, tokenizers and packing; filters; rewards; credit
 * assignment; preference pairs. Re-exported from the package root.
 */
export * from './trajectory/index.js';
export * from './filters/index.js';
export * from './rewards/index.js';
export * from './credit/index.js';
export * from './preferences/index.js';
