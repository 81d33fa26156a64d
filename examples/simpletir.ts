/**
 * SimpleTIR, end to end on this machine: a policy the project trains (the demo's GRU, a few
 * seconds of `SFTTrainer` warm start) is served over HTTP by `tirl serve`'s server; the
 * multi-turn reasoner runs episodes against it through SGLang's token API, with the
 * calculator as a stateful interpreter (`#r` is the last result) and void turns ending the
 * rollout; `GRPOTrainer` trains on those trajectories as they are, with SimpleTIR's void-turn
 * filter and DAPO's dynamic sampling, updating the very policy the server serves.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/simpletir.js [steps]
 */
import { calculatorSession, DEMO_CODE_MARKUP, DEMO_VOID_TURN, demoAnswer, demoChatTemplate, demoGroupCollector, demoReward, demoSolveRate, demoTokenizer } from '../app/demo/agent_format.js';
import { startTrainedServer } from '../app/serve/trained_server.js';
import { GRPOTrainer, MultiTurnReasoner, voidTurnFilter } from '../lib/index.js';

const steps = Number(process.argv[2] ?? 6);
const started = performance.now();
const server = await startTrainedServer({ seed: 1 });
console.log(`served a warm-started policy at ${server.url} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
try {
  const agent = new MultiTurnReasoner({
    policy: server.agentPolicy({ api: 'sglang', seed: 1 }),
    codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession, answer: demoAnswer, reward: demoReward,
    endAtVoidTurn: true, maxTurns: 3,
  });
  const heldOut = Array.from({ length: 48 }, server.problems(1000));
  const evaluate = () => demoSolveRate(agent, heldOut);
  const before = await evaluate();
  const next = server.problems(1);
  const trainer = new GRPOTrainer({
    policy: server.policy,
    agent: {
      tokenizer: demoTokenizer,
      template: demoChatTemplate,
      collect: demoGroupCollector(next, agent),
    },
    promptsPerStep: 4,
    groupSize: 4,
    filters: [voidTurnFilter(DEMO_VOID_TURN)],
    dynamicSampling: { maxBatches: 10 },
    seed: 1,
    onStep: (m) => {
      const sampling = m.dynamicSampling!;
      console.log(
        `step ${m.step}: reward ${m.reward.toFixed(2)}, void-turn filtered ${m.filtered['void-turn']!.removed}/${m.episodes}, ` +
        `dynamic sampling ${sampling.batches} batch(es), ${sampling.droppedGroups} equal-reward group(s) replaced, ` +
        `rollout/trainer KL ${m.rolloutCorrection!.kl.toExponential(1)}, grad norm ${m.gradNorm.toFixed(3)}`,
      );
    },
  });
  await trainer.train(steps);
  const after = await evaluate();
  console.log(`held-out success (${heldOut.length} problems, one sampled episode each): ${(100 * before).toFixed(1)}% -> ${(100 * after).toFixed(1)}% after ${steps} GRPO steps; ${((performance.now() - started) / 1000).toFixed(0)} s`);
} finally {
  await server.close();
}
