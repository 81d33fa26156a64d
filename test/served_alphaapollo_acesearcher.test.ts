/**
 * AlphaApollo and AceSearcher end to end over HTTP: the agents run against the project's own
 * server (`tirl serve`'s, vLLM's token format) serving the demo policy the harness trained,
 * through the token-in/token-out agent policy, and their trajectories (exact token records)
 * go as they are into a trainer step that changes the served policy.
 * - AlphaApollo (tmlr-group/AlphaApollo commit 712a04dc): propose–judge–update rounds, each
 *   the multi-turn tool-using reasoner, rewarded by the verified score, one GRPO step with
 *   turn-level credit.
 * - AceSearcher (ritaranx/AceSearcher commit 16a9b3c3): a supervised first stage on reference
 *   decomposer–solver episodes, then iterative DPO on multipath pairs (m decompositions × m′
 *   solutions) in the contexts the solver saw.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';

import {
  DecomposerSolver, DPOTrainer, GRPOTrainer, Role, SFTTrainer, buildPreferencePairs, decomposerPreferenceQuestion,
  decomposerReferenceEpisodes, packPreferencePairs, packTrajectories, type PreferencePair, type TokenBatch, type Trajectory,
} from '../lib/index.js';
import { demoChatTemplate, demoTask, demoTokenizer } from '../app/demo/agent_format.js';
import { DEMO_QUESTIONS, DEMO_REFERENCE_FORMAT, demoProposeJudgeUpdate, demoSolverOptions } from '../examples/demo_formats.js';
import { closeServedModel, resetServedModel, servedWeights, weightChange } from './served_model.js';
import { RecordingPolicy } from './training_support.js';

after(closeServedModel);

describe('AlphaApollo over HTTP', () => {
  test('propose–judge–update rounds of the tool-using reasoner, rewarded by their verified score, train one GRPO step with turn-level credit', { timeout: 300_000 }, async () => {
    const server = await resetServedModel();
    // Rounds of the tool-using reasoner, scored against the reference, remembered in the next prompt.
    const agent = demoProposeJudgeUpdate(server.agentPolicy({ seed: 5 }));
    const gamma = 0.9;
    const collected: Trajectory[] = [];
    const policy = new RecordingPolicy(server.policy);
    let seen: TokenBatch | undefined;
    const trainer = new GRPOTrainer({
      policy, promptsPerStep: 2, groupSize: 4, filters: [], seed: 3, maxGradNorm: Infinity,
      turnCredit: { gamma },
      agent: {
        tokenizer: demoTokenizer, template: demoChatTemplate,
        async collect({ step, groups }) {
          const trajectories: Trajectory[] = [];
          for (let g = 0; g < groups; g++) {
            // Products, the problems the served policy was warm-started on, so that some rounds pass.
            let problem = server.nextProblem();
            while (problem.kind !== 'product') problem = server.nextProblem();
            const task = demoTask(problem, `step${step}/g${g}`);
            // groupSize 4 = 2 runs × 2 rounds: every round's episode of the task is one of its group.
            for (let run = 0; run < 2; run++) trajectories.push(...(await agent.runRounds({ ...task, id: `step${step}/g${g}/run${run}` })).episodes);
          }
          collected.push(...trajectories);
          return trajectories;
        },
      },
      onBatch: (batch) => void (seen = batch),
    });
    const before = servedWeights(server);
    const [metrics] = await trainer.train(1);
    assert.equal(collected.length, 8);
    // Each episode is a round of the reasoner: its own prompt (the task, then the memory), its
    // reward the verifier's score, and the exact token record of what the server sampled.
    assert.ok(collected.every((episode) => episode.reward === (episode.metadata!.verdict as { score: number }).score));
    assert.ok(collected.every((episode) => episode.promptTokenIds !== undefined && episode.turns.every((turn) => turn.action.tokenSource === 'tokens')));
    assert.ok(collected.some((episode) => episode.metadata!.round === 1 && /<out>/.test(episode.prompt)), 'round 1 remembers round 0');
    assert.ok(collected.some((episode) => episode.turns.some((turn) => turn.response?.toolName === 'python')), 'the reasoner ran code');
    const rewards = collected.map((episode) => episode.reward!);
    assert.ok(Math.max(...rewards) > Math.min(...rewards), `verified scores should differ: ${rewards.join(' ')}`);
    // Turn-level credit reached the kernel: a tool turn's tokens carry ±credit·γ^(n−t), not the outcome.
    const batch = seen!;
    const { batch: trained, gradient } = policy.gradients[0]!;
    const trainedTokens = batch.actionTokenCounts.reduce((sum, count) => sum + count, 0);
    let checked = 0;
    batch.trajectories.forEach((trajectory, i) => {
      const n = trajectory.turns.length;
      trajectory.turns.forEach((turn, k) => {
        if (turn.response === undefined || turn.response.toolName === 'user') return;
        const credit = (turn.response.status === 'success' ? 0.1 : -0.05) * gamma ** (n - 1 - k);
        const t = batch.turnStarts[batch.turnOffsets[i]! + k]!;
        const g = gradient.gradLogp[trained.seqOffsets[i]! + t - batch.seqOffsets[i]!]!;
        assert.ok(Math.abs(-g * trainedTokens - credit) < 1e-4 * Math.max(1, Math.abs(credit)) + 1e-6, `episode ${i} turn ${k}: ${-g * trainedTokens} vs ${credit}`);
        checked += 1;
      });
    });
    assert.ok(checked > 0);
    assert.ok(metrics!.trainedTokens > 0);
    assert.ok(weightChange(before, servedWeights(server)) > 0, 'the step changed the served policy');
  });
});

describe('AceSearcher over HTTP', () => {
  test('supervised first stage, then iterative DPO on multipath pairs with the contexts the solver saw', { timeout: 300_000 }, async () => {
    const server = await resetServedModel();
    const options = demoSolverOptions();
    // Stage 1: supervised fine-tuning on the reference solutions, as the solver's own episodes.
    const references = await decomposerReferenceEpisodes(DEMO_QUESTIONS, { ...options, format: DEMO_REFERENCE_FORMAT });
    assert.ok(references.every((episode) => episode.reward === 1));
    const sft = new SFTTrainer({ policy: server.policy, examples: packTrajectories(references, { tokenizer: demoTokenizer, template: demoChatTemplate }), batchSize: 6, seed: 1 });
    const sftMetrics = await sft.train(60);
    assert.ok(sftMetrics.at(-1)!.loss < sftMetrics[0]!.loss / 2, `SFT loss ${sftMetrics[0]!.loss} -> ${sftMetrics.at(-1)!.loss}`);

    // Stage 2: iterative DPO. Each round samples m = 3 decompositions × m′ = 2 solutions per
    // question from the served model over HTTP and trains on their pairs against the round's reference.
    const solver = new DecomposerSolver({ ...options, policy: server.agentPolicy({ seed: 9, maxTokens: 16 }) });
    const rounds: { pairs: PreferencePair[]; batch: TokenBatch }[] = [];
    const dpo = new DPOTrainer({
      policy: server.policy, rounds: 2, beta: 0.1, seed: 1,
      async pairs(round) {
        const pairs: PreferencePair[] = [];
        for (const question of DEMO_QUESTIONS) {
          const task = { prompt: question.question, gold: question.answers };
          const episodes: Trajectory[] = [];
          for (let d = 0; d < 3; d++) {
            const first = await solver.run({ ...task, id: `${question.id}/r${round}/d${d}/s0` });
            episodes.push(first);
            episodes.push(await solver.run({ ...task, id: `${question.id}/r${round}/d${d}/s1` },
              { decomposition: first.turns[0]!.action, ...(first.promptTokenIds ? { promptTokenIds: first.promptTokenIds } : {}) }));
          }
          pairs.push(...buildPreferencePairs(decomposerPreferenceQuestion(question.id, episodes)));
        }
        const batch = packPreferencePairs(pairs, { tokenizer: demoTokenizer, template: demoChatTemplate });
        rounds.push({ pairs, batch });
        return batch;
      },
    });
    const before = servedWeights(server);
    const metrics = await dpo.train();
    assert.equal(rounds.length, 2);
    for (const { pairs, batch } of rounds) {
      assert.ok(pairs.length > 0, 'the round has pairs');
      // Every pair continues the real conversation, token for token as the engine sampled it.
      assert.ok(pairs.every((pair) => pair.context !== undefined && pair.chosenAction?.tokenIds !== undefined));
      assert.deepEqual([...batch.exact], Array(batch.size).fill(1));
      for (let i = 0; i < batch.size; i++) {
        const trajectory = batch.trajectories[i]!;
        const last = batch.turnOffsets[i + 1]! - 1;
        // Only the completion is trained; the context (documents, earlier answers) is prompt and feedback.
        const actions = [...batch.roles.subarray(batch.seqOffsets[i]!, batch.seqOffsets[i + 1]!)].filter((role) => role === Role.action).length;
        assert.equal(actions, batch.turnActionEnds[last]! - batch.turnStarts[last]!, trajectory.id);
      }
    }
    const kinds = new Set(rounds.flatMap(({ pairs }) => pairs.map((pair) => pair.kind)));
    assert.ok(kinds.has('final') || kinds.has('intermediate'), [...kinds].join(', '));
    assert.ok(metrics.length >= 2 && metrics.every((m) => Number.isFinite(m.loss)));
    assert.ok(weightChange(before, servedWeights(server)) > 0, 'DPO changed the served policy');
  });
});
