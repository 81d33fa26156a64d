/** GRPO: the trainer, its options and its metrics. */
export { type EpisodeFilter } from './filters.js';
export { type FilterCount, type GRPOStepMetrics } from './metrics.js';
export { type GRPOTrainerOptions, type StepLevelOptions } from './options.js';
export { GRPOTrainer } from './trainer.js';
