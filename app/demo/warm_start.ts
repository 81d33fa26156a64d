/**
 * Supervised fine-tuning on the refined TIRGen traces with tirl's `SFTTrainer`: the
 * log-likelihood of the action tokens only (prompt and tool feedback are masked out by the
 * feedbackMask kernel), batches drawn with the demo's generator.
 */
import { SFTTrainer, type Policy, type SeededRandom } from '../../lib/index.js';
import type { Trace } from './tirgen.js';

export interface WarmStartOptions {
  steps: number;
  batchSize: number;
  rng: SeededRandom;
  onStep?: (step: number, loss: number) => void;
}

/** Trains `policy` on `traces`; returns the mean action-token loss (nats) of each step. */
export async function warmStart(policy: Policy, traces: readonly Trace[], options: WarmStartOptions): Promise<number[]> {
  const trainer = new SFTTrainer({ policy, maxGradNorm: 5, onStep: (m) => options.onStep?.(m.step, m.loss) });
  const losses: number[] = [];
  for (let step = 0; step < options.steps; step++) {
    const batch = Array.from({ length: options.batchSize }, () => traces[options.rng.between(0, traces.length - 1)]!);
    losses.push((await trainer.step(batch)).loss);
  }
  return losses;
}
