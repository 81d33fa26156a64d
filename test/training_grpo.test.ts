/**
 * GRPOTrainer inside its loop: micro-batching equals one big batch, masks and filters reach
 * the gradient, THOR's step-level loss masks the shared prefix, the KL reference, metrics,
 * and the scripted example learning.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { Role } from '../lib/index.js';
import { isVoidTurn } from '../lib/sdk.js';
import {
  type Episode,
  GRPOTrainer,
  type GRPOTrainerOptions,
  type Policy,
  type PolicyBatch,
  type PolicyOutputGradient,
} from '../lib/training/index.js';
import { type Product, ProductEnvironment, products, VOCAB_SIZE } from '../examples/training/arithmetic.js';
import { assertClose } from './support.js';
import { bigram, RecordingPolicy, table } from './training_support.js';

function trainerOptions(policy: Policy, extra: Partial<GRPOTrainerOptions<Product>> = {}): GRPOTrainerOptions<Product> {
  return {
    policy,
    createEnvironment: () => new ProductEnvironment(),
    problems: products(64, 3),
    promptsPerStep: 3,
    groupSize: 6,
    maxTurns: 4,
    maxTurnTokens: 1,
    seed: 42,
    maxGradNorm: Infinity,
    ...extra,
  };
}

describe('GRPOTrainer', () => {
  before(async () => {
    await tf.setBackend('cpu');
  });

  it('gives the same update with micro-batches and accumulation as with one big batch', async () => {
    for (const aggregation of ['token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'] as const) {
      const updated: Float32Array[] = [];
      const initial = table(bigram());
      for (const microBatchSize of [undefined, 1, 4]) {
        const policy = bigram();
        const trainer = new GRPOTrainer(
          trainerOptions(policy, { aggregation, stepLevel: { samples: 2 }, ...(microBatchSize ? { microBatchSize } : {}) }),
        );
        const [metrics] = await trainer.train(1);
        assert.ok(metrics.trainedTokens > 0 && metrics.gradNorm > 0, `${aggregation}: nothing trained`);
        updated.push(table(policy));
        policy.dispose();
      }
      const change = updated[0].map((v, i) => v - initial[i]);
      assert.ok(change.some((v) => Math.abs(v) > 1e-3), `${aggregation}: the step changed nothing`);
      assertClose(updated[1], updated[0], { rtol: 1e-5, atol: 1e-6, label: `${aggregation}, micro-batch 1` });
      assertClose(updated[2], updated[0], { rtol: 1e-5, atol: 1e-6, label: `${aggregation}, micro-batch 4` });
    }
  });

  it('trains only on action tokens of episodes the filters keep', async () => {
    const policy = new RecordingPolicy(bigram());
    let seen: { episodes: readonly Episode<Product>[]; keep: Uint8Array } | undefined;
    const trainer = new GRPOTrainer(
      trainerOptions(policy, { onEpisodes: (episodes, keep) => void (seen = { episodes, keep }) }),
    );
    const [metrics] = await trainer.train(1);
    assert.ok(seen);
    const { episodes, keep } = seen;
    const voided = episodes.map((e) => e.turns.some((t) => isVoidTurn(t.action)));
    assert.ok(voided.some((v) => v) && voided.some((v) => !v), 'the batch should mix void and clean episodes');
    assert.deepEqual([...keep], voided.map((v) => (v ? 0 : 1)));
    assert.deepEqual(metrics.filtered.voidTurn, {
      trajectories: voided.filter((v) => v).length,
      tokens: episodes.reduce((sum, e, i) => sum + (voided[i] ? e.roles.filter((r) => r === Role.action).length : 0), 0),
    });
    assert.equal(metrics.keptTrajectories, voided.filter((v) => !v).length);

    // One micro-batch holds the whole batch, episodes in order.
    assert.equal(policy.gradients.length, 1);
    const { batch, gradient } = policy.gradients[0];
    let trainedNonZero = 0;
    episodes.forEach((episode, i) => {
      const start = batch.seqOffsets[i];
      assert.deepEqual(batch.tokens.subarray(start, batch.seqOffsets[i + 1]), episode.tokens);
      for (let t = 0; t < episode.tokens.length; t++) {
        const g = gradient.gradLogp[start + t];
        if (episode.roles[t] !== Role.action || keep[i] === 0) assert.equal(g, 0, `episode ${i} token ${t} (role ${episode.roles[t]})`);
        else if (g !== 0) trainedNonZero += 1;
      }
    });
    assert.ok(trainedNonZero > 0, 'kept action tokens get gradient');
    assert.equal(metrics.trainedTokens, episodes.reduce((s, e, i) => s + (keep[i] ? e.roles.filter((r) => r === Role.action).length : 0), 0));
  });

  it('counts void episodes without removing them when the filter is off', async () => {
    const trainer = new GRPOTrainer(trainerOptions(bigram(), { filters: [] }));
    const [metrics] = await trainer.train(1);
    assert.deepEqual(metrics.filtered, {});
    assert.equal(metrics.keptTrajectories, metrics.episodes);
  });

  it('THOR step level: masks the shared prefix and weights the continuation loss by its coefficient', async () => {
    const recorded: { episodes: number; gradient: PolicyOutputGradient; batch: PolicyBatch }[] = [];
    let stepMetrics: { failures: number; samples: number; successRate: number } | undefined;
    for (const coef of [0.5, 1]) {
      const policy = new RecordingPolicy(bigram());
      let episodes = 0;
      const trainer = new GRPOTrainer(
        trainerOptions(policy, { stepLevel: { samples: 3, coef }, onEpisodes: (e) => void (episodes = e.length) }),
      );
      const [metrics] = await trainer.train(1);
      stepMetrics = metrics.stepLevel;
      recorded.push({ episodes, ...policy.gradients[0] });
    }
    assert.ok(stepMetrics && stepMetrics.failures > 0, 'the batch should hold failed tool calls');
    assert.equal(stepMetrics.samples, stepMetrics.failures * 3);
    const [half, full] = recorded;
    const sequences = half.batch.seqOffsets.length - 1;
    assert.equal(sequences, half.episodes + stepMetrics.failures * 4, 'one failed action + 3 continuations per failure');
    let continuationGradients = 0;
    for (let s = half.episodes; s < sequences; s++) {
      const start = half.batch.seqOffsets[s];
      const end = half.batch.seqOffsets[s + 1];
      // Turns are one token: the prefix is everything but the last token.
      for (let t = start; t < end - 1; t++) assert.equal(half.gradient.gradLogp[t], 0, `prefix token ${t - start} of step sequence ${s}`);
      assertClose(full.gradient.gradLogp[end - 1], 2 * half.gradient.gradLogp[end - 1], { rtol: 1e-5, atol: 1e-8, label: 'coef' });
      if (half.gradient.gradLogp[end - 1] !== 0) continuationGradients += 1;
    }
    assert.ok(continuationGradients > 0, 'continuations with a signal get gradient');
    // Episode tokens are unaffected by the coefficient.
    const episodeEnd = half.batch.seqOffsets[half.episodes];
    assertClose(full.gradient.gradLogp.subarray(0, episodeEnd), half.gradient.gradLogp.subarray(0, episodeEnd), { label: 'episodes' });
  });

  it('adds a KL to a frozen reference that is zero until the policy moves', async () => {
    const policy = bigram('adam');
    const trainer = new GRPOTrainer(trainerOptions(policy, { klCoef: 0.1, maxGradNorm: 1 }));
    const metrics = await trainer.train(3);
    assert.equal(metrics[0].klLoss, 0);
    assert.ok(metrics[2].klLoss > 0, `klLoss ${metrics[2].klLoss}`);
    await trainer.close();
  });

  it('writes every step to the JSONL log and the callback, with the documented fields', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tirl-grpo-'));
    try {
      const seen: number[] = [];
      const trainer = new GRPOTrainer(
        trainerOptions(bigram('adam'), { logFile: join(dir, 'log', 'metrics.jsonl'), onStep: (m) => void seen.push(m.step), ppoEpochs: 2, miniBatches: 2 }),
      );
      await trainer.train(2);
      const lines = (await readFile(join(dir, 'log', 'metrics.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
      assert.deepEqual(seen, [1, 2]);
      assert.deepEqual(lines.map((l) => l.step), [1, 2]);
      for (const key of ['reward', 'successRate', 'filtered', 'clipFraction', 'clipFractionLower', 'approxKl', 'entropy', 'gradNorm', 'tokensPerSecond']) {
        assert.ok(key in lines[1], `missing ${key}`);
      }
      assert.ok(lines[1].entropy > 0 && lines[1].entropy <= Math.log(VOCAB_SIZE) + 1e-6, `entropy ${lines[1].entropy}`);
      assert.ok(lines[1].clipFraction >= 0 && lines[1].clipFraction <= 1);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the scripted example learns to call the tool, then answer', async () => {
    const trainer = new GRPOTrainer(
      trainerOptions(bigram('adam'), { promptsPerStep: 4, groupSize: 8, stepLevel: { samples: 2 }, maxGradNorm: 1, seed: 1 }),
    );
    const metrics = await trainer.train(25);
    const early = metrics.slice(0, 3).reduce((s, m) => s + m.successRate, 0) / 3;
    const late = metrics.slice(-3).reduce((s, m) => s + m.successRate, 0) / 3;
    assert.ok(early < 0.35, `early success ${early}`);
    assert.ok(late > 0.7, `late success ${late}`);
  });
});
