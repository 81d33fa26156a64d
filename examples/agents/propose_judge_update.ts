/**
 * AlphaApollo's propose–judge–update, offline: a scripted proposer and a scripted judge.
 * The first proposal has a sign error, the judge says so, the refinement (which sees the
 * critique and the memory of earlier attempts) fixes it and passes.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/agents/propose_judge_update.js
 */
import { ProposeJudgeUpdate, ScriptedPolicy, judgeVerifier } from '../../lib/agents/index.js';

const proposer = new ScriptedPolicy([
  'From 3x + 7 = 1 we get 3x = 8, so \\boxed{8/3}.',
  'From 3x + 7 = 1 we get 3x = 1 - 7 = -6, so x = \\boxed{-2}.',
]);
const judge = new ScriptedPolicy([
  'Moving 7 to the right side gives 1 - 7 = -6, not 8: the sign is wrong. \\boxed{2}',
  'Check: 3(-2) + 7 = 1. Correct. \\boxed{10}',
]);
const agent = new ProposeJudgeUpdate({ policy: proposer, verifier: judgeVerifier({ policy: judge }), maxRounds: 3 });
const trajectory = await agent.run({ prompt: 'Solve 3x + 7 = 1 for x.', gold: '-2' });

for (const round of trajectory.metadata!.rounds as Array<{ round: number; answer: string; score: number; passed: boolean }>) {
  console.log(`round ${round.round + 1}: answer ${round.answer}, score ${round.score}, passed ${round.passed}`);
}
console.log('\nrefinement prompt of round 2:\n' + proposer.calls[1]![1]!.content);
console.log(`\nkept round ${(trajectory.metadata!.best as number) + 1}: answer ${trajectory.metadata!.answer}, reward ${trajectory.reward}`);
