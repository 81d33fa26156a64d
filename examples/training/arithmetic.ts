/**
 * A scripted tool-use task small enough to train in seconds: multiply two numbers with a
 * calculator tool, then answer. Each action is one token standing for a scripted turn
 * (run the calculator, answer with its result, write broken code, think aloud, guess),
 * so the policy only has to learn WHICH turn to take when: a bigram model in tfjs.
 */
import * as tf from '@tensorflow/tfjs';

import type { Environment, StepResult, Tool } from '../../lib/training/environment.js';
import { TfjsPolicy, type TfjsTokenizer } from '../../lib/training/tfjs.js';

/** A problem: compute a * b. */
export interface Product {
  a: number;
  b: number;
}

/** Token ids; actions decode to the scripted texts below, context tokens to ''. */
export const Token = {
  prompt: 0,
  code: 1,
  answer: 2,
  brokenCode: 3,
  think: 4,
  guess: 5,
  toolOk: 6,
  toolError: 7,
} as const;
export const VOCAB_SIZE = 8;

const TEXT: Record<number, string> = {
  [Token.code]: '```python\nprint(A * B)\n```',
  [Token.answer]: 'The answer is \\boxed{RESULT}',
  [Token.brokenCode]: '```python\nprint(A * B\n```',
  [Token.think]: 'Let me think about this.',
  [Token.guess]: '\\boxed{0}',
};

/** Prompt and feedback each become one token; actions decode to their scripted text. */
export const tokenizer: TfjsTokenizer = {
  encode(text, role) {
    if (role === 'prompt') return Int32Array.of(Token.prompt);
    return Int32Array.of(text.startsWith('Error') ? Token.toolError : Token.toolOk);
  },
  decode(tokens) {
    return Array.from(tokens, (t) => TEXT[t] ?? '').join('');
  },
};

/**
 * A calculator: evaluates `print(<expression>)` over integers with + - * and parentheses.
 * A malformed program is an error, as a Python sandbox would report it.
 */
export const calculator: Tool = {
  name: 'python',
  description: 'Runs print(<arithmetic expression>) and returns what it prints.',
  async run(code) {
    const match = /^print\((.*)\)$/s.exec(code.trim());
    const value = match ? evaluate(match[1]) : undefined;
    return value === undefined
      ? { status: 'error', output: 'Error: SyntaxError: invalid syntax' }
      : { status: 'success', output: String(value) };
  },
};

/** Integer arithmetic by recursive descent; undefined for anything malformed. */
function evaluate(expression: string): number | undefined {
  const tokens = expression.match(/\d+|[-+*()]|\S/g) ?? [];
  let position = 0;
  const peek = () => tokens[position];
  const factor = (): number | undefined => {
    const token = tokens[position++];
    if (token === undefined) return undefined;
    if (/^\d+$/.test(token)) return Number(token);
    if (token === '-') {
      const inner = factor();
      return inner === undefined ? undefined : -inner;
    }
    if (token !== '(') return undefined;
    const inner = sum();
    return tokens[position++] === ')' ? inner : undefined;
  };
  const product = (): number | undefined => {
    let value = factor();
    while (value !== undefined && peek() === '*') {
      position++;
      const right = factor();
      value = right === undefined ? undefined : value * right;
    }
    return value;
  };
  const sum = (): number | undefined => {
    let value = product();
    while (value !== undefined && (peek() === '+' || peek() === '-')) {
      const sign = tokens[position++] === '+' ? 1 : -1;
      const right = product();
      value = right === undefined ? undefined : value + sign * right;
    }
    return value;
  };
  const value = sum();
  return position === tokens.length ? value : undefined;
}

/**
 * The episode: code blocks run in the calculator with A and B bound to the problem's
 * numbers; a `\boxed{}` answer ends the episode (RESULT stands for the last tool output);
 * anything else gets a reminder. Reward 1 for the right product, else 0.
 */
export class ProductEnvironment implements Environment<Product> {
  private problem: Product = { a: 0, b: 0 };
  private lastOutput = '';

  reset(problem: Product): string {
    this.problem = problem;
    this.lastOutput = '';
    return `Compute ${problem.a} * ${problem.b}. A = ${problem.a}, B = ${problem.b}.`;
  }

  async step(action: string): Promise<StepResult> {
    const code = /```python\n([\s\S]*?)```/.exec(action);
    if (code) {
      const program = code[1].replaceAll('A', String(this.problem.a)).replaceAll('B', String(this.problem.b));
      const { status, output } = await calculator.run(program);
      if (status === 'success') this.lastOutput = output;
      return { feedback: output, tool: { name: calculator.name, status }, reward: 0, done: false };
    }
    const answer = /\\boxed\{([^}]*)\}/.exec(action);
    if (answer) {
      const given = answer[1].replace('RESULT', this.lastOutput || 'RESULT');
      const success = given === String(this.problem.a * this.problem.b);
      return { feedback: '', reward: success ? 1 : 0, done: true, success };
    }
    return { feedback: 'Error: write a python code block or a \\boxed{} answer.', reward: 0, done: false };
  }
}

/** Problems with operands drawn from a seeded sequence. */
export function products(count: number, seed: number): Product[] {
  let state = seed >>> 0;
  const next = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0);
  return Array.from({ length: count }, () => ({ a: 100 + (next() % 900), b: 100 + (next() % 900) }));
}

/**
 * A bigram policy: logits of the next token are one row of a [V, V] table picked by the
 * current token (a one-hot matmul, so its gradient exists on every tfjs backend). Context
 * tokens start unlikely as actions.
 */
export function createBigramPolicy(
  options: { optimizer?: tf.Optimizer; learningRate?: number; name?: string } = {},
): TfjsPolicy {
  const initial = new Float32Array(VOCAB_SIZE * VOCAB_SIZE);
  for (let row = 0; row < VOCAB_SIZE; row++) {
    for (const context of [Token.prompt, Token.toolOk, Token.toolError]) initial[row * VOCAB_SIZE + context] = -4;
  }
  // Checkpoints find variables by name: keep it stable across processes.
  const table = tf.variable(tf.tensor2d(initial, [VOCAB_SIZE, VOCAB_SIZE]), true, options.name ?? 'bigram');
  return new TfjsPolicy({
    model: (tokens) => {
      const [rows, width] = tokens.shape;
      const oneHot = tf.cast(tf.oneHot(tf.reshape(tokens, [-1]), VOCAB_SIZE), 'float32');
      return tf.reshape(tf.matMul(oneHot, table), [rows, width, VOCAB_SIZE]) as tf.Tensor3D;
    },
    variables: [table],
    optimizer: options.optimizer ?? tf.train.adam(options.learningRate ?? 0.1),
    tokenizer,
  });
}
