// Writes trajectories with the TypeScript SDK (writeTrajectories) and the SDK's own packing of
// them (packTrajectories, feedbackMask, groupAdvantages), for test_data.py to read back in
// Python token for token. Usage: node trajectories_from_ts.mjs <out.jsonl> <expected.json>
import { writeFileSync } from 'node:fs';
import * as tirl from '../../dist/lib/index.js';
import { charTokenizer } from '../../dist/test/tokenizers.js';

const [jsonlPath, expectedPath] = process.argv.slice(2);
const ids = (text) => charTokenizer.encode(text);
const episode = (n, groupId, reward, turns, extra = {}) => ({
  id: `episode-${n}`,
  prompt: `task ${n}`,
  promptTokenIds: [1000, ...ids(`user: task ${n}`), 1001],
  turns,
  reward,
  groupId,
  ...extra,
});
const action = (text, version) => ({
  text,
  tokenIds: [...ids(text), 1001],
  logprobs: [...ids(text), 0].map((id, i) => -((id % 7) + i) / 8 - 0.015625),
  ...(version === undefined ? {} : { policyVersion: version }),
});
const trajectories = [
  episode(0, 'g1', 1, [
    { action: action('call search', 3), response: { toolName: 'search', status: 'success', text: 'found' },
      feedbackTokenIds: [1000, ...ids('tool: found'), 1001, 1000] },
    { action: action('answer 42', 4) },
  ], { policyVersion: 2 }),
  episode(1, 'g1', 0, [{ action: action('no idea') }]),
  episode(2, 'g2', 0.5, [
    { action: action('run code'), response: { toolName: 'python', status: 'error', text: 'Traceback' },
      feedbackTokenIds: ids('Traceback') },
    { action: action('fixed', 7), response: { toolName: 'python', status: 'success', text: 'ok' },
      feedbackTokenIds: ids('ok') },
  ], { metadata: { note: 'kept' }, truncated: true }),
  episode(3, 'g2', 0.25, [{ action: { ...action('text only'), tokenSource: 'text' } }]),
  episode(4, undefined, 1, [{ action: action('alone') }]),
];
await tirl.writeTrajectories(jsonlPath, trajectories);

const batch = tirl.packTrajectories(trajectories, { tokenizer: charTokenizer });
const { mask } = tirl.feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
const advantages = tirl.groupAdvantages({ rewards: batch.rewards, groupIds: batch.groupIds });
const plain = (a) => Array.from(a);
writeFileSync(expectedPath, JSON.stringify({
  tokens: plain(batch.tokens), roles: plain(batch.roles), behaviourLogprobs: plain(batch.behaviourLogprobs),
  seqOffsets: plain(batch.seqOffsets), rewards: plain(batch.rewards), groupIds: plain(batch.groupIds),
  policyVersions: plain(batch.policyVersions), exact: plain(batch.exact), mask: plain(mask),
  advantages: plain(advantages), ids: trajectories.map((t) => t.id),
}));
