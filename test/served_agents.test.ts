/**
 * Agents against a served model, end to end over HTTP: the demo policy trained by the
 * project (`SFTTrainer` warm start), served by `tirl serve`'s server on localhost in vLLM's
 * and SGLang's formats, driven by the SDK's agents through the token-in/token-out policy,
 * and their trajectories trained on as they are by `GRPOTrainer` and `DPOTrainer`, which
 * update the very policy the server serves.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { calculatorSession, DEMO_CODE_MARKUP, demoAnswer, demoChatTemplate, demoReward, demoTask, demoTokenizer } from '../app/demo/agent_format.js';
import { TOKEN } from '../app/demo/vocab.js';
import {
  DPOTrainer, GRPOTrainer, MultiTurnReasoner, packTrajectories, Role, type TokenPreferencePair, type Trajectory,
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
      const trajectories: Trajectory[] = [];
      for (let i = 0; i < 4; i++) trajectories.push(await agent.run(demoTask(server.nextProblem())));
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
        collect: async ({ step, groups, groupSize }) => {
          const out: Trajectory[] = [];
          for (let g = 0; g < groups; g++) {
            const problem = server.nextProblem();
            for (let k = 0; k < groupSize; k++) out.push(await agent.run(demoTask(problem, `s${step}g${g}`)));
          }
          collected.push(...out);
          return out;
        },
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
    for (let tries = 0; pairs.length < 2 && tries < 20; tries++) {
      const problem = server.nextProblem();
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
