/**
 * THOR's step level for GRPO: alternatives sampled at failed tool calls, each a sequence
 * of its own that shares the episode's prefix, in one advantage group with the failed
 * action, trained with a weighted loss of their own (see `StepLevelOptions`).
 */
import { Role } from '../../kernels/index.js';
import { mean } from '../batching.js';
import type { Environment } from '../environment.js';
import type { SeededRandom } from '../random.js';
import { type Episode, replayStep } from '../rollout.js';
import type { Policy } from '../trainable_policy.js';
import type { GRPOStepMetrics } from './metrics.js';
import type { StepLevelOptions } from './options.js';
import type { TrainingSequence } from './update_batch.js';

/** What the step level needs of its trainer. */
export interface StepLevelContext<Problem> {
  policy: Policy;
  createEnvironment: () => Environment<Problem>;
  maxTurnTokens: number;
  random: SeededRandom;
}

/**
 * THOR: at each episode's earliest failed tool calls, samples continuations from the
 * failure point, runs them (replaying the episode's earlier actions), rewards them 1 when
 * their tool call succeeds, and compares them with the failed action as one group. Their
 * shared prefix becomes prompt, so only the continuations are trained on. The trainer
 * computes their advantages with its estimator once the batch is scored.
 */
export async function stepLevelSequences<Problem>(
  episodes: readonly Episode<Problem>[],
  stepLevel: Required<StepLevelOptions>,
  context: StepLevelContext<Problem>,
): Promise<{ sequences: TrainingSequence[]; metrics: NonNullable<GRPOStepMetrics['stepLevel']> }> {
  const samples = stepLevel.samples;
  const failures = episodes.flatMap((episode) =>
    episode.turns
      .map((turn, index) => ({ episode, turn, index }))
      .filter(({ turn }) => turn.tool !== undefined && turn.tool.status !== 'success')
      .slice(0, stepLevel.maxFailuresPerEpisode),
  );
  const contexts = failures.flatMap(({ episode, turn }) =>
    Array<Int32Array>(samples).fill(episode.tokens.subarray(0, turn.actionStart)),
  );
  const continuations = contexts.length
    ? await context.policy.sampleTurns(contexts, {
        maxTokens: context.maxTurnTokens,
        random: () => context.random.next(),
      })
    : [];
  const replayer = context.createEnvironment();
  const rewards: number[] = [];
  const sequences: TrainingSequence[] = [];
  try {
    for (const [f, { episode, turn, index }] of failures.entries()) {
      const earlier = episode.turns.slice(0, index).map((t) => t.action);
      const prefixLength = turn.actionStart;
      const alternatives = [
        {
          tokens: episode.tokens.subarray(prefixLength, turn.actionEnd),
          logprobs: episode.behaviourLogp.subarray(prefixLength, turn.actionEnd),
          reward: 0,
        },
      ];
      for (const continuation of continuations.slice(f * samples, (f + 1) * samples)) {
        const result = await replayStep(replayer, episode.problem, earlier, continuation.text);
        alternatives.push({
          tokens: continuation.tokens,
          logprobs: continuation.logprobs,
          reward: result.tool?.status === 'success' ? 1 : 0,
        });
      }
      for (const alternative of alternatives) {
        const length = prefixLength + alternative.tokens.length;
        const tokens = new Int32Array(length);
        tokens.set(episode.tokens.subarray(0, prefixLength));
        tokens.set(alternative.tokens, prefixLength);
        const roles = new Uint8Array(length).fill(Role.prompt);
        roles.fill(Role.action, prefixLength);
        const behaviourLogp = new Float32Array(length);
        behaviourLogp.set(alternative.logprobs, prefixLength);
        sequences.push({ tokens, roles, behaviourLogp, reward: alternative.reward, group: f, kind: 'step', keep: true });
        rewards.push(alternative.reward);
      }
    }
  } finally {
    await replayer.close?.();
  }
  const resampledRewards = rewards.filter((_, i) => i % (samples + 1) !== 0);
  return {
    sequences,
    metrics: { failures: failures.length, samples: resampledRewards.length, successRate: mean(resampledRewards) },
  };
}
