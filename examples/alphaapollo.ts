/**
 * AlphaApollo end to end against a served model: the demo policy trained by the harness is
 * served over HTTP by `tirl serve`'s server (vLLM's token API). Each propose–judge–update
 * round runs the multi-turn tool-using reasoner (the model writes `<calc> … </calc>`, the
 * calculator session runs it, the model reads `<out> … </out>` and answers), a verifier scores
 * the answer against the reference, and the next round's prompt remembers the earlier
 * answers with their verdicts. The rounds' episodes, rewarded by their verified score, train
 * GRPO steps with AlphaApollo's turn-level credit, which update the very weights the server
 * samples from.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/alphaapollo.js
 */
import { GRPOTrainer, type Trajectory } from '../lib/index.js';
import { demoChatTemplate, demoTask, demoTokenizer } from '../app/demo/agent_format.js';
import { startTrainedServer } from '../app/serve/trained_server.js';
import { demoProposeJudgeUpdate } from './demo_formats.js';

const started = performance.now();
const server = await startTrainedServer({ seed: 1 });
console.log(`serving the trained demo policy at ${server.url}`);
const agent = demoProposeJudgeUpdate(server.agentPolicy({ seed: 5 }));

function nextProduct() {
  let problem = server.nextProblem();
  while (problem.kind !== 'product') problem = server.nextProblem();
  return problem;
}

let shown = false;
const trainer = new GRPOTrainer({
  policy: server.policy, promptsPerStep: 4, groupSize: 4, filters: [], seed: 3,
  turnCredit: { gamma: 0.99, successReward: 0.1, failureReward: -0.05 },
  agent: {
    tokenizer: demoTokenizer, template: demoChatTemplate,
    async collect({ step, groups }) {
      const episodes: Trajectory[] = [];
      for (let g = 0; g < groups; g++) {
        const task = demoTask(nextProduct(), `step${step}/g${g}`);
        // A group: 2 runs × 2 rounds of the task.
        for (let run = 0; run < 2; run++) {
          const { trajectory, episodes: rounds } = await agent.runRounds({ ...task, id: `step${step}/g${g}/run${run}` });
          if (!shown) {
            shown = true;
            console.log(`\n${task.prompt} (gold ${task.gold}); the loop's best verified score ${trajectory.metadata!.bestScore}`);
            for (const round of rounds) {
              console.log(`  round ${round.metadata!.round}, prompt "${round.prompt}", reward ${round.reward}:`);
              for (const turn of round.turns) console.log(`    ${turn.action.text}${turn.response ? `   -> ${turn.response.status}: ${turn.response.text}` : ''}`);
            }
          }
          episodes.push(...rounds);
        }
      }
      return episodes;
    },
  },
  onStep: (m) => console.log(`GRPO step ${m.step}: mean verified score ${m.reward.toFixed(3)} over ${m.episodes} round episodes, ` +
    `${m.trainedTokens} trained tokens, loss ${m.loss.toFixed(4)}, grad norm ${m.gradNorm.toFixed(3)}`),
});
console.log('');
await trainer.train(3);
await server.close();
console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s)`);
