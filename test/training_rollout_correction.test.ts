/**
 * GRPO with rollout correction: the rollout engine's log-probs (the sampler's) against the
 * trainer's recomputed ones. Same weights: no mismatch. A known mismatch injected into the
 * sampler's log-probs: the measured KL, weights, effective sample size and gradient are the
 * ones the formulas give (token-level truncated importance sampling, verl's
 * rollout_corr_helper conventions, as the rolloutCorrection kernel documents them).
 */
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { Role } from '../lib/kernels/index.js';
import { GRPOTrainer, type Episode, type GRPOTrainerOptions, type Policy } from '../lib/training/index.js';
import { type Product, ProductEnvironment, products } from '../examples/training/arithmetic.js';
import { bigram, RecordingPolicy } from './training_support.js';

/** The engine's error on the k-th sampled token's log-prob: every fourth past the weight threshold. */
const shiftOf = (k: number) => (k % 4 === 0 ? -1 : 0.1 * ((k % 5) - 2));

/** A sampler whose reported log-probs are off by `shiftOf(k)`: a rollout engine with other numerics. */
class ShiftedSampler extends RecordingPolicy {
  #sampled = 0;
  override async sampleTurns(...args: Parameters<Policy['sampleTurns']>) {
    const turns = await this.inner.sampleTurns(...args);
    return turns.map((turn) => ({ ...turn, logprobs: Float32Array.from(turn.logprobs, (value) => value + shiftOf(this.#sampled++)) }));
  }
}

function options(policy: Policy, extra: Partial<GRPOTrainerOptions<Product>> = {}): GRPOTrainerOptions<Product> {
  return {
    policy, createEnvironment: () => new ProductEnvironment(), problems: products(64, 3),
    promptsPerStep: 3, groupSize: 6, maxTurns: 4, maxTurnTokens: 1, seed: 42, maxGradNorm: Infinity, filters: [], ...extra,
  };
}

describe('GRPO rollout correction', () => {
  before(async () => {
    await tf.setBackend('cpu');
  });

  it('measures no mismatch when the same weights sample and score', async () => {
    const [metrics] = await new GRPOTrainer(options(bigram())).train(1);
    const correction = metrics!.rolloutCorrection!;
    assert.equal(correction.applied, false);
    assert.equal(correction.tokens, metrics!.trainedTokens);
    assert.ok(Math.abs(correction.kl) < 1e-6, `kl ${correction.kl}`);
    assert.ok(correction.logPplAbsDiff < 1e-6, `log-ppl diff ${correction.logPplAbsDiff}`);
    assert.equal(correction.nonFinite, 0);
  });

  it('an injected mismatch gives the weights, KL and ESS of the formulas, and the weights scale the gradient', async () => {
    // What the trainer will recompute: the sampler's true log-probs of the episodes, read before the update.
    let expected: { rollout: number[]; trainer: number[]; actionAt: number[] } | undefined;
    const run = async (correct: boolean) => {
      const policy = new ShiftedSampler(bigram());
      const trainer = new GRPOTrainer(options(policy, {
        ...(correct ? { rolloutCorrection: { rolloutIs: 'token', rolloutIsThreshold: 2 } } : {}),
        onEpisodes: async (episodes: readonly Episode<Product>[]) => {
          const rollout: number[] = [];
          const trainer: number[] = [];
          const actionAt: number[] = []; // per batch position: the action token's index, or -1
          for (const e of episodes) {
            const { logp } = await policy.inner.logprobs({ tokens: e.tokens, seqOffsets: Int32Array.of(0, e.tokens.length) });
            e.roles.forEach((role, t) => {
              actionAt.push(role === Role.action ? rollout.length : -1);
              if (role !== Role.action) return;
              rollout.push(e.behaviourLogp[t]!);
              trainer.push(logp[t]!);
            });
          }
          expected = { rollout, trainer, actionAt };
        },
      }));
      const [metrics] = await trainer.train(1);
      return { metrics: metrics!, gradient: policy.gradients[0]!.gradient.gradLogp, batch: policy.gradients[0]!.batch };
    };
    const plain = await run(false);
    const corrected = await run(true);
    const { rollout, trainer, actionAt } = expected!;
    // Float64 references from the definitions: d = logp - rolloutLogp, w = min(e^d, threshold).
    const d = trainer.map((value, t) => value - rollout[t]!);
    const weights = d.map((value) => Math.min(Math.exp(value), 2));
    const meanOf = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    const kl = meanOf(d.map((value) => -value));
    const meanWeight = meanOf(weights);
    const ess = 1 / meanOf(weights.map((w) => (w / (meanWeight + 1e-8)) ** 2));
    const c = corrected.metrics.rolloutCorrection!;
    assert.equal(c.applied, true);
    assert.equal(c.tokens, d.length);
    assert.ok(Math.abs(c.kl - kl) < 1e-5, `kl ${c.kl} vs ${kl}`);
    assert.ok(Math.abs(plain.metrics.rolloutCorrection!.kl - kl) < 1e-5, 'measured without the correction too');
    assert.ok(Math.abs(c.meanWeight! - meanWeight) < 1e-5, `mean weight ${c.meanWeight} vs ${meanWeight}`);
    assert.equal(c.maxWeight, 2);
    assert.ok(weights.some((w) => w === 2) && weights.some((w) => w < 1), 'the shifts should truncate some weights and shrink others');
    assert.ok(Math.abs(c.effectiveSampleSize! - ess) < 1e-5, `ess ${c.effectiveSampleSize} vs ${ess}`);
    assert.equal(c.rejectedFraction, 0);
    // Same rollouts, same ratio 1 at the first update: each action token's gradient is scaled by its weight.
    assert.deepEqual(corrected.batch.tokens, plain.batch.tokens);
    assert.equal(plain.gradient.length, actionAt.length);
    let scaled = 0;
    for (let t = 0; t < actionAt.length; t++) {
      const w = actionAt[t]! < 0 ? 0 : weights[actionAt[t]!]!;
      const want = w * plain.gradient[t]!;
      assert.ok(Math.abs(corrected.gradient[t]! - want) <= 1e-6 * Math.max(1, Math.abs(want)), `token ${t}: ${corrected.gradient[t]} vs ${w} × ${plain.gradient[t]}`);
      if (w !== 1 && plain.gradient[t] !== 0) scaled++;
    }
    assert.ok(scaled > 0, 'some gradient should be scaled');
  });

  it('rejects what the criteria reject, and refuses the behaviour log-probs as old log-probs', async () => {
    const policy = new ShiftedSampler(bigram());
    const [metrics] = await new GRPOTrainer(options(policy, { rolloutCorrection: { rolloutIs: 'token', rolloutRs: 'token_k2', rolloutRsThreshold: 0.1 } })).train(1);
    const c = metrics!.rolloutCorrection!;
    // k2 = d²/2 > 0.1 only for the tokens shifted by -1 (d = 1): the others have |d| <= 0.2.
    assert.ok(c.rejectedFraction! > 0 && c.rejectedFraction! < 1, `rejected ${c.rejectedFraction}`);
    assert.equal(metrics!.trainedTokens, Math.round(c.tokens * (1 - c.rejectedFraction!)));
    assert.throws(
      () => new GRPOTrainer(options(bigram(), { oldLogprobs: 'behaviour', rolloutCorrection: { rolloutIs: 'token' } })),
      { name: 'RangeError', message: /options\.oldLogprobs/ },
    );
  });
});
