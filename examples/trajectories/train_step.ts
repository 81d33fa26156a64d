/**
 * From a JSONL file of multi-turn tool-use episodes to one PPO/GRPO loss:
 * read (streaming) → reward (answersMatch against metadata.gold) → pack into a TokenBatch →
 * filters (void turns, truncation, max turns, equal-reward groups) → feedbackMask →
 * groupAdvantages → ppoLoss. Prints the filter report and the loss.
 *
 * Run after `npm run build`:  node dist/examples/trajectories/train_step.js [episodes.jsonl]
 */
import { fileURLToPath } from 'node:url';
import { feedbackMask, ppoLoss } from '../../lib/kernels/index.js';
import {
  answersMatch, applyFilters, equalRewardGroupFilter, extractAnswer, grpoTokenAdvantages, loadTiktokenTokenizer,
  maxTurnsFilter, packTrajectories, readTrajectories, truncatedFilter, voidTurnFilter, type Trajectory,
} from '../../lib/sdk.js';

const defaultFile = fileURLToPath(new URL('../../../examples/trajectories/episodes.jsonl', import.meta.url));
const file = process.argv[2] ?? defaultFile;

// 1. Read episodes one at a time and reward each by its final answer.
const trajectories: Trajectory[] = [];
for await (const trajectory of readTrajectories(file)) {
  const gold = String(trajectory.metadata?.gold ?? '');
  const last = trajectory.turns.at(-1)?.action.text ?? '';
  trajectories.push({ ...trajectory, reward: answersMatch(last, gold) ? 1 : 0 });
  console.log(`${trajectory.id.padEnd(6)} turns ${trajectory.turns.length}  answer ${JSON.stringify(extractAnswer(last))}  gold ${JSON.stringify(gold)}  reward ${answersMatch(last, gold) ? 1 : 0}`);
}

// 2. Tokenize with a real BPE vocabulary (offline) and pack, cutting at 512 tokens.
const tokenizer = await loadTiktokenTokenizer('cl100k_base');
const batch = packTrajectories(trajectories, { tokenizer, maxLength: 512, padding: 'ragged' });
console.log(`\nbatch: ${batch.size} sequences, ${batch.tokens.length} tokens, ${batch.actionTokenCounts.reduce((a, b) => a + b, 0)} action tokens`);

// 3. Filters mask, they never drop: every episode stays in the batch and the report.
const { keep, report } = applyFilters(batch, [voidTurnFilter(), truncatedFilter(), maxTurnsFilter(6), equalRewardGroupFilter()]);
console.log('\nfilter report:');
for (const stats of report.filters) {
  console.log(`  ${stats.name.padEnd(20)} flagged ${stats.flaggedTrajectories}  removed ${stats.removedTrajectories} trajectories, ${stats.removedTokens} action tokens  ${JSON.stringify(stats.removedIds)}`);
}
console.log(`  kept ${report.keptTrajectories}/${report.trajectories} trajectories, ${report.actionTokens - report.removedTokens}/${report.actionTokens} action tokens`);

// 4. Kernels: loss mask, GRPO advantages broadcast to action tokens, PPO loss.
const { mask, actionTokens } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets, keep });
const advantages = grpoTokenAdvantages(batch, mask);
// On the first optimisation step of a PPO epoch the policy still equals the behaviour
// policy, so logp = oldLogp (these episodes carry no sampled log-probs: 0 stands in for both).
const result = ppoLoss({ logp: batch.behaviourLogprobs, oldLogp: batch.behaviourLogprobs, advantages, mask, seqOffsets: batch.seqOffsets });
console.log(`\nmasked action tokens per sequence: ${Array.from(actionTokens).join(' ')}`);
let gradNorm = 0;
for (const g of result.grad) gradNorm += g * g;
console.log(`ppoLoss: loss ${result.loss.toFixed(6)}  pgLoss ${result.pgLoss.toFixed(6)}  clipFraction ${result.clipFraction}  approxKl ${result.approxKl}  |grad| ${Math.sqrt(gradNorm).toExponential(3)}`);
