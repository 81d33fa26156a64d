/**
 * The demo's tool: an exact integer calculator over + - * / and parentheses. Model
 * output is parsed, never evaluated as code; arithmetic uses BigInt so products are
 * exact at any size. Division must be exact (the tool reports a remainder as an error).
 */

export type CalculatorResult = { ok: true; value: bigint } | { ok: false; error: string };

/** What references resolve to: #1, #2, #3 are the question's numbers, #r the last tool result. */
export interface ReferenceContext {
  quantities: readonly string[];
  lastResult?: string;
}

/** Replaces #1..#9 and #r in `text` by their values; an unknown reference is an error. */
export function resolveReferences(
  text: string,
  context: ReferenceContext,
): { ok: true; value: string } | { ok: false; error: string } {
  let error: string | undefined;
  const value = text.replace(/#([0-9r])/g, (reference, name: string) => {
    const bound = name === 'r' ? context.lastResult : context.quantities[Number(name) - 1];
    if (bound === undefined) error ??= `unknown reference ${reference}`;
    return bound ?? '';
  });
  return error === undefined ? { ok: true, value } : { ok: false, error };
}

const MAX_LENGTH = 64;

/** Evaluates `expression` (digits, + - * /, parentheses, spaces). Never throws. */
export function calculate(expression: string): CalculatorResult {
  if (expression.length === 0) return { ok: false, error: 'empty expression' };
  if (expression.length > MAX_LENGTH) return { ok: false, error: 'expression too long' };
  const tokens = expression.match(/\d+|[+\-*/()]|\S/g) ?? [];
  let position = 0;
  const peek = () => tokens[position];
  const fail = (error: string): never => {
    throw new SyntaxError(error);
  };

  // expression := term (('+' | '-') term)*; term := factor (('*' | '/') factor)*;
  // factor := number | '(' expression ')' | '-' factor
  const expressionRule = (): bigint => {
    let value = term();
    while (peek() === '+' || peek() === '-') {
      const op = tokens[position++];
      const right = term();
      value = op === '+' ? value + right : value - right;
    }
    return value;
  };
  const term = (): bigint => {
    let value = factor();
    while (peek() === '*' || peek() === '/') {
      const op = tokens[position++];
      const right = factor();
      if (op === '*') value *= right;
      else {
        if (right === 0n) fail('division by zero');
        if (value % right !== 0n) fail('inexact division');
        value /= right;
      }
    }
    return value;
  };
  const factor = (): bigint => {
    const token = tokens[position++];
    if (token === undefined) return fail('unexpected end of expression');
    if (/^\d+$/.test(token)) return BigInt(token);
    if (token === '-') return -factor();
    if (token === '(') {
      const value = expressionRule();
      if (tokens[position++] !== ')') fail('missing )');
      return value;
    }
    return fail(`unexpected '${token}'`);
  };

  try {
    const value = expressionRule();
    if (position !== tokens.length) fail(`unexpected '${tokens[position]}'`);
    return { ok: true, value };
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}
