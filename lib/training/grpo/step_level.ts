/**
 * THOR's step level for GRPO: alternatives sampled at failed tool calls, each a sequence
 * of its own that shares the episode's prefix, in one advantage group with the failed
 * action, trained with a weighted loss of their own (see `StepLevelOptions`).
 */
import { Role } from '../../kernels/index.js';
import type { TokenBatch } from '../../trajectory/index.js';
import { rangeError } from '../../check.js';
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

/** An attempt as `SelfCorrectingAgent` records it in `metadata.attempts` (the fields read here). */
interface RecordedAttempt {
  step: number;
  action: { tokenIds?: number[]; logprobs?: number[] };
  response?: { status: string };
}

/**
 * THOR's step level from an agent's own attempts: the attempts at one step of an episode
 * (`metadata.attempts` of `SelfCorrectingAgent`, each regenerated from the context the
 * trajectory holds before that step) form one group; an attempt whose execution succeeded,
 * or that ran nothing, scores 1, a failed one 0. Each becomes the trajectory's prefix (role
 * prompt) followed by the attempt's sampled ids, so only the attempt is trained on. Steps
 * with a single attempt teach nothing group-relative and are left out. The trainer computes
 * their advantages with its estimator, one group per step.
 * @throws RangeError when an attempt lacks its token ids or log-probs.
 */
export function attemptSequences(batch: TokenBatch): { sequences: TrainingSequence[]; metrics: NonNullable<GRPOStepMetrics['stepLevel']> } {
  const sequences: TrainingSequence[] = [];
  let failures = 0;
  let retried = 0;
  let retriedSucceeded = 0;
  batch.trajectories.forEach((trajectory, i) => {
    const attempts = trajectory.metadata?.attempts as RecordedAttempt[] | undefined;
    if (!Array.isArray(attempts)) return;
    const byStep = new Map<number, RecordedAttempt[]>();
    for (const attempt of attempts) byStep.set(attempt.step, [...(byStep.get(attempt.step) ?? []), attempt]);
    for (const [step, group] of byStep) {
      if (group.length < 2 || step >= batch.turnOffsets[i + 1]! - batch.turnOffsets[i]!) continue;
      failures++;
      const start = batch.seqOffsets[i]!;
      const prefixEnd = batch.turnStarts[batch.turnOffsets[i]! + step]!;
      const prefix = batch.tokens.subarray(start, prefixEnd);
      group.forEach((attempt, k) => {
        const { tokenIds, logprobs } = attempt.action;
        if (!Array.isArray(tokenIds) || !Array.isArray(logprobs) || logprobs.length !== tokenIds.length) {
          throw rangeError(`trajectory '${trajectory.id}' metadata.attempts (step ${step}, attempt ${k})`, 'token ids and their log-probs (a token-in/token-out policy records them)', attempt.action);
        }
        const tokens = new Int32Array(prefix.length + tokenIds.length);
        tokens.set(prefix);
        tokens.set(tokenIds, prefix.length);
        const roles = new Uint8Array(tokens.length).fill(Role.prompt);
        roles.fill(Role.action, prefix.length);
        const behaviourLogp = new Float32Array(tokens.length);
        behaviourLogp.set(logprobs, prefix.length);
        const reward = attempt.response === undefined || attempt.response.status === 'success' ? 1 : 0;
        sequences.push({ tokens, roles, behaviourLogp, reward, group: failures - 1, kind: 'step', keep: true });
        if (k > 0) {
          retried++;
          retriedSucceeded += reward;
        }
      });
    }
  });
  return { sequences, metrics: { failures, samples: retried, successRate: retried ? retriedSucceeded / retried : 0 } };
}
