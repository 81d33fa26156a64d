/** GRPO: the trainer, its options and its metrics. */
export { type EpisodeFilter } from './filters.js';
export { type FilterCount, type GRPOStepMetrics, type RolloutCorrectionMetrics } from './metrics.js';
export {
  type AgentRolloutRequest,
  type AgentRollouts,
  type DynamicSamplingOptions,
  type GRPOTrainerOptions,
  type RolloutCorrectionSettings,
  type StepLevelOptions,
} from './options.js';
export { GRPOTrainer } from './trainer.js';
