/**
 * tirl: fast, exact kernels and a TypeScript SDK for reinforcement learning of
 * tool-using language-model agents.
 */
export * from './info.js';
export * from './kernels/index.js';
export * as cuda from './cuda.js';
export type { DeviceArray, DeviceDtype, OnDevice } from './cuda.js';
export * from './tools/index.js';
export * from './chat_client/index.js';
export * from './sdk.js';
export * from './agents/index.js';
export * from './training/index.js';
export * from './gguf/gguf.js';
