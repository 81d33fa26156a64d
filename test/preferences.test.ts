import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { dpoLoss } from '../lib/kernels/index.js';
import {
  buildPreferencePairs, dpoInputs, dpoTokenGradient, packPreferencePairs, type PreferenceQuestion, type Tokenizer, type Trajectory,
} from '../lib/sdk.js';

const charTokenizer: Tokenizer = {
  name: 'chars', vocabSize: 1002, specialTokens: { '<|im_start|>': 1000, '<|im_end|>': 1001 },
  encode: (text) => Array.from(text, (c) => c.charCodeAt(0) % 1000),
  decode: (ids) => ids.map((id) => String.fromCharCode(id)).join(''),
  specialTokenId(text) { return this.specialTokens[text]!; },
};

// m = 3 decompositions x m' = 3 solutions, rewarded by exact match.
const question: PreferenceQuestion = {
  id: 'q1',
  question: 'Who directed the film that won Best Picture in 1998?',
  decompositions: [
    { text: 'D0', subQuestions: ['Which film won in 1998?', 'Who directed it?'], solutions: [
      { text: 'S00', intermediateAnswers: ['Titanic', 'James Cameron'], reward: 1 },
      { text: 'S01', intermediateAnswers: ['Titanic', 'Steven Spielberg'], reward: 0 },
      { text: 'S02', intermediateAnswers: ['Shakespeare in Love', 'John Madden'], reward: 1 },
    ] }, // mean 2/3
    { text: 'D1', solutions: [
      { text: 'S10', reward: 0 }, { text: 'S11', reward: 0 }, { text: 'S12', reward: 0 },
    ] }, // mean 0
    { text: 'D2', solutions: [
      { text: 'S20', reward: 0 }, { text: 'S21', reward: 1 }, { text: 'S22', reward: 0 },
    ] }, // mean 1/3
  ],
};

describe('AceSearcher preference pairs', () => {
  test('worked example: decomposition, intermediate and final pairs', () => {
    const pairs = buildPreferencePairs(question);
    const context = `${question.question}\n\nD0`;
    assert.deepEqual(pairs, [
      { questionId: 'q1', kind: 'decomposition', prompt: question.question, chosen: 'D0', rejected: 'D1', chosenScore: 2 / 3, rejectedScore: 0 },
      // best solution S00 (first of the ties), worst S01; they differ only at step 1.
      { questionId: 'q1', kind: 'intermediate', step: 1, prompt: `${context}\n\nWho directed it?`, chosen: 'James Cameron', rejected: 'Steven Spielberg', chosenScore: 1, rejectedScore: 0 },
      { questionId: 'q1', kind: 'final', prompt: context, chosen: 'S00', rejected: 'S01', chosenScore: 1, rejectedScore: 0 },
    ]);
  });

  test('equal rewards give no pair', () => {
    const flat: PreferenceQuestion = { id: 'q2', question: 'Q', decompositions: [
      { text: 'A', solutions: [{ text: 'a', reward: 1 }, { text: 'b', reward: 1 }] },
      { text: 'B', solutions: [{ text: 'c', reward: 1 }] },
    ] };
    assert.deepEqual(buildPreferencePairs(flat), []);
    // Decompositions tie, but solutions within the best differ: only the final pair.
    const tie: PreferenceQuestion = { id: 'q3', question: 'Q', decompositions: [
      { text: 'A', solutions: [{ text: 'a', reward: 1 }, { text: 'b', reward: 0 }] },
      { text: 'B', solutions: [{ text: 'c', reward: 0.5 }] },
    ] };
    assert.deepEqual(buildPreferencePairs(tie).map((p) => [p.kind, p.chosen, p.rejected]), [['final', 'a', 'b']]);
    assert.deepEqual(buildPreferencePairs({ id: 'q4', question: 'Q', decompositions: [] }), []);
  });

  test('bad questions name the field', () => {
    assert.throws(() => buildPreferencePairs({ id: 'x', question: 'Q', decompositions: [{ text: 'A', solutions: [] }] }), /decompositions\[0\]\.solutions/);
    assert.throws(() => buildPreferencePairs({ id: 'x', question: 'Q', decompositions: [{ text: 'A', solutions: [{ text: 'a', reward: Number.NaN }] }] }), /reward/);
  });
});

describe('dpoLoss inputs via sequenceLogprobs', () => {
  const pairs = buildPreferencePairs(question);
  const batch = packPreferencePairs(pairs, { tokenizer: charTokenizer });
  // Token t gets log-prob -(t mod 7)/10 under the policy and -(t mod 5)/10 under the reference.
  const policyLogp = Float32Array.from(batch.tokens, (_, t) => -(t % 7) / 10);
  const refLogp = Float32Array.from(batch.tokens, (_, t) => -(t % 5) / 10);
  const completionSum = (logp: Float32Array, i: number, average: boolean) => {
    let sum = 0;
    let n = 0;
    for (let t = batch.seqOffsets[i]!; t < batch.seqOffsets[i + 1]!; t++) if (batch.roles[t] === 1) { sum += logp[t]!; n++; }
    return average ? sum / n : sum;
  };

  test('pairs pack as chosen, rejected, chosen, …; the completion (with its end token) is the action', () => {
    assert.equal(batch.size, 2 * pairs.length);
    assert.deepEqual(batch.trajectories.map((t) => t.id), [
      'q1/decomposition/0/chosen', 'q1/decomposition/0/rejected', 'q1/intermediate/1/1/chosen', 'q1/intermediate/1/1/rejected',
      'q1/final/2/chosen', 'q1/final/2/rejected']);
    assert.deepEqual(Array.from(batch.actionTokenCounts), [3, 3, 14, 17, 4, 4]);
  });

  for (const average of [false, true]) {
    test(`summed completion log-probs (average ${average})`, () => {
      const inputs = dpoInputs(batch, policyLogp, refLogp, average);
      for (let k = 0; k < pairs.length; k++) {
        assert.ok(Math.abs(inputs.policyChosen[k]! - completionSum(policyLogp, 2 * k, average)) < 1e-5);
        assert.ok(Math.abs(inputs.policyRejected[k]! - completionSum(policyLogp, 2 * k + 1, average)) < 1e-5);
        assert.ok(Math.abs(inputs.refChosen[k]! - completionSum(refLogp, 2 * k, average)) < 1e-5);
        assert.ok(Math.abs(inputs.refRejected[k]! - completionSum(refLogp, 2 * k + 1, average)) < 1e-5);
      }
    });
  }

  test('dpoLoss runs on them and its gradient flows back to completion tokens only', () => {
    const inputs = dpoInputs(batch, policyLogp, refLogp);
    const result = dpoLoss({ ...inputs, beta: 0.1 });
    assert.ok(Number.isFinite(result.loss));
    const grad = dpoTokenGradient(batch, result.gradChosen, result.gradRejected);
    for (let i = 0; i < batch.size; i++) {
      const pairGrad = i % 2 === 0 ? result.gradChosen[i >> 1]! : result.gradRejected[i >> 1]!;
      for (let t = batch.seqOffsets[i]!; t < batch.seqOffsets[i + 1]!; t++) {
        assert.equal(grad[t], batch.roles[t] === 1 ? pairGrad : 0);
      }
    }
    assert.throws(() => dpoTokenGradient(batch, new Float32Array(1), result.gradRejected), /gradChosen/);
  });
});

describe('pairs in their real context', () => {
  // An episode with a complete token record: prompt, decomposition, documents, first answer, …
  const episode = (answers: number[][], final: number[], reward: number): Trajectory => ({
    id: `e${reward}`, prompt: 'decompose: Q', promptTokenIds: [5, 6, 7],
    turns: [
      { action: { text: '### a\n### b', tokenIds: [10, 11], logprobs: [-0.1, -0.2] }, response: { toolName: 'retrieve', status: 'success', text: 'docs for a' }, feedbackTokenIds: [20, 21] },
      { action: { text: `answer a${reward}`, tokenIds: answers[0]!, logprobs: answers[0]!.map(() => -0.5) }, response: { toolName: 'retrieve', status: 'success', text: 'docs for b' }, feedbackTokenIds: [22, 23, 24] },
      { action: { text: `answer b${reward}`, tokenIds: answers[1]!, logprobs: answers[1]!.map(() => -0.5) }, response: { toolName: 'user', status: 'success', text: 'final?' }, feedbackTokenIds: [25] },
      { action: { text: `final ${reward}`, tokenIds: final, logprobs: final.map(() => -0.25) } },
    ],
    reward,
    metadata: { agent: 'decomposer-solver', question: 'Q' },
  });
  const good = episode([[30], [31, 32]], [33], 1);
  const bad = episode([[40, 41], [42]], [43, 44], 0);
  const preference: PreferenceQuestion = {
    id: 'q', question: 'Q',
    decompositions: [{ text: '### a\n### b', subQuestions: ['a', 'b'], solutions: [
      { text: 'final 1', intermediateAnswers: ['A', 'B'], reward: 1, trajectory: good },
      { text: 'final 0', intermediateAnswers: ['X', 'Y'], reward: 0, trajectory: bad },
    ] }],
  };
  const pairs = buildPreferencePairs(preference);

  test('each pair continues the chosen episode where the turn was generated', () => {
    assert.deepEqual(pairs.map((pair) => [pair.kind, pair.step, pair.prompt, pair.chosen, pair.rejected]), [
      ['intermediate', 0, 'docs for a', 'answer a1', 'answer a0'],
      ['intermediate', 1, 'docs for b', 'answer b1', 'answer b0'],
      ['final', undefined, 'final?', 'final 1', 'final 0'],
    ]);
    assert.equal(pairs[2]!.context!.reward, undefined);
  });

  test('packing keeps the token record verbatim; only the completion is trained', () => {
    const batch = packPreferencePairs(pairs, { tokenizer: charTokenizer });
    const sequence = (i: number) => Array.from(batch.tokens.subarray(batch.seqOffsets[i]!, batch.seqOffsets[i + 1]!));
    const roles = (i: number) => Array.from(batch.roles.subarray(batch.seqOffsets[i]!, batch.seqOffsets[i + 1]!));
    // Second hop: prompt, decomposition, documents for a, the chosen first answer, documents for b, then the answer.
    assert.deepEqual(sequence(2), [5, 6, 7, 10, 11, 20, 21, 30, 22, 23, 24, 31, 32]);
    assert.deepEqual(sequence(3), [5, 6, 7, 10, 11, 20, 21, 30, 22, 23, 24, 42]);
    assert.deepEqual(roles(2), [0, 0, 0, 0, 0, 2, 2, 0, 2, 2, 2, 1, 1]);
    assert.deepEqual(Array.from(batch.exact), [1, 1, 1, 1, 1, 1]);
    assert.deepEqual(Array.from(batch.actionTokenCounts), [1, 2, 2, 1, 1, 2]);
    const logprobs = Array.from(batch.behaviourLogprobs.subarray(batch.seqOffsets[5]!, batch.seqOffsets[6]!));
    assert.deepEqual(logprobs.slice(-3), [0, -0.25, -0.25]);
    assert.ok(logprobs.slice(0, -2).every((value) => value === 0));
    const inputs = dpoInputs(batch, Float32Array.from(batch.tokens, () => -1), Float32Array.from(batch.tokens, () => -2));
    assert.deepEqual(Array.from(inputs.policyChosen), [-1, -2, -1]);
  });

  test('a cut-off worst episode gives no pair for the turns it lacks', () => {
    const cut = { ...bad, turns: bad.turns.slice(0, 2) };
    const partial = buildPreferencePairs({ ...preference, decompositions: [{ ...preference.decompositions[0]!, solutions: [
      preference.decompositions[0]!.solutions[0]!, { text: 'answer a0', intermediateAnswers: ['X'], reward: 0, trajectory: cut },
    ] }] });
    assert.deepEqual(partial.map((pair) => [pair.kind, pair.step]), [['intermediate', 0]]);
  });
});
