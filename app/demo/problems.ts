/**
 * Arithmetic word problems whose answers need the calculator: products of multi-digit
 * numbers, multi-step expressions and unit conversions. Each problem carries the
 * expression a correct tool call evaluates and its exact answer.
 */
import { calculate, resolveReferences } from './calculator.js';
import { SeededRandom } from '../../lib/index.js';

export interface Problem {
  /** The question, in the demo vocabulary. */
  text: string;
  /** The numbers of the question in order: what the tool binds to #1, #2, #3. */
  quantities: string[];
  /** A tool call that solves it, over the references #1, #2, #3. */
  expression: string;
  /** The exact answer. */
  answer: string;
  kind: string;
}

type Template = (rng: SeededRandom) => { text: string; expression: string; kind: string };

const UNITS: ReadonlyArray<[string, string, number]> = [
  ['m', 'km', 1000],
  ['g', 'kg', 1000],
  ['minutes', 'hours', 60],
  ['seconds', 'hours', 3600],
];

const TEMPLATES: readonly Template[] = [
  (rng) => {
    const a = rng.between(100, 999);
    const b = rng.between(10, 99);
    return { text: `what is ${a} times ${b} ?`, expression: '#1*#2', kind: 'product' };
  },
  (rng) => {
    const a = rng.between(10, 999);
    const b = rng.between(10, 99);
    const c = rng.between(10, 99);
    return { text: `what is ${a} plus ${b} times ${c} ?`, expression: '#1+#2*#3', kind: 'multi-step' };
  },
  (rng) => {
    const a = rng.between(10, 99);
    const b = rng.between(10, 99);
    const c = rng.between(10, 999);
    return { text: `what is ${a} times ${b} minus ${c} ?`, expression: '#1*#2-#3', kind: 'multi-step' };
  },
  (rng) => {
    const a = rng.between(12, 99);
    const b = rng.between(12, 99);
    return { text: `a box holds ${a} items . how many items in ${b} boxes ?`, expression: '#1*#2', kind: 'word' };
  },
  (rng) => {
    const [small, large, factor] = rng.pick(UNITS);
    const a = rng.between(2, 999);
    return { text: `how many ${small} in ${a} ${large} ?`, expression: `#1*${factor}`, kind: 'conversion' };
  },
];

/** Draws one problem from `rng`. */
export function drawProblem(rng: SeededRandom): Problem {
  const { text, expression, kind } = rng.pick(TEMPLATES)(rng);
  const quantities = text.match(/\d+/g) ?? [];
  const resolved = resolveReferences(expression, { quantities });
  const result = resolved.ok ? calculate(resolved.value) : resolved;
  if (!result.ok) throw new Error(`demo problem '${expression}' does not evaluate: ${result.error}`);
  return { text, quantities, expression, answer: result.value.toString(), kind };
}

/** Streams of problems for each split, from disjoint seeds; held-out texts never reach training. */
export class ProblemSplits {
  readonly validation: Problem[];
  readonly test: Problem[];
  private readonly train: SeededRandom;
  private readonly heldOut: Set<string>;

  constructor(seed: number, { validationSize = 64, testSize = 200 } = {}) {
    this.test = drawUnique(new SeededRandom(seed * 3 + 2), testSize, new Set());
    this.validation = drawUnique(new SeededRandom(seed * 3 + 1), validationSize, new Set(this.test.map((p) => p.text)));
    this.heldOut = new Set([...this.test, ...this.validation].map((p) => p.text));
    this.train = new SeededRandom(seed * 3);
  }

  /** The next training problem (never one of the validation or test problems). */
  nextTrain(): Problem {
    for (;;) {
      const problem = drawProblem(this.train);
      if (!this.heldOut.has(problem.text)) return problem;
    }
  }
}

function drawUnique(rng: SeededRandom, count: number, exclude: Set<string>): Problem[] {
  const problems: Problem[] = [];
  const seen = new Set(exclude);
  while (problems.length < count) {
    const problem = drawProblem(rng);
    if (seen.has(problem.text)) continue;
    seen.add(problem.text);
    problems.push(problem);
  }
  return problems;
}
