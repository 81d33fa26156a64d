/**
 * THOR, end to end on this machine: the project's served policy (the demo's GRU, warm-started
 * with `SFTTrainer`, served over HTTP by `tirl serve`'s server) writes each step with the
 * stop sequence after its code block; a step whose code fails is taken back and sampled
 * again from the same context; `GRPOTrainer` then trains the episodes (those whose every
 * execution ran: THOR's filter) and, at step level, each retried step's attempts as one
 * group, with separate coefficients, updating the very policy the server serves.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/thor.js [steps]
 */
import { calculatorSession, DEMO_CODE_MARKUP, demoAnswer, demoChatTemplate, demoGroupCollector, demoReward, demoSolveRate, demoTask, demoTokenizer } from '../app/demo/agent_format.js';
import { startTrainedServer } from '../app/serve/trained_server.js';
import { failedExecutionFilter, GRPOTrainer, SelfCorrectingAgent, type StepAttempt } from '../lib/index.js';

const steps = Number(process.argv[2] ?? 6);
const started = performance.now();
const server = await startTrainedServer({ seed: 1 });
console.log(`served a warm-started policy at ${server.url} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
try {
  const agent = new SelfCorrectingAgent({
    policy: server.agentPolicy({ api: 'vllm', seed: 2 }),
    codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession, answer: demoAnswer, reward: demoReward,
    maxTurns: 3, maxBacktracks: 2,
  });
  const next = server.problems(2);
  const heldOut = Array.from({ length: 48 }, server.problems(1000));
  const evaluate = () => demoSolveRate(agent, heldOut);
  const before = await evaluate();
  const example = await agent.run(demoTask(server.problems(3, ['conversion'])()));
  console.log(`one episode: "${example.prompt}"`);
  for (const attempt of example.metadata!.attempts as StepAttempt[]) {
    const outcome = attempt.response?.status ?? (demoAnswer(attempt.action.text) === null ? 'neither code nor an answer' : 'answer');
    console.log(`  step ${attempt.step + 1} attempt ${attempt.attempt + 1}: ${attempt.action.text} -> ${outcome}${attempt.backtracked ? ' (taken back)' : ''}`);
  }
  const trainer = new GRPOTrainer({
    policy: server.policy,
    agent: {
      tokenizer: demoTokenizer,
      template: demoChatTemplate,
      collect: demoGroupCollector(next, agent),
    },
    promptsPerStep: 4,
    groupSize: 4,
    filters: [failedExecutionFilter()],
    stepLevel: { coef: 0.5, episodeCoef: 1 },
    seed: 2,
    onStep: (m) => {
      console.log(
        `step ${m.step}: reward ${m.reward.toFixed(2)}, episodes with a failed execution ${m.filtered['failed-execution']!.removed}/${m.episodes} (out of the episode loss), ` +
        `step level ${m.stepLevel!.failures} retried step(s) with ${m.stepLevel!.samples} retry(ies), ${(100 * m.stepLevel!.successRate).toFixed(0)}% ran, ` +
        `trained tokens ${m.trainedTokens}, grad norm ${m.gradNorm.toFixed(3)}`,
      );
    },
  });
  await trainer.train(steps);
  const after = await evaluate();
  console.log(`held-out success (${heldOut.length} problems, one sampled episode each): ${(100 * before).toFixed(1)}% -> ${(100 * after).toFixed(1)}% after ${steps} GRPO steps; ${((performance.now() - started) / 1000).toFixed(0)} s`);
} finally {
  await server.close();
}
