import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { feedbackMask, ppoLoss } from '../lib/kernels/index.js';
import {
  batchTurnCredit, broadcastToTokens, broadcastTurnsToTokens, grpoTokenAdvantages, maskSharedPrefix, packTrajectories,
  reinforcePlusPlusBaselineAdvantages, rlooAdvantages, rlooTokenAdvantages, stepRewards, turnLevelCredit,
  type Tokenizer, type Trajectory, type Turn,
} from '../lib/sdk.js';

const charTokenizer: Tokenizer = {
  name: 'chars', vocabSize: 1002, specialTokens: { '<|im_start|>': 1000, '<|im_end|>': 1001 },
  encode: (text) => Array.from(text, (c) => c.charCodeAt(0) % 1000),
  decode: (ids) => ids.map((id) => String.fromCharCode(id)).join(''),
  specialTokenId(text) { return this.specialTokens[text]!; },
};

const close = (actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance = 1e-6) => {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < expected.length; i++) assert.ok(Math.abs(actual[i]! - expected[i]!) <= tolerance, `[${i}] ${actual[i]} vs ${expected[i]}`);
};

const ok: Turn = { action: { text: '```python\nx\n```' }, response: { toolName: 'python', status: 'success', text: '1' } };
const failed: Turn = { action: { text: '```python\n1/0\n```' }, response: { toolName: 'python', status: 'error', text: 'ZeroDivisionError' } };
const slow: Turn = { action: { text: '```python\nwhile 1: pass\n```' }, response: { toolName: 'python', status: 'timeout', text: '' } };
const answer: Turn = { action: { text: '\\boxed{1}' } };

describe('broadcast', () => {
  test('sequence values land on masked action tokens only', () => {
    const out = broadcastToTokens(Float32Array.of(2, -1), Uint8Array.of(0, 1, 1, 1, 0), Int32Array.of(0, 3, 5));
    assert.deepEqual(Array.from(out), [0, 2, 2, -1, 0]);
    const reused = new Float32Array(5).fill(9);
    assert.equal(broadcastToTokens(Float32Array.of(2, -1), Uint8Array.of(1, 0, 0, 0, 1), Int32Array.of(0, 3, 5), reused), reused);
    assert.deepEqual(Array.from(reused), [2, 0, 0, 0, -1]);
    assert.throws(() => broadcastToTokens(Float32Array.of(1), new Uint8Array(5), Int32Array.of(0, 3, 5)), /values/);
    assert.throws(() => broadcastToTokens(Float32Array.of(1, 2), new Uint8Array(4), Int32Array.of(0, 3, 5)), /mask/);
  });

  test('turn values land on their own turn\'s action tokens', () => {
    const batch = packTrajectories([{ id: 'a', prompt: 'q', turns: [ok, answer], reward: 1 }], { tokenizer: charTokenizer });
    const { mask } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
    const out = broadcastTurnsToTokens(Float32Array.of(0.5, 3), mask, batch);
    for (let t = 0; t < out.length; t++) {
      const expected = t >= batch.turnStarts[0]! && t < batch.turnActionEnds[0]! ? 0.5 : t >= batch.turnStarts[1]! && t < batch.turnActionEnds[1]! ? 3 : 0;
      assert.equal(out[t], expected, `token ${t}`);
    }
  });
});

describe('outcome advantages', () => {
  test('RLOO = n/(n-1)(s - mean) = s minus the mean of the others; a group of one keeps its reward (verl 1dda039b rloo)', () => {
    const rewards = Float32Array.of(1, 0, 0, 1, 5, 3, 2);
    const groups = Int32Array.of(7, 7, 7, 7, -1, 4, 4);
    const advantages = rlooAdvantages(rewards, groups);
    close(advantages, [2 / 3, -2 / 3, -2 / 3, 2 / 3, 5, 1, -1]);
    // Leave-one-out definition, for the group of four.
    for (let i = 0; i < 4; i++) {
      let others = 0;
      for (let j = 0; j < 4; j++) if (j !== i) others += rewards[j]!;
      assert.ok(Math.abs(advantages[i]! - (rewards[i]! - others / 3)) < 1e-6);
    }
    assert.throws(() => rlooAdvantages(rewards, new Int32Array(2)), /groupIds/);
  });

  const group: Trajectory[] = [
    { id: 'a', prompt: 'q', groupId: 'g', reward: 1, turns: [answer] },
    { id: 'b', prompt: 'q', groupId: 'g', reward: 0, turns: [ok, answer] },
    { id: 'c', prompt: 'q', groupId: 'g', reward: 0, turns: [answer] },
    { id: 'd', prompt: 'q', groupId: 'h', reward: 2, turns: [answer] },
  ];
  const batch = packTrajectories(group, { tokenizer: charTokenizer, padding: 'longest' });
  const { mask } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
  const perSequence = (tokens: Float32Array) => Array.from({ length: batch.size }, (_, i) => {
    const start = batch.seqOffsets[i]!;
    const firstAction = batch.turnStarts[batch.turnOffsets[i]!]!;
    assert.equal(tokens[start], 0); // prompt token
    return tokens[firstAction]!;
  });

  test('GRPO per-token advantages follow (s - mean) / (unbiased std + eps); a group of one has mean 0, std 1', () => {
    const tokens = grpoTokenAdvantages(batch, mask);
    const std = Math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2);
    close(perSequence(tokens), [(2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6), 2 / (1 + 1e-6)], 1e-5);
    for (let t = 0; t < tokens.length; t++) if (mask[t] === 0) assert.equal(tokens[t], 0);
    close(perSequence(grpoTokenAdvantages(batch, mask, { scaleByStd: false })), [2 / 3, -1 / 3, -1 / 3, 2]);
  });

  test('RLOO per-token advantages', () => {
    close(perSequence(rlooTokenAdvantages(batch, mask)), [1, -0.5, -0.5, 2]);
  });

  test('REINFORCE++-baseline: centred per group, whitened over masked tokens', () => {
    const tokens = reinforcePlusPlusBaselineAdvantages(batch, mask);
    let n = 0;
    let sum = 0;
    let squares = 0;
    for (let t = 0; t < tokens.length; t++) if (mask[t]) { n++; sum += tokens[t]!; squares += tokens[t]! ** 2; }
    assert.ok(Math.abs(sum / n) < 1e-5);
    assert.ok(Math.abs((squares - (sum * sum) / n) / (n - 1) - 1) < 1e-4);
    const order = perSequence(tokens);
    assert.ok(order[0]! > 0 && order[1]! < 0 && Math.abs(order[1]! - order[2]!) < 1e-6);
  });

  test('missing rewards are an error naming the trajectory', () => {
    const unrewarded = packTrajectories([{ id: 'x', prompt: 'q', turns: [answer] }], { tokenizer: charTokenizer });
    const m = feedbackMask({ roles: unrewarded.roles, seqOffsets: unrewarded.seqOffsets }).mask;
    assert.throws(() => grpoTokenAdvantages(unrewarded, m), /trajectories\[0\]\.reward/);
    assert.throws(() => rlooTokenAdvantages(unrewarded, m), RangeError);
  });

  test('the advantages feed ppoLoss: with logp = oldLogp the loss is -mean(A) over action tokens', () => {
    const advantages = grpoTokenAdvantages(batch, mask);
    const logp = new Float32Array(mask.length).fill(-1);
    const result = ppoLoss({ logp, oldLogp: logp, advantages, mask });
    let sum = 0;
    let n = 0;
    for (let t = 0; t < mask.length; t++) if (mask[t]) { sum += advantages[t]!; n++; }
    assert.ok(Math.abs(result.loss + sum / n) < 1e-6);
  });
});

describe('turn-level credit (AlphaApollo)', () => {
  test('c_t * gamma^(n-t): success +0.1, failure -0.05, otherwise the final reward', () => {
    const trajectory: Trajectory = { id: 'a', prompt: 'q', reward: 1, turns: [ok, failed, slow, answer] };
    close(turnLevelCredit(trajectory, { gamma: 0.9 }), [0.1 * 0.9 ** 3, -0.05 * 0.9 ** 2, -0.05 * 0.9, 1], 1e-12);
    close(turnLevelCredit(trajectory), [0.1 * 0.99 ** 3, -0.05 * 0.99 ** 2, -0.05 * 0.99, 1], 1e-12);
    close(turnLevelCredit(trajectory, { finalReward: 0, successReward: 1, failureReward: -1, gamma: 1 }), [1, -1, -1, 0], 0);
    assert.deepEqual(turnLevelCredit({ ...trajectory, turns: [] }), []);
    assert.throws(() => turnLevelCredit({ ...trajectory, reward: undefined }), /finalReward/);
    assert.throws(() => turnLevelCredit(trajectory, { gamma: 2 }), /gamma/);
  });

  test('a user message (not a tool response) leaves its turn with the final reward', () => {
    const asked = { action: { text: 'Let me think.' }, response: { toolName: 'user', status: 'success' as const, text: 'Go on.' } };
    close(turnLevelCredit({ id: 'u', prompt: 'q', reward: 1, turns: [ok, asked, answer] }, { gamma: 0.5 }), [0.1 * 0.25, 0.5, 1], 1e-12);
  });

  test('batch credit follows the global turn order', () => {
    const batch = packTrajectories([
      { id: 'a', prompt: 'q', reward: 1, turns: [ok, answer] },
      { id: 'b', prompt: 'q', reward: 0, turns: [failed] },
    ], { tokenizer: charTokenizer });
    close(batchTurnCredit(batch, { gamma: 0.5 }), [0.05, 1, -0.05]);
  });
});

describe('step-level rewards (THOR)', () => {
  const prefix: Turn[] = [ok];
  const branches: Trajectory[] = [
    { id: 'b0', prompt: 'q', groupId: 'step1', reward: 1, turns: [...prefix, failed, answer] },
    { id: 'b1', prompt: 'q', groupId: 'step1', reward: 0, turns: [...prefix, slow] },
    { id: 'b2', prompt: 'q', groupId: 'step1', reward: 1, turns: [...prefix, ok, answer] },
    { id: 'solo', prompt: 'other', groupId: 'solo', reward: 1, turns: [ok] },
  ];
  const batch = packTrajectories(branches, { tokenizer: charTokenizer });

  test('each execution is a step: 1 if it ran, 0 if it failed', () => {
    const { rewards, isStep } = stepRewards(batch);
    assert.deepEqual(Array.from(isStep), [1, 1, 0, 1, 1, 1, 1, 0, 1]);
    assert.deepEqual(Array.from(rewards), [1, 0, 0, 1, 0, 1, 1, 0, 1]);
  });

  test('the shared prefix of branches is masked out; lone sequences keep their mask', () => {
    const { mask } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
    const masked = maskSharedPrefix(batch, mask);
    assert.notEqual(masked, mask);
    // The branches share everything up to the second turn's action, where "```python\n" is common too.
    const common = batch.turnStarts[1]! + '```python\n'.length;
    for (let i = 0; i < 3; i++) {
      const start = batch.seqOffsets[i]!;
      const shared = common - batch.seqOffsets[0]!;
      for (let t = start; t < batch.seqOffsets[i + 1]!; t++) assert.equal(masked[t], t < start + shared ? 0 : mask[t], `seq ${i} token ${t - start}`);
    }
    assert.deepEqual(masked.subarray(batch.seqOffsets[3]!), mask.subarray(batch.seqOffsets[3]!));
  });
});
