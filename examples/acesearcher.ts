/**
 * AceSearcher end to end against a served model: the demo policy trained by the harness is
 * served over HTTP by `tirl serve`'s server (vLLM's token API); the decomposer–solver runs
 * against it through the token-in/token-out agent policy. Stage 1 fine-tunes it (SFTTrainer)
 * on reference decomposer–solver episodes; stage 2 runs iterative DPO: each round samples
 * m = 3 decompositions × m′ = 2 solutions per question, builds the multipath pairs in the
 * contexts the solver saw, and trains against the policy as the round began.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/acesearcher.js
 */
import {
  DecomposerSolver, DPOTrainer, SFTTrainer, buildPreferencePairs, decomposerPreferenceQuestion, decomposerReferenceEpisodes,
  packPreferencePairs, packTrajectories, type PreferencePair, type Trajectory,
} from '../lib/index.js';
import { demoChatTemplate, demoTokenizer } from '../app/demo/agent_format.js';
import { startTrainedServer } from '../app/serve/trained_server.js';
import { DEMO_QUESTIONS, DEMO_REFERENCE_FORMAT, demoSolverOptions } from './demo_formats.js';

const started = performance.now();
const server = await startTrainedServer({ seed: 1 });
console.log(`serving the trained demo policy at ${server.url}`);
const pack = { tokenizer: demoTokenizer, template: demoChatTemplate };
const options = demoSolverOptions();
const solver = new DecomposerSolver({ ...options, policy: server.agentPolicy({ seed: 9, maxTokens: 16 }) });

/** m decompositions × m′ solutions of every question; the share answered right. */
async function sample(label: string): Promise<{ episodes: Trajectory[][]; accuracy: number }> {
  const episodes: Trajectory[][] = [];
  for (const question of DEMO_QUESTIONS) {
    const task = { prompt: question.question, gold: question.answers };
    const own: Trajectory[] = [];
    for (let d = 0; d < 3; d++) {
      const first = await solver.run({ ...task, id: `${question.id}/${label}/d${d}/s0` });
      const again = await solver.run({ ...task, id: `${question.id}/${label}/d${d}/s1` },
        { decomposition: first.turns[0]!.action, ...(first.promptTokenIds ? { promptTokenIds: first.promptTokenIds } : {}) });
      own.push(first, again);
    }
    episodes.push(own);
  }
  const all = episodes.flat();
  return { episodes, accuracy: all.filter((e) => e.reward === 1).length / all.length };
}


const references = await decomposerReferenceEpisodes(DEMO_QUESTIONS, { ...options, format: DEMO_REFERENCE_FORMAT });
const example = references[0]!;
console.log('\nstage 1, a reference episode (the solver\'s own conversation):');
example.turns.forEach((turn, k) => console.log(`  turn ${k}: ${turn.action.text}${turn.response ? `   <- ${turn.response.text}` : ''}`));
const sft = new SFTTrainer({ policy: server.policy, examples: packTrajectories(references, pack), batchSize: 6, seed: 1 });
const sftMetrics = await sft.train(60);
console.log(`SFT: ${sftMetrics.length} steps, action-token loss ${sftMetrics[0]!.loss.toFixed(3)} -> ${sftMetrics.at(-1)!.loss.toFixed(3)} nats`);

const dpo = new DPOTrainer({
  policy: server.policy, rounds: 2, epochsPerRound: 2, beta: 0.1, maxGradNorm: 0.25, seed: 1,
  async pairs(round) {
    const { episodes, accuracy } = await sample(`round${round}`);
    const pairs: PreferencePair[] = episodes.flatMap((own, q) => buildPreferencePairs(decomposerPreferenceQuestion(DEMO_QUESTIONS[q]!.id, own)));
    const kinds = pairs.reduce<Record<string, number>>((count, pair) => ({ ...count, [pair.kind]: (count[pair.kind] ?? 0) + 1 }), {});
    console.log(`\nDPO round ${round}: ${(100 * accuracy).toFixed(0)}% of 36 sampled solutions right; ${pairs.length} pairs ${JSON.stringify(kinds)}`);
    const shown = pairs.find((pair) => pair.kind !== 'decomposition') ?? pairs[0];
    if (shown) {
      console.log(`  a ${shown.kind} pair, in the context the solver saw (${shown.context!.turns.length} turns; last message "${shown.prompt}"):`);
      console.log(`    chosen   ${shown.chosen}\n    rejected ${shown.rejected}`);
    }
    return packPreferencePairs(pairs, pack);
  },
  onStep: (m) => console.log(`  step ${m.step}: loss ${m.loss.toFixed(4)}, reward accuracy ${m.rewardAccuracy.toFixed(2)}, margin ${m.margin.toFixed(4)}`),
});
await dpo.train();
console.log(`\nafter DPO: ${(100 * (await sample('final')).accuracy).toFixed(0)}% of 36 right`);
await server.close();
console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s)`);
