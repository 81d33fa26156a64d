/**
 * Training loops and the interfaces they drive. No tfjs here: its adapter and
 * `TfjsPolicy` live in `tirl/tfjs`.
 */
export { DPOTrainer, type DPOStepMetrics, type DPOTrainerOptions, type TokenPreferencePair } from './dpo.js';
export type { Environment, StepResult, Tool, ToolStatus } from './environment.js';
export {
  equalRewardGroupFilter,
  type EpisodeFilter,
  type FilterCount,
  GRPOTrainer,
  type GRPOStepMetrics,
  type GRPOTrainerOptions,
  type StepLevelOptions,
  truncatedFilter,
  voidTurnFilter,
} from './grpo.js';
export type {
  ObservationRole,
  Policy,
  PolicyBatch,
  PolicyLogprobs,
  PolicyOutputGradient,
  SampledTurn,
  SampleOptions,
} from './policy.js';
export { SeededRandom } from './random.js';
export { type Episode, type EpisodeTurn, rollout, type RolloutLimits } from './rollout.js';
