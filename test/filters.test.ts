import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { feedbackMask } from '../lib/kernels/index.js';
import {
  annotateFiltered, applyFilters, equalRewardGroupFilter, isVoidTurn, maxTurnsFilter, packTrajectories,
  failedExecutionFilter, truncatedFilter, voidTurnFilter, type Tokenizer, type Trajectory, type Turn,
} from '../lib/sdk.js';

const charTokenizer: Tokenizer = {
  name: 'chars', vocabSize: 1002, specialTokens: { '<|im_start|>': 1000, '<|im_end|>': 1001 },
  encode: (text) => Array.from(text, (c) => c.charCodeAt(0) % 1000),
  decode: (ids) => ids.map((id) => String.fromCharCode(id)).join(''),
  specialTokenId(text) { return this.specialTokens[text]!; },
};

describe('isVoidTurn (SimpleTIR rule)', () => {
  const cases: [string, boolean][] = [
    ['Let me compute.\n```python\nprint(1)\n```', false],
    ['```python\nprint(1)\n```\nand more text', false],
    ['```Python\nx = 1\n```', false],
    ['```python\nprint(1)', true], // unclosed fence
    ['```python', true],
    ['```\nprint(1)\n```', true], // no language: not a python block
    ['```pythonic\nx\n```', true],
    ['```bash\nls\n```', true],
    ['So the answer is \\boxed{42}.', false],
    ['\\boxed{\\frac{1}{2}}', false],
    ['\\boxed{42', true], // unclosed brace
    ['\\boxed{ \\boxed{5}', false], // the inner one closes
    ['final_answer(42)', false],
    ['final_answer(', true],
    ['I think the answer is 42.', true], // prose is not a final answer under the rule
    ['', true],
    ['   \n  ', true],
  ];
  for (const [text, expected] of cases) {
    test(`${JSON.stringify(text.slice(0, 40))} is ${expected ? 'void' : 'not void'}`, () => assert.equal(isVoidTurn(text), expected));
  }

  test('code-fence languages and answer markers are configurable', () => {
    assert.equal(isVoidTurn('```py\nx\n```'), true);
    assert.equal(isVoidTurn('```py\nx\n```', { codeLanguages: ['py', 'python'] }), false);
    assert.equal(isVoidTurn('<answer>42</answer>'), true);
    assert.equal(isVoidTurn('<answer>42</answer>', { answerMarkers: ['<answer>'] }), false);
    assert.equal(isVoidTurn('\\boxed{4}', { answerMarkers: [] }), true);
    assert.throws(() => isVoidTurn('x', { codeLanguages: 'python' as unknown as string[] }), /options\.codeLanguages/);
  });

  test('delimiter-marked code and answers (a model trained on <calc> … </calc>) count when their pair closes', () => {
    const markup = { codeMarkup: [{ open: '<calc>', close: '</calc>' }], answerMarkup: [{ open: '<ans>', close: '</ans>' }] };
    assert.equal(isVoidTurn('<calc> #1*#2 </calc>', markup), false);
    assert.equal(isVoidTurn('<ans> #r </ans>', markup), false);
    assert.equal(isVoidTurn('<calc> #1*#2 <ans> 7', markup), true);
    assert.equal(isVoidTurn('</calc> <calc>', markup), true);
    assert.throws(() => isVoidTurn('x', { codeMarkup: [{ open: '', close: 'x' }] }), /codeMarkup/);
  });

  test('hostile input does not throw and stays fast', () => {
    const start = performance.now();
    assert.equal(isVoidTurn('```python'.repeat(100_000)), true);
    assert.equal(isVoidTurn('\\boxed{'.repeat(200_000)), true);
    assert.equal(isVoidTurn('{'.repeat(1 << 20) + '\\boxed{1}'), false);
    assert.equal(isVoidTurn('a'.repeat(1 << 20) + '\uD800'), true);
    assert.equal(isVoidTurn(null as unknown as string), true);
    assert.ok(performance.now() - start < 5_000);
  });
});

const codeTurn: Turn = { action: { text: '```python\nprint(1)\n```' }, response: { toolName: 'python', status: 'success', text: '1' } };
const answerTurn: Turn = { action: { text: '\\boxed{1}' } };
const voidTurn: Turn = { action: { text: 'hmm, let me think' }, response: { toolName: 'python', status: 'error', text: '' } };
const episodes: Trajectory[] = [
  { id: 't0', prompt: 'q', groupId: 'A', reward: 1, turns: [codeTurn, answerTurn] },
  { id: 't1', prompt: 'q', groupId: 'A', reward: 0, turns: [voidTurn, answerTurn] },
  { id: 't2', prompt: 'q', groupId: 'B', reward: 1, turns: [codeTurn, codeTurn, codeTurn, codeTurn, answerTurn] },
  { id: 't3', prompt: 'q', groupId: 'B', reward: 1, turns: [answerTurn] },
  { id: 't4', prompt: 'q', groupId: 'C', reward: 0.5, turns: [codeTurn], truncated: true },
  { id: 't5', prompt: 'q', reward: 0, turns: [{ action: { text: '', toolCall: { name: 'search', arguments: '{}' } } }, answerTurn] },
];

describe('filters mask, count and report', () => {
  const batch = packTrajectories(episodes, { tokenizer: charTokenizer });
  const tokens = (i: number) => batch.actionTokenCounts[i]!;

  test('each filter flags what its rule says', () => {
    assert.deepEqual(Array.from(voidTurnFilter().flag(batch)), [0, 1, 0, 0, 0, 0]);
    assert.deepEqual(Array.from(truncatedFilter().flag(batch)), [0, 0, 0, 0, 1, 0]);
    assert.deepEqual(Array.from(maxTurnsFilter(4).flag(batch)), [0, 0, 1, 0, 0, 0]);
    assert.deepEqual(Array.from(equalRewardGroupFilter().flag(batch)), [0, 0, 1, 1, 1, 1]);
    // THOR: episodes with a failed execution (t1's call errored) leave the episode loss.
    assert.deepEqual(Array.from(failedExecutionFilter().flag(batch)), [0, 1, 0, 0, 0, 0]);
    assert.deepEqual(Array.from(equalRewardGroupFilter(1).flag(batch)), [1, 1, 1, 1, 1, 1]);
  });

  test('applyFilters counts trajectories and action tokens per filter', () => {
    const { keep, report } = applyFilters(batch, [voidTurnFilter(), truncatedFilter(), maxTurnsFilter(4), equalRewardGroupFilter()]);
    assert.deepEqual(Array.from(keep), [1, 0, 0, 0, 0, 0]);
    assert.deepEqual(report.filters.map((f) => [f.name, f.flaggedTrajectories, f.removedTrajectories, f.removedTokens, f.removedIds]), [
      ['void-turn', 1, 1, tokens(1), ['t1']],
      ['truncated', 1, 1, tokens(4), ['t4']],
      ['max-turns', 1, 1, tokens(2), ['t2']],
      ['equal-reward-group', 4, 2, tokens(3) + tokens(5), ['t3', 't5']],
    ]);
    assert.equal(report.trajectories, 6);
    assert.equal(report.keptTrajectories, 1);
    assert.equal(report.removedTrajectories, 5);
    const all = Array.from(batch.actionTokenCounts).reduce((a, b) => a + b, 0);
    assert.equal(report.actionTokens, all);
    assert.equal(report.removedTokens, all - tokens(0));
    assert.deepEqual(report.removedBy, [null, 'void-turn', 'max-turns', 'equal-reward-group', 'truncated', 'equal-reward-group']);

    // The keep array is what feedbackMask consumes: only t0's action tokens stay in the loss.
    const { mask, actionTokens } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets, keep });
    assert.deepEqual(Array.from(actionTokens), [tokens(0), 0, 0, 0, 0, 0]);
    assert.equal(mask.reduce((a, b) => a + b, 0), tokens(0));
  });

  test('an upstream keep counts as already removed and is not modified', () => {
    const upstream = Uint8Array.of(0, 1, 1, 1, 1, 1);
    const { keep, report } = applyFilters(batch, [voidTurnFilter()], upstream);
    assert.deepEqual(Array.from(upstream), [0, 1, 1, 1, 1, 1]);
    assert.deepEqual(Array.from(keep), [0, 0, 1, 1, 1, 1]);
    assert.equal(report.filters[0]!.removedTrajectories, 1);
  });

  test('filtered episodes stay in the batch and in annotated logs', () => {
    const { report } = applyFilters(batch, [voidTurnFilter(), truncatedFilter()]);
    assert.equal(batch.trajectories.length, 6);
    const annotated = annotateFiltered(batch, report);
    assert.deepEqual(annotated.map((t) => t.metadata!.filteredBy), [null, 'void-turn', null, null, 'truncated', null]);
    assert.equal(episodes[1]!.metadata, undefined);
  });

  test('packing truncation is caught by the truncated filter', () => {
    const cut = packTrajectories(episodes.slice(0, 2), { tokenizer: charTokenizer, maxLength: 40 });
    assert.deepEqual(Array.from(truncatedFilter().flag(cut)), Array.from(cut.truncated));
    assert.ok(cut.truncated[0] === 1);
  });

  test('bad arguments name themselves', () => {
    assert.throws(() => maxTurnsFilter(-1), /maxTurns/);
    assert.throws(() => equalRewardGroupFilter(-1), /tolerance/);
    assert.throws(() => applyFilters(batch, [voidTurnFilter()], new Uint8Array(2)), /keep/);
    const noReward = packTrajectories([{ id: 'x', prompt: 'q', turns: [] }], { tokenizer: charTokenizer });
    assert.throws(() => equalRewardGroupFilter().flag(noReward), /reward/);
  });

  test('empty batches and empty turns do not throw', () => {
    const empty = packTrajectories([], { tokenizer: charTokenizer });
    const { keep, report } = applyFilters(empty, [voidTurnFilter(), truncatedFilter(), maxTurnsFilter(1), equalRewardGroupFilter()]);
    assert.equal(keep.length, 0);
    assert.equal(report.removedTrajectories, 0);
    const blank = packTrajectories([{ id: 'e', prompt: '', turns: [{ action: { text: '' } }], reward: 0 }], { tokenizer: charTokenizer });
    assert.deepEqual(Array.from(voidTurnFilter().flag(blank)), [1]);
  });
});
