/**
 * Supervised fine-tuning on the refined TIRGen traces: maximise the log-likelihood of the
 * action tokens only (prompt and tool feedback are masked out by the feedbackMask
 * kernel). The per-sequence sums and their gradient come from the sequenceLogprobs
 * kernels; the log-probs and their gradient from tokenLogprobs through the policy.
 */
import { feedbackMask, packSequences, sequenceLogprobs, sequenceLogprobsBackward, type Policy, type SeededRandom } from '../../lib/index.js';
import type { Trace } from './tirgen.js';

export interface WarmStartOptions {
  steps: number;
  batchSize: number;
  rng: SeededRandom;
  onStep?: (step: number, loss: number) => void;
}

/** Trains `policy` on `traces`; returns the mean action-token loss (nats) of each step. */
export async function warmStart(policy: Pick<Policy, 'accumulateGradients' | 'applyGradients'>, traces: readonly Trace[], options: WarmStartOptions): Promise<number[]> {
  const losses: number[] = [];
  for (let step = 0; step < options.steps; step++) {
    const batchTraces = Array.from({ length: options.batchSize }, () => traces[options.rng.between(0, traces.length - 1)]);
    const batch = packSequences(batchTraces.map((t) => Int32Array.from(t.tokens)));
    const roles = Uint8Array.from(batchTraces.flatMap((t) => t.roles));
    const { mask, actionTokens } = feedbackMask({ roles, seqOffsets: batch.seqOffsets });
    const count = actionTokens.reduce((a, b) => a + b, 0);
    let loss = 0;
    await policy.accumulateGradients(batch, ({ logp }) => {
      const perSequence = sequenceLogprobs({ logp, mask, seqOffsets: batch.seqOffsets });
      loss = -perSequence.reduce((a, b) => a + b, 0) / count;
      const gradSeq = new Float32Array(perSequence.length).fill(-1 / count);
      return { gradLogp: sequenceLogprobsBackward({ gradSeq, mask, seqOffsets: batch.seqOffsets }) };
    });
    await policy.applyGradients({ maxGradNorm: 5 });
    losses.push(loss);
    options.onStep?.(step + 1, loss);
  }
  return losses;
}
