import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { answersMatch, checkFormat, extractAnswer, qaExactMatch, qaF1 } from '../lib/sdk.js';

interface AnswerCase { prediction: string; gold: string; expected: boolean }
const cases = JSON.parse(readFileSync(new URL('../../test/data/answer_cases.json', import.meta.url), 'utf8')) as AnswerCase[];

describe('extractAnswer', () => {
  const table: [string, string | null][] = [
    ['so \\boxed{42}.', '42'],
    ['\\boxed{1} then \\boxed{2}', '2'],
    ['\\boxed{\\frac{1}{\\sqrt{2}}}', '\\frac{1}{\\sqrt{2}}'],
    ['\\boxed{\\{1, 2\\}}', '\\{1, 2\\}'],
    ['\\boxed{3} and a broken \\boxed{4', '3'],
    ['\\fbox{x+1}', 'x+1'],
    ['$\\boxed 7$', '7'],
    ['final_answer("Paris")', 'Paris'],
    ["final_answer(answer='Paris')", 'Paris'],
    ['final_answer(2**10)', '2**10'],
    ['The answer is 3.5.', '3.5'],
    ['The answer is $\\frac{1}{2}$. Done.', '$\\frac{1}{2}$'],
    ['Thus, the final answer is: 12\nVerification follows.', '12'],
    ['Answer: Paris', 'Paris'],
    ['the answer is \\boxed{9}', '9'],
    ['no answer here', null],
    ['\\boxed{}', null],
    ['\\boxed{', null],
    ['', null],
  ];
  for (const [text, expected] of table) {
    test(JSON.stringify(text), () => assert.equal(extractAnswer(text), expected));
  }
});

describe('answersMatch against the answer table', () => {
  test(`the table has at least 150 cases (${cases.length})`, () => assert.ok(cases.length >= 150));
  for (const [index, c] of cases.entries()) {
    test(`#${index} ${JSON.stringify(c.prediction).slice(0, 60)} vs ${JSON.stringify(c.gold)} -> ${c.expected}`, () => {
      assert.equal(answersMatch(c.prediction, c.gold), c.expected);
    });
  }
});

describe('QA exact match and F1 (SQuAD normalisation)', () => {
  test('exact match normalises case, punctuation, articles and spaces', () => {
    assert.equal(qaExactMatch('The Eiffel Tower!', 'eiffel tower'), 1);
    assert.equal(qaExactMatch('An apple', 'apple'), 1);
    assert.equal(qaExactMatch('Paris, France', 'Paris'), 0);
    assert.equal(qaExactMatch('The answer is Paris.', ['London', 'paris']), 1);
    assert.equal(qaExactMatch('\\boxed{Barack Obama}', 'barack obama'), 1);
  });
  test('F1 is the harmonic mean of token precision and recall', () => {
    assert.equal(qaF1('Barack Obama', 'Barack Obama'), 1);
    // prediction {barack, hussein, obama} vs gold {barack, obama}: P = 2/3, R = 1, F1 = 0.8
    assert.ok(Math.abs(qaF1('Barack Hussein Obama', 'Barack Obama') - 0.8) < 1e-12);
    assert.equal(qaF1('Paris', 'London'), 0);
    // articles drop out: {cat} vs {cat, cat}: P = 1, R = 1/2, F1 = 2/3
    assert.ok(Math.abs(qaF1('the the cat', 'cat cat') - 2 / 3) < 1e-12);
    assert.ok(Math.abs(qaF1('new york city', ['york', 'New York City']) - 1) < 1e-12);
    assert.equal(qaF1('', ''), 1);
    assert.equal(qaF1('a', 'the'), 1); // both normalise to empty
    assert.equal(qaF1('', 'x'), 0);
  });
});

describe('checkFormat', () => {
  test('fences, think tags and the answer', () => {
    assert.equal(checkFormat('<think>x</think> \\boxed{1}', { requireThink: true, answer: 'boxed' }), true);
    assert.equal(checkFormat('\\boxed{1}', { requireThink: true }), false);
    assert.equal(checkFormat('```python\nx\n``` \\boxed{1}'), true);
    assert.equal(checkFormat('```python\nx \\boxed{1}'), false);
    assert.equal(checkFormat('</think><think> \\boxed{1}'), false);
    assert.equal(checkFormat('The answer is 4', { answer: 'boxed' }), false);
    assert.equal(checkFormat('\\boxed{4 final_answer(4)', { answer: 'boxed' }), false);
    assert.equal(checkFormat('The answer is 4'), true);
    assert.equal(checkFormat('nothing'), false);
  });
});

describe('hostile inputs never throw and stay fast', () => {
  const megabyte = 'x'.repeat(1 << 20);
  const hostile = [
    '', '\\boxed{'.repeat(100_000), '}'.repeat(1 << 20), '{'.repeat(1 << 20), megabyte,
    `\\boxed{${'1'.repeat(1 << 20)}}`, `\\boxed{${'('.repeat(5000)}1${')'.repeat(5000)}}`,
    '\uD800\uDC00\uD800', 'The answer is '.repeat(50_000), '$'.repeat(1 << 20),
    '\\frac{'.repeat(10_000), '\\sqrt'.repeat(10_000), '9^'.repeat(10_000) + '9', '\\boxed{10^{10^{10^{10}}}}',
    'final_answer('.repeat(50_000), '```python\n'.repeat(50_000), '\\begin{pmatrix}' + '1&'.repeat(10_000),
    '\\boxed{' + 'a'.repeat(100_000) + '}', 'The answer is ' + '1,'.repeat(100_000),
    '\\boxed{x = ' + 'y = '.repeat(10_000) + '}', `\\boxed{${'\\{'.repeat(1000)}}}`,
    // Shapes that make backtracking regexes blow up.
    `\\boxed{1 ${'a'.repeat(300)}!}`, `\\boxed{1 ${'ab '.repeat(120)}!}`, `The answer is ${';'.repeat(20_000)}x`,
    `${'.'.repeat(1 << 20)}x`, `\\boxed{${'2'.repeat(390)}\\frac{1}{2}}`, `\\boxed{${'1 '.repeat(190)}}`,
  ];
  for (const [index, text] of hostile.entries()) {
    test(`hostile #${index} (${text.length} chars)`, () => {
      const start = performance.now();
      assert.doesNotThrow(() => {
        extractAnswer(text);
        answersMatch(text, '42');
        answersMatch('42', text);
        answersMatch(text, text);
        qaExactMatch(text, 'x');
        qaF1(text, text.slice(0, 1000));
        checkFormat(text);
      });
      assert.ok(performance.now() - start < 3_000, `took ${performance.now() - start} ms`);
    });
  }
  test('non-strings give false / null / 0', () => {
    for (const value of [null, undefined, 42, {}, []] as unknown as string[]) {
      assert.equal(extractAnswer(value), null);
      assert.equal(answersMatch(value, '1'), false);
      assert.equal(answersMatch('1', value), false);
      assert.equal(qaExactMatch(value, '1'), 0);
      assert.equal(qaF1(value, '1'), 0);
      assert.equal(checkFormat(value), false);
    }
  });
});
