import assert from 'node:assert/strict';
import { describe, it, before } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { Role, SFTTrainer, type SFTExample } from '../lib/index.js';
import { bigram, RecordingPolicy, table } from './training_support.js';

const { prompt: P, action: A, feedback: F } = Role;

/** Prompt token 0, an action 1 2, tool output 6 7, an action 2 3: the bigram can learn 0→1→2 and 7→2→3. */
const examples: SFTExample[] = [
  { tokens: [0, 1, 2, 6, 7, 2, 3], roles: [P, A, A, F, F, A, A] },
  { tokens: [0, 1, 2], roles: [P, A, A] },
];

describe('SFTTrainer', () => {
  before(async () => {
    await tf.setBackend('cpu');
  });

  it('lowers the action tokens\' negative log-likelihood', async () => {
    const policy = bigram('adam');
    const trainer = new SFTTrainer({ policy, examples, batchSize: 2, seed: 3 });
    const metrics = await trainer.train(30);
    assert.equal(metrics.length, 30);
    assert.equal(metrics[0]!.actionTokens, 6);
    assert.ok(metrics[0]!.loss > 1.5, `first loss ${metrics[0]!.loss}`);
    assert.ok(metrics[29]!.loss < 0.5 * metrics[0]!.loss, `loss ${metrics[0]!.loss} -> ${metrics[29]!.loss}`);
    policy.dispose();
  });

  it('gives prompt and tool-output tokens no gradient (token mean: -1/N on each action token)', async () => {
    const recording = new RecordingPolicy(bigram());
    const trainer = new SFTTrainer({ policy: recording, maxGradNorm: Infinity });
    const metrics = await trainer.step(examples);
    assert.equal(metrics.actionTokens, 6);
    const [{ gradient, batch }] = recording.gradients;
    const roles = examples.flatMap((e) => Array.from(e.roles));
    assert.deepEqual(Array.from(batch.tokens), examples.flatMap((e) => Array.from(e.tokens)));
    // The first token of each sequence has no prediction; the action after the prompt is trained on.
    roles.forEach((role, t) => assert.equal(gradient.gradLogp[t], role === A ? Math.fround(-1 / 6) : 0, `token ${t} (role ${role})`));
    assert.equal(gradient.gradEntropy, undefined);
  });

  it('seq-mean-token-mean weighs each sequence equally', async () => {
    const recording = new RecordingPolicy(bigram());
    await new SFTTrainer({ policy: recording, aggregation: 'seq-mean-token-mean' }).step(examples);
    const { gradLogp } = recording.gradients[0]!.gradient;
    // 4 action tokens in the first sequence, 2 in the second, 2 sequences.
    assert.deepEqual(Array.from(gradLogp), [0, -1 / 8, -1 / 8, 0, 0, -1 / 8, -1 / 8, 0, -1 / 4, -1 / 4].map(Math.fround));
  });

  it('leaves the parameters of tokens that only follow tool output untouched', async () => {
    // Row 6 of the bigram table scores the token after tool-output token 6 (also tool output): no gradient reaches it.
    const policy = bigram();
    const before = table(policy);
    await new SFTTrainer({ policy, maxGradNorm: Infinity }).step(examples);
    const after = table(policy);
    const vocab = 8;
    for (let v = 0; v < vocab; v++) assert.equal(after[6 * vocab + v], before[6 * vocab + v], `row 6 column ${v}`);
    assert.notDeepEqual(Array.from(after.subarray(7 * vocab, 8 * vocab)), Array.from(before.subarray(7 * vocab, 8 * vocab)));
    policy.dispose();
  });

  it('takes no optimizer step on a batch without action tokens', async () => {
    const policy = bigram();
    const before = table(policy);
    const metrics = await new SFTTrainer({ policy }).step([{ tokens: [0, 6, 7], roles: [P, F, F] }]);
    assert.equal(metrics.loss, 0);
    assert.equal(metrics.actionTokens, 0);
    assert.deepEqual(table(policy), before);
    policy.dispose();
  });

  it('names the bad option or example', async () => {
    const policy = bigram();
    assert.throws(() => new SFTTrainer({ policy: {} as never }), /options\.policy/);
    assert.throws(() => new SFTTrainer({ policy, batchSize: 0 }), /options\.batchSize/);
    assert.throws(() => new SFTTrainer({ policy, aggregation: 'sum' as never }), /options\.aggregation/);
    assert.throws(() => new SFTTrainer({ policy, examples: [] }), /options\.examples/);
    await assert.rejects(new SFTTrainer({ policy }).train(1), /options\.examples/);
    const trainer = new SFTTrainer({ policy });
    await assert.rejects(trainer.step([{ tokens: [0, 1], roles: [P] }]), /examples\[0\]\.roles/);
    await assert.rejects(trainer.step([{ tokens: [0, 1], roles: [P, 9] }]), /role codes 0 to 3/);
    policy.dispose();
  });
});
