export { isVoidTurn, type VoidTurnOptions } from './void-turn.js';
export * from './filters.js';
export * from './staleness.js';
