/**
 * Agents against a served model, end to end over HTTP: the demo policy trained by the
 * project (`SFTTrainer` warm start), served by `tirl serve`'s server on localhost in vLLM's
 * and SGLang's formats, driven by the SDK's agents through the token-in/token-out policy,
 * and their trajectories trained on as they are by `GRPOTrainer` and `DPOTrainer`, which
 * update the very policy the server serves.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  calculatorSession, DEMO_CODE_MARKUP, DEMO_VOID_TURN, demoAnswer, demoChatTemplate, demoGroupCollector, demoReward, demoTask, demoTokenizer,
} from '../app/demo/agent_format.js';
import type { Problem } from '../app/demo/problems.js';
import { TOKEN, encode } from '../app/demo/vocab.js';
import {
  DPOTrainer, failedExecutionFilter, GRPOTrainer, MultiTurnReasoner, packTrajectories, Role, SelfCorrectingAgent, TokenCompletionClient, voidTurnFilter,
  type StepAttempt, type TokenBatch, type TokenPreferencePair, type Trajectory,
} from '../lib/index.js';
import { closeServedModel, resetServedModel, servedModel, servedWeights, weightChange } from './served_model.js';

const TIMEOUT = { timeout: 300_000 };

/** The SimpleTIR-style reasoner over the served model, in the demo's markup. */
async function reasoner(api: 'vllm' | 'sglang', seed: number, extra: Partial<ConstructorParameters<typeof MultiTurnReasoner>[0]> = {}) {
  const server = await servedModel();
  return new MultiTurnReasoner({
    policy: server.agentPolicy({ api, seed }), codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession,
    answer: demoAnswer, reward: demoReward, maxTurns: 3, ...extra,
  });
}

before(async () => {
  await servedModel();
});

after(async () => {
  await closeServedModel();
});

describe('the served-model harness', () => {
  test('agents over both wire formats record the exact ids the server sampled, and its log-probs are the served policy\'s', TIMEOUT, async () => {
    const server = await resetServedModel();
    for (const api of ['vllm', 'sglang'] as const) {
      const agent = await reasoner(api, 11);
      const next = server.problems(7);
      const trajectories: Trajectory[] = [];
      for (let i = 0; i < 4; i++) trajectories.push(await agent.run(demoTask(next())));
      const batch = packTrajectories(trajectories, { tokenizer: demoTokenizer, template: demoChatTemplate });
      assert.deepEqual(Array.from(batch.exact), [1, 1, 1, 1], api);
      assert.ok(trajectories.every((t) => t.promptTokenIds![0] === TOKEN.bos && t.turns.every((turn) => turn.action.tokenSource === 'tokens')));
      // The engine's log-probs of the sampled ids are what the trainer's policy computes for them.
      const { logp } = await server.policy.logprobs({ tokens: batch.tokens, seqOffsets: batch.seqOffsets });
      let compared = 0;
      batch.roles.forEach((role, t) => {
        if (role !== Role.action) return;
        assert.ok(Math.abs(logp[t]! - batch.behaviourLogprobs[t]!) < 1e-4, `${api} token ${t}: ${logp[t]} vs ${batch.behaviourLogprobs[t]}`);
        compared++;
      });
      assert.ok(compared > 8, `${api}: ${compared} action tokens`);
    }
  });

  test('stop strings reach the server in both formats: the sample stops at them and keeps them', TIMEOUT, async () => {
    const server = await resetServedModel();
    const prompt = [TOKEN.bos, ...encode('what is 123 times 45 ?')];
    for (const api of ['vllm', 'sglang'] as const) {
      const client = new TokenCompletionClient(api === 'vllm' ? { api, baseUrl: server.url, model: server.model } : { api, baseUrl: server.url });
      const stopped = await client.complete({ promptTokenIds: prompt, maxTokens: 30, seed: 4, stop: ['</calc>'] });
      const free = await client.complete({ promptTokenIds: prompt, maxTokens: 30, seed: 4 });
      const sample = stopped.samples[0]!;
      assert.equal(sample.finishReason, 'stop', api);
      assert.ok(sample.text.endsWith('</calc>') && sample.tokenIds.at(-1) === TOKEN.calcEnd, `${api}: ${sample.text}`);
      assert.deepEqual(sample.tokenIds, free.samples[0]!.tokenIds.slice(0, sample.tokenIds.length));
      assert.ok(free.samples[0]!.tokenIds.length > sample.tokenIds.length, `${api}: without the stop string the model goes on`);
    }
  });

  test('GRPOTrainer trains on the agent\'s trajectories as they are and changes the policy the server serves', TIMEOUT, async () => {
    const server = await resetServedModel();
    const agent = await reasoner('vllm', 21);
    const before = servedWeights(server);
    const collected: Trajectory[] = [];
    const trainer = new GRPOTrainer({
      policy: server.policy,
      agent: {
        tokenizer: demoTokenizer,
        template: demoChatTemplate,
        collect: demoGroupCollector(server.problems(8), agent, collected),
      },
      promptsPerStep: 2,
      groupSize: 4,
      filters: [],
      seed: 3,
    });
    const [metrics] = await trainer.train(1);
    assert.equal(metrics!.episodes, 8);
    assert.equal(metrics!.keptTrajectories, 8);
    const actionTokens = collected.reduce((n, t) => n + t.turns.reduce((m, turn) => m + turn.action.tokenIds!.length, 0), 0);
    assert.equal(metrics!.trainedTokens, actionTokens);
    // Recomputed old log-probs match the server's: no rollout/trainer mismatch.
    assert.ok(Math.abs(metrics!.rolloutCorrection!.kl) < 1e-5, `kl ${metrics!.rolloutCorrection!.kl}`);
    assert.ok(weightChange(before, servedWeights(server)) > 0);
  });

  test('DPOTrainer trains on preference pairs cut from the agent\'s trajectories with their contexts', TIMEOUT, async () => {
    const server = await resetServedModel();
    const agent = await reasoner('sglang', 31);
    const pairs: TokenPreferencePair[] = [];
    const next = server.problems(9, ['product', 'word']);
    for (let tries = 0; pairs.length < 2 && tries < 20; tries++) {
      const problem = next();
      const episodes = [await agent.run(demoTask(problem)), await agent.run(demoTask(problem))];
      const chosen = episodes.find((t) => t.reward === 1);
      const rejected = episodes.find((t) => t.reward === 0);
      if (chosen === undefined || rejected === undefined) continue;
      const batch = packTrajectories([chosen, rejected], { tokenizer: demoTokenizer, template: demoChatTemplate });
      const sequence = (i: number) => ({ tokens: batch.tokens.subarray(batch.seqOffsets[i]!, batch.seqOffsets[i]! + batch.lengths[i]!), roles: batch.roles.subarray(batch.seqOffsets[i]!, batch.seqOffsets[i]! + batch.lengths[i]!) });
      const [a, b] = [sequence(0), sequence(1)];
      const promptLength = chosen.promptTokenIds!.length;
      assert.deepEqual(chosen.promptTokenIds, rejected.promptTokenIds);
      pairs.push({
        prompt: a.tokens.slice(0, promptLength),
        chosen: a.tokens.slice(promptLength), chosenRoles: a.roles.slice(promptLength),
        rejected: b.tokens.slice(promptLength), rejectedRoles: b.roles.slice(promptLength),
      });
    }
    assert.equal(pairs.length, 2);
    const before = servedWeights(server);
    const trainer = new DPOTrainer({ policy: server.policy, pairs: () => pairs, seed: 1 });
    const [metrics] = await trainer.train();
    assert.equal(metrics!.pairs, 2);
    assert.ok(Number.isFinite(metrics!.loss));
    assert.ok(weightChange(before, servedWeights(server)) > 0);
  });
});

/** Problems from `a` and `b` in turn. */
function alternating(a: () => Problem, b: () => Problem): () => Problem {
  let turn = 0;
  return () => (turn++ % 2 === 0 ? a() : b());
}

describe('SimpleTIR against the served model', () => {
  test('a GRPO step with void-turn filtering and dynamic sampling runs over HTTP and changes the served policy', TIMEOUT, async () => {
    const server = await resetServedModel();
    const agent = await reasoner('sglang', 41, { endAtVoidTurn: true });
    const seen: Trajectory[] = [];
    let kept: { batch: TokenBatch; keep: Uint8Array } | undefined;
    const before = servedWeights(server);
    const trainer = new GRPOTrainer({
      policy: server.policy,
      agent: { tokenizer: demoTokenizer, template: demoChatTemplate, collect: demoGroupCollector(server.problems(1), agent, seen) },
      promptsPerStep: 2,
      groupSize: 4,
      filters: [voidTurnFilter(DEMO_VOID_TURN)],
      dynamicSampling: { maxBatches: 20 },
      seed: 5,
      onBatch: (batch, keep) => void (kept = { batch, keep }),
    });
    const [metrics] = await trainer.train(1);
    const { batch, keep } = kept!;
    // Dynamic sampling: the step trains on 2 groups, each with unequal rewards.
    assert.equal(metrics!.episodes, 8);
    assert.equal(batch.groupKeys.length, 2);
    for (let g = 0; g < 2; g++) {
      const rewards = Array.from(batch.rewards).filter((_, i) => batch.groupIds[i] === g);
      assert.ok(Math.max(...rewards) > Math.min(...rewards), `group ${g}: ${rewards}`);
    }
    const sampling = metrics!.dynamicSampling!;
    assert.equal(seen.length, 8 * sampling.batches);
    assert.equal(sampling.droppedGroups, 2 * sampling.batches - 2 - sampling.surplusGroups);
    // Void turns ended their episodes (nothing after them) and the filter took those out of the loss.
    const voidEnded = seen.filter((t) => t.metadata!.voidTurn !== undefined);
    for (const t of voidEnded) assert.equal(t.metadata!.voidTurn, t.turns.length - 1);
    batch.trajectories.forEach((t, i) => {
      if (t.metadata!.voidTurn !== undefined) assert.equal(keep[i], 0, `${t.id} ended at a void turn`);
    });
    assert.equal(metrics!.keptTrajectories + metrics!.filtered['void-turn']!.removed, 8);
    // Episodes build on the calculator's state: '#r' in an answer is the earlier call's result.
    assert.ok(seen.some((t) => t.reward === 1 && /#r/.test(t.turns[t.turns.length - 1]!.action.text)));
    assert.ok(weightChange(before, servedWeights(server)) > 0);
  });
});

describe('THOR against the served model', () => {
  test('each generation stops after its code block (the stop sequence), which the served model would write past', TIMEOUT, async () => {
    const server = await resetServedModel();
    const endsAtCode = (text: string) => text.indexOf('</calc>') < 0 || text.trimEnd().endsWith('</calc>') && text.indexOf('</calc>') === text.lastIndexOf('</calc>');
    const run = async (extra: { stop?: string[] }) => {
      const agent = new SelfCorrectingAgent({
        policy: server.agentPolicy({ seed: 51 }), codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession,
        answer: demoAnswer, reward: demoReward, maxTurns: 3, ...extra,
      });
      const turns: string[] = [];
      const next = server.problems(2);
      for (let i = 0; i < 6; i++) turns.push(...(await agent.run(demoTask(next()))).turns.map((turn) => turn.action.text));
      return turns;
    };
    const stopped = await run({});
    assert.ok(stopped.some((text) => text.includes('</calc>')));
    assert.ok(stopped.every(endsAtCode), JSON.stringify(stopped));
    const unstopped = await run({ stop: [] });
    assert.ok(!unstopped.every(endsAtCode), 'without the stop sequence the model writes past its code block');
  });

  test('retried steps were sampled from the context the trajectory holds: their log-probs are the policy\'s there', TIMEOUT, async () => {
    const server = await resetServedModel();
    const agent = new SelfCorrectingAgent({
      policy: server.agentPolicy({ seed: 61 }), codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession,
      answer: demoAnswer, reward: demoReward, maxTurns: 3, maxBacktracks: 2,
    });
    let retried = 0;
    const next = alternating(server.problems(5, ['product']), server.problems(6, ['conversion']));
    for (let i = 0; i < 6; i++) {
      const trajectory = await agent.run(demoTask(next()));
      const batch = packTrajectories([trajectory], { tokenizer: demoTokenizer, template: demoChatTemplate });
      for (const attempt of trajectory.metadata!.attempts as StepAttempt[]) {
        const prefix = Array.from(batch.tokens.subarray(0, batch.turnStarts[attempt.step]));
        const tokens = Int32Array.from([...prefix, ...attempt.action.tokenIds!]);
        const { logp } = await server.policy.logprobs({ tokens, seqOffsets: Int32Array.of(0, tokens.length) });
        attempt.action.logprobs!.forEach((value, k) => {
          assert.ok(Math.abs(logp[prefix.length + k]! - value) < 1e-4, `step ${attempt.step} attempt ${attempt.attempt} token ${k}`);
        });
        if (attempt.attempt > 0) retried++;
      }
    }
    assert.ok(retried > 0, 'some steps were retried');
  });

  test('a GRPO step at episode and step level (THOR) runs over HTTP and changes the served policy', TIMEOUT, async () => {
    const server = await resetServedModel();
    const agent = new SelfCorrectingAgent({
      policy: server.agentPolicy({ api: 'vllm', seed: 71 }), codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession,
      answer: demoAnswer, reward: demoReward, maxTurns: 3, maxBacktracks: 2,
    });
    const seen: Trajectory[] = [];
    const before = servedWeights(server);
    const trainer = new GRPOTrainer({
      policy: server.policy,
      agent: { tokenizer: demoTokenizer, template: demoChatTemplate, collect: demoGroupCollector(alternating(server.problems(3, ['word']), server.problems(4, ['conversion'])), agent, seen) },
      promptsPerStep: 2,
      groupSize: 4,
      filters: [failedExecutionFilter()],
      stepLevel: { coef: 0.5, episodeCoef: 1 },
      seed: 7,
    });
    const [metrics] = await trainer.train(1);
    const failed = seen.filter((t) => t.turns.some((turn) => turn.response !== undefined && turn.response.status !== 'success'));
    assert.equal(metrics!.filtered['failed-execution']!.trajectories, failed.length);
    // The step level: one group per retried step, its attempts sampled from one prefix.
    const retriedSteps = seen.reduce((n, t) => n + new Set((t.metadata!.attempts as StepAttempt[]).filter((a) => a.attempt > 0).map((a) => a.step)).size, 0);
    assert.ok(retriedSteps > 0);
    assert.equal(metrics!.stepLevel!.failures, retriedSteps);
    const attemptTokens = seen.reduce((n, t) => n + (t.metadata!.attempts as StepAttempt[])
      .filter((a) => (t.metadata!.attempts as StepAttempt[]).some((b) => b.step === a.step && b.attempt > 0))
      .reduce((m, a) => m + a.action.tokenIds!.length, 0), 0);
    const keptActionTokens = seen.filter((t) => !failed.includes(t)).reduce((n, t) => n + t.turns.reduce((m, turn) => m + turn.action.tokenIds!.length, 0), 0);
    assert.equal(metrics!.trainedTokens, keptActionTokens + attemptTokens);
    assert.ok(weightChange(before, servedWeights(server)) > 0);
  });
});
