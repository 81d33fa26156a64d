/**
 * A GRPO checkpoint: the policy's state, the reference's when the trainer made it, and the
 * trainer's own (`trainer.json`: step, generator state, metrics), written inside one of the
 * crash-safe checkpoint folders of `../checkpoint.ts`.
 */
import { readTrainerState, savePolicy, writeTrainerState } from '../checkpoint.js';
import type { Policy } from '../trainable_policy.js';
import type { GRPOStepMetrics } from './metrics.js';

const CHECKPOINT_FORMAT = 'tirl-grpo-checkpoint';

/** The trainer's own state in a checkpoint. */
export interface GRPOTrainerState {
  step: number;
  randomState: number;
  metrics: GRPOStepMetrics[];
}

/** Writes a GRPO checkpoint into `dir`; the reference only when given. */
export async function writeGRPOCheckpoint(
  dir: string,
  parts: { policy: Policy; reference: Policy | undefined; state: GRPOTrainerState },
): Promise<void> {
  await savePolicy(dir, 'policy', parts.policy);
  if (parts.reference) await savePolicy(dir, 'reference', parts.reference);
  await writeTrainerState(dir, { format: CHECKPOINT_FORMAT, ...parts.state });
}

/** The trainer's state of the GRPO checkpoint `dir`; throws for a checkpoint of another kind. */
export function readGRPOCheckpoint(dir: string): Promise<GRPOTrainerState> {
  return readTrainerState<GRPOTrainerState>(dir, CHECKPOINT_FORMAT, 'GRPOTrainer', 'GRPO');
}
