export * from './broadcast.js';
export * from './advantages.js';
export * from './turns.js';
