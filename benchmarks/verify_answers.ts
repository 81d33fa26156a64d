/**
 * Answer-verification throughput: verdicts per second of `verifyAnswer` on one thread and
 * of `verifyAnswers` in worker threads, on a mixed set of responses (reasoning text ending
 * in a boxed, tagged or stated answer; numbers, expressions, relations, sets, matrices,
 * text; groups of 8 responses per problem, each right or wrong at random), and the worst time of a pathological input against the time limit.
 *
 *   node dist/benchmarks/verify_answers.js [--quick] [--threads N] [--json] [--verbose]
 *
 * Not part of `tirl bench`: that harness measures kernels against bytes moved and peers
 * (PyTorch, memory copy), which a string checker has none of.
 */
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { verifyAnswer, verifyAnswers, type BatchItem } from '../lib/index.js';
import { Rng } from './data.js';

/** [answer written by the model, gold, a wrong answer] for problem number n: one per kind of answer. */
const KINDS: ((n: number) => [string, string, string])[] = [
  (n) => [`${n}`, `${n}`, `${n + 1}`],
  (n) => [`${n},000`, `${n}000`, `${n}00`],
  (n) => [`\\frac{${n}}{4}`, `${n / 4}`, `\\frac{${n + 1}}{4}`],
  (n) => [`${n}\\frac{1}{2}`, `\\frac{${2 * n + 1}}{2}`, `${n}\\frac{1}{3}`],
  (n) => [`${n}\\%`, `\\frac{${n}}{100}`, `${n + 1}\\%`],
  (n) => [`\\$${n}.50`, `${n}.5`, `\\$${n}.05`],
  (n) => [`${n}\\text{ cm}`, `${n}`, `${n + 2}\\text{ cm}`],
  (n) => [`${n}\\sqrt{2}`, `\\sqrt{${2 * n * n}}`, `${n}\\sqrt{3}`],
  (n) => [`\\frac{\\pi}{${n}}`, `\\frac{\\pi}{${n}}`, `\\frac{2\\pi}{${n}}`],
  (n) => [`${n}.5\\times 10^{3}`, `${n}500`, `${n}.5\\times 10^{2}`],
  (n) => [`(x+${n})^2`, `x^2+${2 * n}x+${n * n}`, `x^2+${n * n}`],
  (n) => [`${n}\\tan^2 x + ${n}`, `${n}\\sec^2 x`, `${n}\\tan^2 x`],
  (n) => [`\\frac{n(n+${n})}{2}`, `\\frac{n^2+${n}n}{2}`, `\\frac{n(n-${n})}{2}`],
  (n) => [`x = ${n}`, `${n}`, `x = -${n}`],
  (n) => [`y = ${n}x + 1`, `${n}x - y + 1 = 0`, `y = ${n}x - 1`],
  (n) => [`-${n} \\le x \\le 7`, `[-${n}, 7]`, `-${n} < x \\le 7`],
  (n) => [`\\{1, ${n + 1}\\}`, `\\{${n + 1}, 1\\}`, `\\{1, ${n + 2}\\}`],
  (n) => [`(${n}, 2)`, `(${n}, 2)`, `(2, ${n})`],
  (n) => [`(-\\infty, ${n}) \\cup (${n + 2}, \\infty)`, `(${n + 2}, \\infty) \\cup (-\\infty, ${n})`, `(-\\infty, ${n}] \\cup (${n + 2}, \\infty)`],
  (n) => [`\\begin{pmatrix}${n}&2\\\\3&4\\end{pmatrix}`, `\\begin{bmatrix}${n}&2\\\\3&4\\end{bmatrix}`, `\\begin{pmatrix}${n}&2\\\\4&3\\end{pmatrix}`],
  (n) => [`\\text{(${'ABCDE'[n % 5]})}`, `${'ABCDE'[n % 5]}`, `\\text{(${'ABCDE'[(n + 1) % 5]})}`],
  (n) => (n % 2 === 0 ? ['\\text{Yes}', 'yes', '\\text{No}'] : ['\\text{No}', 'no', '\\text{Yes}']),
];

/** Responses per problem (a GRPO group): each gold is verified this many times. */
const GROUP = 8;

const FILLER = 'We first consider the constraints, then simplify the expression step by step and check the edge cases. ';

/** `count` responses, GROUP per problem: reasoning of 300–1,500 characters, then the answer boxed, tagged or stated. */
function mixedSet(count: number): (BatchItem & { expected: boolean })[] {
  const rng = new Rng(19);
  const items: (BatchItem & { expected: boolean })[] = [];
  for (let i = 0; i < count; i++) {
    const problem = Math.floor(i / GROUP);
    const [right, gold, wrong] = KINDS[problem % KINDS.length]!(3 + Math.floor(problem / KINDS.length));
    const expected = rng.next() < 0.5;
    const answer = expected ? right : wrong;
    const reasoning = FILLER.repeat(3 + Math.floor(rng.next() * 12));
    const style = i % 3;
    const response = style === 0 ? `${reasoning}So the answer is $\\boxed{${answer}}$.`
      : style === 1 ? `<think>${reasoning}</think><answer>${answer}</answer>` : `${reasoning}\n\nFinal answer: $${answer}$`;
    items.push({ response, gold, expected });
  }
  return items;
}

const PATHOLOGICAL = [
  `\\boxed{${'\\frac{'.repeat(300)}}`, `\\boxed{${'('.repeat(290)}x${')'.repeat(290)}}`, `\\boxed{${'x^'.repeat(250)}2}`,
  `\\boxed{${'\\sqrt{'.repeat(190)}2${'}'.repeat(190)}}`, `\\boxed{${Array.from({ length: 70 }, (_, k) => `x_{${k}}`).join('+')}}`,
  `\\boxed{\\{${'1,'.repeat(290)}1\\}}`, `\\boxed{\\begin{pmatrix}${'x&'.repeat(280)}1\\end{pmatrix}}`, '\\boxed{'.repeat(100_000),
  `\\boxed{${'9^{'.repeat(120)}9${'}'.repeat(120)}}`, 'The answer is '.repeat(50_000), `${'$'.repeat(1 << 20)}`,
];

function cpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e3;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean' }, threads: { type: 'string' }, json: { type: 'boolean' }, verbose: { type: 'boolean' } } });
  const count = values.quick ? 2_000 : 20_000;
  const threads = values.threads === undefined ? Math.min(8, Math.max(1, availableParallelism() - 1)) : Number(values.threads);
  const items = mixedSet(count);
  // Warm-up: parser load and JIT.
  for (const item of items.slice(0, 300)) verifyAnswer(item.response, item.gold);

  const wall0 = performance.now();
  const cpu0 = cpuMs();
  let correct = 0;
  let mistaken = 0;
  for (const item of items) {
    const verdict = verifyAnswer(item.response, item.gold).correct;
    if (verdict) correct++;
    if (verdict !== item.expected) {
      mistaken++;
      if (values.verbose) console.error('against the label:', JSON.stringify(item.response.slice(-120)), JSON.stringify(item.gold), item.expected);
    }
  }
  const singleWall = (performance.now() - wall0) / 1e3;
  const singleCpu = (cpuMs() - cpu0) / 1e3;

  const batch0 = performance.now();
  const verdicts = await verifyAnswers(items, { threads });
  const batchWall = (performance.now() - batch0) / 1e3;
  const batchCorrect = verdicts.filter((v) => v.correct).length;

  let worstMs = 0;
  for (const response of PATHOLOGICAL) {
    for (const gold of ['42', 'x+1', response.slice(0, 500)]) {
      const start = performance.now();
      verifyAnswer(response, gold);
      worstMs = Math.max(worstMs, performance.now() - start);
    }
  }

  const report = {
    items: count,
    meanResponseChars: Math.round(items.reduce((sum, item) => sum + item.response.length, 0) / count),
    correct,
    mistaken,
    singleThread: { verdictsPerSecondWall: Math.round(count / singleWall), verdictsPerSecondCpu: Math.round(count / singleCpu) },
    batch: { threads, verdictsPerSecondWall: Math.round(count / batchWall), sameVerdicts: batchCorrect === correct },
    pathological: { inputs: PATHOLOGICAL.length * 3, worstMs: Math.round(worstMs * 10) / 10, timeLimitMs: 1000 },
    cores: availableParallelism(),
  };
  if (values.json) {
    console.log(JSON.stringify(report, null, 2));
    return;
  }
  console.log(`verifyAnswer, ${count} mixed responses (mean ${report.meanResponseChars} chars, ${KINDS.length} kinds, groups of ${GROUP}, ${correct} correct, ${mistaken} verdicts against the set's labels)`);
  console.log(`  one thread:       ${report.singleThread.verdictsPerSecondWall} verdicts/s wall, ${report.singleThread.verdictsPerSecondCpu} verdicts/s per CPU second`);
  console.log(`  verifyAnswers:    ${report.batch.verdictsPerSecondWall} verdicts/s wall on ${threads} worker thread(s) (${report.cores} cores; same verdicts: ${report.batch.sameVerdicts})`);
  console.log(`  pathological:     worst ${report.pathological.worstMs} ms of ${report.pathological.inputs} calls (time limit ${report.pathological.timeLimitMs} ms)`);
}

await main();
