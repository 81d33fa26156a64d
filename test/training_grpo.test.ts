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

import { advantages, ppoLoss, Role } from '../lib/kernels/index.js';
import { isVoidTurn, voidTurnFilter } from '../lib/filters/index.js';
import { readTrajectories, type TokenBatch, type Trajectory } from '../lib/trajectory/index.js';
import {
  type Episode,
  type EpisodeFilter,
  GRPOTrainer,
  type GRPOTrainerOptions,
  type Policy,
  type PolicyBatch,
  type PolicyOutputGradient,
  type TrainerAdvantageEstimator,
} from '../lib/training/index.js';
import { TRAINER_ADVANTAGE_ESTIMATORS } from '../lib/training/losses.js';
import { type Product, ProductEnvironment, products, VOCAB_SIZE } from '../examples/training/arithmetic.js';
import { assertClose, checkBadInputs } from './support.js';
import { bigram, RecordingPolicy, table } from './training_support.js';
import { reference as groupAdvantagesReference } from './reference/group_advantages.js';

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

async function readAll(source: AsyncIterable<Trajectory>): Promise<Trajectory[]> {
  const out: Trajectory[] = [];
  for await (const item of source) out.push(item);
  return out;
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
    let seen: { batch: TokenBatch; keep: Uint8Array } | undefined;
    const trainer = new GRPOTrainer(trainerOptions(policy, { onBatch: (batch, keep) => void (seen = { batch, keep }) }));
    const [metrics] = await trainer.train(1);
    assert.ok(seen);
    const { batch, keep } = seen;
    const actionTokens = (i: number) => batch.roles.subarray(batch.seqOffsets[i], batch.seqOffsets[i + 1]).filter((r) => r === Role.action).length;
    const voided = batch.trajectories.map((t) => t.turns.some((turn) => isVoidTurn(turn.action.text)));
    assert.ok(voided.some((v) => v) && voided.some((v) => !v), 'the batch should mix void and clean episodes');
    assert.deepEqual([...keep], voided.map((v) => (v ? 0 : 1)));
    const voidTokens = voided.reduce((sum, v, i) => sum + (v ? actionTokens(i) : 0), 0);
    const voidCount = voided.filter((v) => v).length;
    assert.deepEqual(metrics.filtered['void-turn'], { trajectories: voidCount, removed: voidCount, tokens: voidTokens });
    assert.equal(metrics.keptTrajectories, voided.filter((v) => !v).length);

    // One micro-batch holds the whole batch, episodes first and in order.
    assert.equal(policy.gradients.length, 1);
    const { batch: trained, gradient } = policy.gradients[0];
    let trainedNonZero = 0;
    for (let i = 0; i < batch.size; i++) {
      const start = batch.seqOffsets[i];
      const end = batch.seqOffsets[i + 1];
      assert.deepEqual(trained.tokens.subarray(trained.seqOffsets[i], trained.seqOffsets[i + 1]), batch.tokens.subarray(start, end));
      for (let t = start; t < end; t++) {
        const g = gradient.gradLogp[trained.seqOffsets[i] + t - start];
        if (batch.roles[t] !== Role.action || keep[i] === 0) assert.equal(g, 0, `episode ${i} token ${t - start} (role ${batch.roles[t]})`);
        else if (g !== 0) trainedNonZero += 1;
      }
    }
    assert.ok(trainedNonZero > 0, 'kept action tokens get gradient');
    assert.equal(metrics.trainedTokens, batch.actionTokenCounts.reduce((s, c, i) => s + (keep[i] ? c : 0), 0));
  });

  it('hands the SDK complete trajectories: tool feedback, rewards, groups', async () => {
    let seen: TokenBatch | undefined;
    const trainer = new GRPOTrainer(trainerOptions(bigram(), { onBatch: (batch) => void (seen = batch) }));
    await trainer.train(1);
    assert.ok(seen);
    assert.equal(new Set(seen.trajectories.map((t) => t.id)).size, seen.size);
    assert.equal(seen.groupKeys.length, 3);
    seen.trajectories.forEach((trajectory, i) => {
      assert.equal(trajectory.reward, seen!.rewards[i]);
      assert.equal(trajectory.groupId, seen!.groupKeys[seen!.groupIds[i]]);
      assert.match(trajectory.prompt, /^Compute \d+ \* \d+/);
      for (const [k, turn] of trajectory.turns.entries()) {
        const start = seen!.turnStarts[seen!.turnOffsets[i] + k];
        assert.deepEqual(turn.action.tokenIds, [...seen!.tokens.subarray(start, seen!.turnActionEnds[seen!.turnOffsets[i] + k])]);
        if (turn.action.text.includes('```python')) assert.equal(turn.response?.toolName, 'python');
      }
    });
  });

  it("combines the SDK's filters with filters over the trainer's episodes", async () => {
    let seen: { episodes: readonly Episode<Product>[]; keep: Uint8Array } | undefined;
    const brokenCode: EpisodeFilter = { name: 'brokenCode', removes: (e) => e.turns.some((t) => t.tool?.status === 'error') };
    const trainer = new GRPOTrainer(
      trainerOptions(bigram(), { filters: [voidTurnFilter(), brokenCode], onEpisodes: (episodes, keep) => void (seen = { episodes, keep }) }),
    );
    const [metrics] = await trainer.train(1);
    assert.ok(seen);
    const broken = seen.episodes.map((e) => e.turns.some((t) => t.tool?.status === 'error'));
    const voided = seen.episodes.map((e) => e.turns.some((t) => isVoidTurn(t.action)));
    assert.ok(broken.some((b, i) => b && !voided[i]), 'some episodes only the episode filter removes');
    assert.deepEqual([...seen.keep], broken.map((b, i) => (b || voided[i] ? 0 : 1)));
    assert.equal(metrics.filtered.brokenCode.trajectories, broken.filter(Boolean).length);
    assert.equal(metrics.filtered.brokenCode.removed, broken.filter((b, i) => b && !voided[i]).length);
    assert.equal(metrics.keptTrajectories, seen.keep.reduce((a, k) => a + k, 0));
  });

  it('counts void episodes without removing them when the filter is off', async () => {
    const trainer = new GRPOTrainer(trainerOptions(bigram(), { filters: [] }));
    const [metrics] = await trainer.train(1);
    assert.deepEqual(metrics.filtered, {});
    assert.equal(metrics.keptTrajectories, metrics.episodes);
  });

  it('takes no optimizer step when the filters remove every episode', async () => {
    const policy = bigram('adam');
    let before = table(policy);
    // Step 1 trains (Adam gathers momentum); step 2 filters everything out.
    const everythingAfterStep1 = {
      name: 'everything',
      flag: (batch: TokenBatch): Uint8Array => new Uint8Array(batch.size).fill(trainer.stepCount >= 1 ? 1 : 0),
    };
    const trainer: GRPOTrainer<Product> = new GRPOTrainer(trainerOptions(policy, { filters: [everythingAfterStep1] }));
    const [first] = await trainer.train(1);
    assert.ok(first.gradNorm > 0);
    assert.notDeepEqual(table(policy), before);
    before = table(policy);
    const [second] = await trainer.train(2);
    assert.deepEqual([second.keptTrajectories, second.trainedTokens, second.gradNorm], [0, 0, 0]);
    assert.deepEqual(table(policy), before, 'momentum alone did not move the policy');
  });

  it('THOR step level: masks the shared prefix and weights the continuation loss by its coefficient', async () => {
    const recorded: { episodes: number; gradient: PolicyOutputGradient; batch: PolicyBatch }[] = [];
    let stepMetrics: { failures: number; samples: number; successRate: number } | undefined;
    for (const coef of [0.5, 1]) {
      const policy = new RecordingPolicy(bigram());
      let episodes = 0;
      const trainer = new GRPOTrainer(
        trainerOptions(policy, { stepLevel: { samples: 3, coef }, onBatch: (batch) => void (episodes = batch.size) }),
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

  it('THOR: the episode loss has its own coefficient beside the step level\'s', async () => {
    const runs: { gradient: PolicyOutputGradient; batch: PolicyBatch; episodes: number }[] = [];
    for (const episodeCoef of [1, 0.25]) {
      const policy = new RecordingPolicy(bigram());
      let episodes = 0;
      await new GRPOTrainer(trainerOptions(policy, { stepLevel: { samples: 2, coef: 0.5, episodeCoef }, onBatch: (batch) => void (episodes = batch.size) })).train(1);
      runs.push({ episodes, ...policy.gradients[0]! });
    }
    const [one, quarter] = runs;
    const episodeEnd = one!.batch.seqOffsets[one!.episodes]!;
    assert.ok(one!.gradient.gradLogp.subarray(0, episodeEnd).some((g) => g !== 0));
    assertClose(quarter!.gradient.gradLogp.subarray(0, episodeEnd), one!.gradient.gradLogp.subarray(0, episodeEnd).map((g) => 0.25 * g), { rtol: 1e-6, atol: 1e-9, label: 'episode tokens' });
    assertClose(quarter!.gradient.gradLogp.subarray(episodeEnd), one!.gradient.gradLogp.subarray(episodeEnd), { label: 'step-level tokens' });
  });

  it('DAPO dynamic sampling: groups with equal rewards are replaced by fresh ones until the batch is full (verl filter_groups)', async () => {
    let seen: TokenBatch | undefined;
    const trainer = new GRPOTrainer(trainerOptions(bigram(), { filters: [], dynamicSampling: { maxBatches: 50 }, onBatch: (batch) => void (seen = batch) }));
    const [metrics] = await trainer.train(1);
    const sampling = metrics!.dynamicSampling!;
    assert.ok(sampling.droppedGroups > 0, 'the untrained policy leaves some groups without signal');
    assert.ok(sampling.batches > 1);
    assert.equal(metrics!.episodes, 3 * 6);
    // Every group left has unequal rewards.
    for (let g = 0; g < 3; g++) {
      const rewards = Array.from(seen!.rewards.subarray(g * 6, (g + 1) * 6));
      assert.ok(Math.max(...rewards) > Math.min(...rewards), `group ${g}: ${rewards}`);
    }
    // Without it, the same seed trains on groups that carry no signal.
    let plain: TokenBatch | undefined;
    await new GRPOTrainer(trainerOptions(bigram(), { filters: [], onBatch: (batch) => void (plain = batch) })).train(1);
    const flat = [0, 1, 2].filter((g) => new Set(plain!.rewards.subarray(g * 6, (g + 1) * 6)).size === 1);
    assert.ok(flat.length > 0);
  });

  it('dynamic sampling gives up after maxBatches generation batches, as verl does', async () => {
    const never = { reset: () => 'q', step: () => ({ feedback: '', reward: 0, done: true, success: false }) };
    const trainer = new GRPOTrainer(trainerOptions(bigram(), { createEnvironment: () => never, dynamicSampling: { maxBatches: 3 } }));
    await assert.rejects(trainer.train(1), /dynamic sampling ran 3 generation batches .*kept 0 of 3 groups/);
  });

  it('agent episodes: trained on as they are, with dynamic sampling over the agent\'s groups', async () => {
    // Token ids of the bigram's vocabulary: prompt 0, an action 1 or 5, the tool's answer 6.
    const episode = (groupId: string, reward: number, action: number): Trajectory => ({
      id: `${groupId}-${reward}-${action}`, prompt: 'q', groupId, reward, promptTokenIds: [0],
      turns: [{ action: { text: '', tokenIds: [action, 2], logprobs: [-1.5, -1.25] }, response: { toolName: 'python', status: 'success', text: '6' }, feedbackTokenIds: [6] }],
    });
    const calls: { attempt: number; groups: number }[] = [];
    const batches: Trajectory[][] = [
      [episode('a', 1, 1), episode('a', 1, 5), episode('b', 0, 1), episode('b', 1, 5)],
      [episode('c', 0, 5), episode('c', 1, 1)],
    ];
    const charTokenizer = { name: 'ids', vocabSize: 8, specialTokens: {}, encode: () => [7], decode: () => '', specialTokenId: () => 0 };
    const policy = new RecordingPolicy(bigram());
    let seen: TokenBatch | undefined;
    const trainer = new GRPOTrainer<never>({
      policy, promptsPerStep: 2, groupSize: 2, filters: [], maxGradNorm: Infinity, dynamicSampling: {},
      agent: { tokenizer: charTokenizer, collect: async (request) => (calls.push({ attempt: request.attempt, groups: request.groups }), batches[request.attempt]!) },
      onBatch: (batch) => void (seen = batch),
    });
    const [metrics] = await trainer.train(1);
    assert.deepEqual(calls, [{ attempt: 0, groups: 2 }, { attempt: 1, groups: 2 }]);
    assert.deepEqual(metrics!.dynamicSampling, { batches: 2, droppedGroups: 1, surplusGroups: 0 });
    assert.deepEqual(seen!.groupKeys, ['b', 'c']);
    // The recorded ids are the batch, token for token: prompt, action, the tool's answer (the
    // last response, rendered by nobody: its feedbackTokenIds are kept).
    assert.deepEqual(Array.from(policy.gradients[0]!.batch.tokens), [0, 1, 2, 6, 0, 5, 2, 6, 0, 5, 2, 6, 0, 1, 2, 6]);
    assert.equal(metrics!.trainedTokens, 8);
    assert.equal(metrics!.successRate, 0.5);
    // The behaviour log-probs are the recorded ones.
    assert.deepEqual(Array.from(seen!.behaviourLogprobs.subarray(0, 4)), [0, -1.5, -1.25, 0]);

    const failing = (trajectories: Trajectory[]) => new GRPOTrainer<never>({ policy: bigram(), promptsPerStep: 1, groupSize: 2, filters: [], agent: { tokenizer: charTokenizer, collect: async () => trajectories } });
    await assert.rejects(failing([{ ...episode('a', 1, 1), reward: undefined }]).train(1), /Expected a finite number for agent\.collect\(request\)\[0\]\.reward/);
    await assert.rejects(failing([{ ...episode('a', 1, 1), groupId: undefined }]).train(1), /agent\.collect\(request\)\[0\]\.groupId/);
    const inexact = episode('a', 1, 1);
    delete inexact.turns[0]!.action.tokenIds;
    delete inexact.turns[0]!.action.logprobs;
    await assert.rejects(failing([inexact]).train(1), /a token record of every span/);
    assert.throws(() => new GRPOTrainer({ policy: bigram(), agent: { tokenizer: charTokenizer, collect: async () => [] }, problems: [1] }), /either agent, or createEnvironment and problems/);
    assert.throws(() => new GRPOTrainer<never>({ policy: bigram(), agent: { tokenizer: charTokenizer, collect: async () => [] }, filters: [{ name: 'x', removes: () => false }] }), /options\.filters\[0\]/);
    assert.throws(() => new GRPOTrainer(trainerOptions(bigram(), { dynamicSampling: { maxBatches: 0 } })), /options\.dynamicSampling\.maxBatches/);
  });

  it('AlphaApollo turn-level credit: each action token carries its turn\'s discounted credit', async () => {
    const gamma = 0.5;
    const successReward = 0.3;
    const failureReward = -0.2;
    const policy = new RecordingPolicy(bigram());
    let seen: TokenBatch | undefined;
    const trainer = new GRPOTrainer(trainerOptions(policy, {
      filters: [], turnCredit: { gamma, successReward, failureReward }, onBatch: (batch) => void (seen = batch),
    }));
    await trainer.train(1);
    const batch = seen!;
    const { batch: trained, gradient } = policy.gradients[0]!;
    // Float64 reference: GRPO outcome advantages, then c_t·γ^(n−t) per turn (MATH.md).
    const outcome = groupAdvantagesReference(batch.rewards, batch.groupIds);
    const trainedTokens = batch.actionTokenCounts.reduce((sum, count) => sum + count, 0);
    let toolTurns = 0;
    batch.trajectories.forEach((trajectory, i) => {
      const n = trajectory.turns.length;
      for (let k = 0; k < n; k++) {
        const response = trajectory.turns[k]!.response;
        const tool = response !== undefined && response.toolName !== 'user';
        if (tool) toolTurns += 1;
        const credit = (!tool ? outcome[i]! : response.status === 'success' ? successReward : failureReward) * gamma ** (n - 1 - k);
        const turn = batch.turnOffsets[i]! + k;
        for (let t = batch.turnStarts[turn]!; t < batch.turnActionEnds[turn]!; t++) {
          // At ratio 1 the token-mean loss's gradient is −A_t / (trained tokens).
          const g = gradient.gradLogp[trained.seqOffsets[i]! + t - batch.seqOffsets[i]!]!;
          assertClose(-g * trainedTokens, credit, { rtol: 1e-4, atol: 1e-6, label: `episode ${i} turn ${k}` });
        }
      }
    });
    assert.ok(toolTurns > 0, 'the batch should hold tool calls');
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
      const trajectoryLogFile = join(dir, 'log', 'trajectories.jsonl');
      const trainer = new GRPOTrainer(
        trainerOptions(bigram('adam'), {
          logFile: join(dir, 'log', 'metrics.jsonl'),
          trajectoryLogFile,
          onStep: (m) => void seen.push(m.step),
          ppoEpochs: 2,
          miniBatches: 2,
        }),
      );
      const metrics = await trainer.train(2);
      const trajectories = await readAll(readTrajectories(trajectoryLogFile));
      assert.equal(trajectories.length, 2 * 18, 'every episode of every step, filtered ones included');
      for (const [k, m] of metrics.entries()) {
        const ofStep = trajectories.filter((t) => t.metadata?.step === k + 1);
        assert.equal(ofStep.length, 18);
        assert.equal(ofStep.filter((t) => t.metadata?.filteredBy === 'void-turn').length, m.filtered['void-turn'].removed);
      }
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

describe('GRPOTrainer policy losses', () => {
  before(async () => {
    await tf.setBackend('cpu');
  });

  // Two epochs, so that the second sees ratios away from 1, where the losses differ.
  async function trainedTable(extra: Partial<GRPOTrainerOptions<Product>>): Promise<Float32Array> {
    const policy = bigram();
    const [metrics] = await new GRPOTrainer(trainerOptions(policy, { ppoEpochs: 2, ...extra })).train(1);
    assert.ok(metrics.trainedTokens > 0 && metrics.gradNorm > 0, `${extra.policyLoss}: nothing trained`);
    const result = table(policy);
    policy.dispose();
    return result;
  }

  it("trains with the kernel's policy losses, 'ppo' being 'vanilla'", async () => {
    const vanilla = await trainedTable({ policyLoss: 'vanilla' });
    assert.deepEqual(await trainedTable({}), vanilla);
    assert.deepEqual(await trainedTable({ policyLoss: 'ppo' }), vanilla);
    for (const [policyLoss, policyLossParameters] of [
      ['sapo', { tauPos: 2, tauNeg: 3 }],
      ['dro', { droBeta: 0.5 }],
      ['gpg', {}],
    ] as const) {
      const updated = await trainedTable({ policyLoss, policyLossParameters });
      assert.ok(updated.some((v, i) => v !== vanilla[i]), `${policyLoss} trained exactly as vanilla`);
    }
  });

  it('refuses an option the chosen loss does not read, naming it and the loss', async () => {
    const train = (extra: Partial<GRPOTrainerOptions<Product>>) => new GRPOTrainer(trainerOptions(bigram(), extra)).train(1);
    await assert.rejects(train({ policyLoss: 'sapo', clipLow: 0.1 }), (e: Error) => e instanceof TypeError && /clipLow/.test(e.message) && /sapo/.test(e.message));
    await assert.rejects(train({ policyLossParameters: { tauPos: 1 } }), (e: Error) => e instanceof TypeError && /tauPos/.test(e.message));
    assert.throws(() => new GRPOTrainer(trainerOptions(bigram(), { policyLoss: 'nope' as 'sapo' })), (e: Error) => e instanceof RangeError && /options\.policyLoss/.test(e.message));
  });
});

describe('GRPOTrainer advantage estimators', () => {
  before(async () => {
    await tf.setBackend('cpu');
  });

  // One step, nothing filtered, one micro-batch: at ratio 1 the vanilla token-mean gradient
  // is that of the op's advantages over the action tokens, so the gradient the policy gets
  // shows which advantages the trainer used.
  async function step(estimator: TrainerAdvantageEstimator | undefined, advantageParameters: Record<string, unknown> = {}) {
    const policy = new RecordingPolicy(bigram());
    let seen: { batch: TokenBatch; logp: Float32Array; sumPiSquared: Float32Array } | undefined;
    const trainer = new GRPOTrainer(
      trainerOptions(policy, {
        ...(estimator ? { advantageEstimator: estimator } : {}),
        advantageParameters,
        filters: [],
        onBatch: async (batch) => {
          const scored = await policy.logprobs({ tokens: batch.tokens, seqOffsets: batch.seqOffsets }, { withSumPiSquared: true });
          seen = { batch, logp: scored.logp, sumPiSquared: scored.sumPiSquared! };
        },
      }),
    );
    await trainer.train(1);
    assert.ok(seen && policy.gradients.length === 1);
    const { batch, logp, sumPiSquared } = seen;
    const mask = Uint8Array.from(batch.roles, (r) => (r === Role.action ? 1 : 0));
    const expected = advantages({
      estimator: estimator ?? 'grpo',
      rewards: batch.rewards,
      mask,
      seqOffsets: batch.seqOffsets,
      ...(estimator === 'reinforce_plus_plus' ? {} : { groupSize: 6 }),
      ...advantageParameters,
      ...(estimator?.includes('optimal_token_baseline') ? { oldLogp: logp, sumPiSquared } : {}),
    }).advantages;
    const { grad } = ppoLoss({ logp, oldLogp: logp, advantages: expected, mask, seqOffsets: batch.seqOffsets });
    return { gradient: policy.gradients[0].gradient.gradLogp, grad, expected, batch, sumPiSquared, policy };
  }

  it("trains on the advantages op's advantages for every estimator a GRPO step can feed", async () => {
    const seenAdvantages = new Map<string, Float32Array>();
    for (const estimator of TRAINER_ADVANTAGE_ESTIMATORS) {
      const parameters = estimator === 'reinforce_plus_plus' ? { gamma: 0.9 } : estimator === 'gpg' ? { fNorm: 2 } : {};
      const { gradient, grad, expected } = await step(estimator, parameters);
      // grpo_passk is 0 wherever a group's best two rewards tie, as they may with 0/1 rewards.
      if (estimator !== 'grpo_passk') assert.ok(expected.some((a) => a !== 0), `${estimator}: all advantages 0`);
      assertClose(gradient, grad, { rtol: 1e-5, atol: 1e-7, label: estimator });
      seenAdvantages.set(estimator, expected);
    }
    assert.notDeepEqual(seenAdvantages.get('rloo'), seenAdvantages.get('grpo'));
    assert.notDeepEqual(seenAdvantages.get('optimal_token_baseline'), seenAdvantages.get('grpo'));
    // The default is 'grpo', and scaleByStd is its normAdvByStdInGrpo.
    const grpo = await step(undefined);
    assertClose(grpo.gradient, grpo.grad, { rtol: 1e-5, atol: 1e-7, label: 'default' });
    const drGrpo = await step('grpo', { normAdvByStdInGrpo: false });
    assertClose(drGrpo.gradient, drGrpo.grad, { rtol: 1e-5, atol: 1e-7, label: 'Dr.GRPO' });
  });

  it("gives the policy's Σπ² of each token's distribution (float64 reference from the bigram table)", async () => {
    const { batch, sumPiSquared, policy } = await step('optimal_token_baseline');
    // The table after the step is not the one scored; score again with the updated table.
    const inner = policy.inner as ReturnType<typeof bigram>;
    const now = (await inner.logprobs({ tokens: batch.tokens, seqOffsets: batch.seqOffsets }, { withSumPiSquared: true })).sumPiSquared!;
    assert.equal(sumPiSquared.length, batch.tokens.length);
    const values = table(inner);
    const expected = new Float64Array(batch.tokens.length);
    for (let i = 0; i < batch.size; i++) {
      for (let t = batch.seqOffsets[i] + 1; t < batch.seqOffsets[i + 1]; t++) {
        const row = Array.from(values.subarray(batch.tokens[t - 1] * VOCAB_SIZE, (batch.tokens[t - 1] + 1) * VOCAB_SIZE));
        const max = Math.max(...row);
        const z = row.reduce((s, v) => s + Math.exp(v - max), 0);
        expected[t] = row.reduce((s, v) => s + (Math.exp(v - max) / z) ** 2, 0);
      }
    }
    for (let i = 0; i < batch.size; i++) now[batch.seqOffsets[i]] = 0; // no prediction for a first token
    assertClose(now, Float32Array.from(expected), { rtol: 1e-5, atol: 1e-7, label: 'sumPiSquared' });
  });

  it('refuses an estimator the trainer cannot feed, an unknown parameter, one the estimator does not read', () => {
    const make = (extra: Record<string, unknown>) => () => new GRPOTrainer(trainerOptions(bigram(), extra as Partial<GRPOTrainerOptions<Product>>));
    checkBadInputs([
      { name: 'gae', call: make({ advantageEstimator: 'gae' }), error: TypeError, message: 'value model' },
      { name: 'remax', call: make({ advantageEstimator: 'remax' }), error: TypeError, message: 'remax' },
      { name: 'gdpo', call: make({ advantageEstimator: 'gdpo' }), error: TypeError, message: 'gdpo' },
      { name: 'unknown estimator', call: make({ advantageEstimator: 'ppo' }), error: RangeError, message: 'options.advantageEstimator' },
      { name: 'unknown key', call: make({ advantageParameters: { gama: 0.9 } }), error: TypeError, message: 'options.advantageParameters.gama' },
      { name: 'key not read', call: make({ advantageEstimator: 'rloo', advantageParameters: { gamma: 0.9 } }), error: TypeError, message: 'gamma' },
      { name: 'scaleByStd with rloo', call: make({ advantageEstimator: 'rloo', scaleByStd: false }), error: TypeError, message: 'normAdvByStdInGrpo' },
      { name: 'gamma 2', call: make({ advantageEstimator: 'reinforce_plus_plus', advantageParameters: { gamma: 2 } }), error: RangeError, message: 'gamma' },
      { name: 'parameters null', call: make({ advantageParameters: null }), error: TypeError, message: 'options.advantageParameters' },
    ]);
  });
});

describe('GRPOTrainer options', () => {
  it('rejects malformed options, naming them', () => {
    const base = trainerOptions(bigram());
    const make = (extra: Record<string, unknown>) => () => new GRPOTrainer({ ...base, ...extra } as GRPOTrainerOptions<Product>);
    checkBadInputs([
      { name: 'groupSize 0', call: make({ groupSize: 0 }), error: RangeError, message: 'options.groupSize' },
      { name: 'groupSize 1.5', call: make({ groupSize: 1.5 }), error: RangeError, message: 'options.groupSize' },
      { name: 'groupSize string', call: make({ groupSize: '8' }), error: TypeError, message: 'options.groupSize' },
      { name: 'promptsPerStep -1', call: make({ promptsPerStep: -1 }), error: RangeError, message: 'options.promptsPerStep' },
      { name: 'maxTurns 0', call: make({ maxTurns: 0 }), error: RangeError, message: 'options.maxTurns' },
      { name: 'maxTurnTokens NaN', call: make({ maxTurnTokens: NaN }), error: RangeError, message: 'options.maxTurnTokens' },
      { name: 'maxTokens Infinity', call: make({ maxTokens: Infinity }), error: RangeError, message: 'options.maxTokens' },
      { name: 'ppoEpochs 0', call: make({ ppoEpochs: 0 }), error: RangeError, message: 'options.ppoEpochs' },
      { name: 'miniBatches 0', call: make({ miniBatches: 0 }), error: RangeError, message: 'options.miniBatches' },
      { name: 'microBatchSize 0', call: make({ microBatchSize: 0 }), error: RangeError, message: 'options.microBatchSize' },
      { name: 'clipLow 1', call: make({ clipLow: 1 }), error: RangeError, message: 'options.clipLow' },
      { name: 'clipLow -0.1', call: make({ clipLow: -0.1 }), error: RangeError, message: 'options.clipLow' },
      { name: 'clipHigh -1', call: make({ clipHigh: -1 }), error: RangeError, message: 'options.clipHigh' },
      { name: 'klCoef -1', call: make({ klCoef: -1 }), error: RangeError, message: 'options.klCoef' },
      { name: 'entropyCoef NaN', call: make({ entropyCoef: NaN }), error: RangeError, message: 'options.entropyCoef' },
      { name: 'maxGradNorm 0', call: make({ maxGradNorm: 0 }), error: RangeError, message: 'options.maxGradNorm' },
      { name: 'seed -1', call: make({ seed: -1 }), error: RangeError, message: 'options.seed' },
      { name: 'checkpointEvery 0', call: make({ checkpointEvery: 0 }), error: RangeError, message: 'options.checkpointEvery' },
      { name: 'problems empty', call: make({ problems: [] }), error: TypeError, message: 'options.problems' },
      { name: 'problems string', call: make({ problems: 'abc' }), error: TypeError, message: 'options.problems' },
      { name: 'stepLevel null', call: make({ stepLevel: null }), error: TypeError, message: 'options.stepLevel' },
      { name: 'stepLevel.samples 0', call: make({ stepLevel: { samples: 0 } }), error: RangeError, message: 'options.stepLevel.samples' },
      { name: 'stepLevel.coef -1', call: make({ stepLevel: { coef: -1 } }), error: RangeError, message: 'options.stepLevel.coef' },
      { name: 'turnCredit null', call: make({ turnCredit: null }), error: TypeError, message: 'options.turnCredit' },
      { name: 'turnCredit.gamma 1.5', call: make({ turnCredit: { gamma: 1.5 } }), error: RangeError, message: 'options.turnCredit.gamma' },
      { name: 'turnCredit.successReward NaN', call: make({ turnCredit: { successReward: NaN } }), error: RangeError, message: 'options.turnCredit.successReward' },
      { name: 'options null', call: () => new GRPOTrainer(null as unknown as GRPOTrainerOptions<Product>), error: TypeError, message: 'options' },
    ]);
  });
});
