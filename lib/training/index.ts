/**
 * Training loops and the interfaces they drive. No tfjs here: its adapter and
 * `TfjsPolicy` live in `tirl/tfjs`.
 */
export { DPOTrainer, type DPOStepMetrics, type DPOTrainerOptions, type PairSource, type TokenPreferencePair } from './dpo.js';
export type { Environment, StepResult } from './environment.js';
export {
  type AgentRolloutRequest,
  type AgentRollouts,
  type DynamicSamplingOptions,
  type EpisodeFilter,
  type FilterCount,
  GRPOTrainer,
  type GRPOStepMetrics,
  type GRPOTrainerOptions,
  type StepLevelOptions,
} from './grpo/index.js';
export type {
  ObservationRole,
  Policy,
  PolicyBatch,
  PolicyLogprobs,
  PolicyOutputGradient,
  SampledTurn,
  SampleOptions,
} from './trainable_policy.js';
export type { AdvantageParameters, TrainerAdvantageEstimator } from './losses.js';
export { SeededRandom } from './random.js';
export { type SFTAggregation, type SFTExample, type SFTStepMetrics, SFTTrainer, type SFTTrainerOptions } from './sft.js';
export { type Episode, type EpisodeTurn, packSequences, rollout, type RolloutLimits, toTokenBatch } from './rollout.js';
export { EnginePolicy, type EnginePolicyOptions } from './engine_policy.js';
