export * from './model.js';
export * from './chat.js';
export * from './jsonl.js';
export * from './tokenizer.js';
export * from './template.js';
export * from './batch.js';
