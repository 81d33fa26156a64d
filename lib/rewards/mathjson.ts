/**
 * LaTeX → MathJSON through the Compute Engine's standalone LaTeX parser
 * (`@cortex-js/compute-engine/latex-syntax`, 0.4 MB of the package, loaded on first use),
 * and a numeric evaluator over the MathJSON heads that answers use. The evaluator is the
 * numeric fallback of the equivalence check: two expressions are compared at fixed
 * pseudo-random points of their free variables.
 */
import { createRequire } from 'node:module';

/** A MathJSON expression in its normalised array form. */
export type Expr = number | string | Expr[];

type LatexParse = (latex: string) => unknown;
let latexParse: LatexParse | undefined;

/**
 * Loads the LaTeX parser and builds its dictionary (about 50 ms, more on a busy machine). Verification calls it
 * before starting its clock, so the first call's time limit is not spent on loading.
 */
export function loadLatexParser(): LatexParse {
  if (latexParse === undefined) {
    latexParse = (createRequire(import.meta.url)('@cortex-js/compute-engine/latex-syntax') as { parse: LatexParse }).parse;
    // The first parse builds the LaTeX dictionary; do it here, outside any call's time limit.
    latexParse('\\frac{1}{2}');
  }
  return latexParse;
}

/** Parses LaTeX to normalised MathJSON; null when the parser reports an error anywhere. */
export function parseLatex(latex: string): Expr | null {
  let raw: unknown;
  try {
    raw = loadLatexParser()(latex);
  } catch {
    return null;
  }
  return normalise(raw, 0);
}

const MAX_DEPTH = 60;

/** `{num}`, `{sym}`, `{str}`, `{fn}` objects to plain numbers, strings and arrays; errors to null. */
function normalise(value: unknown, depth: number): Expr | null {
  if (depth > MAX_DEPTH) return null;
  if (typeof value === 'number') return value;
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    if (value[0] === 'Error') return null;
    const out: Expr[] = [];
    for (const item of value) {
      const n = normalise(item, depth + 1);
      if (n === null) return null;
      out.push(n);
    }
    return out;
  }
  if (value !== null && typeof value === 'object') {
    const object = value as { num?: string; sym?: string; str?: string; fn?: unknown };
    if (object.num !== undefined) return parseNumberLiteral(object.num);
    if (object.sym !== undefined) return object.sym;
    if (object.str !== undefined) return `'${object.str}'`;
    if (object.fn !== undefined) return normalise(object.fn, depth + 1);
  }
  return null;
}

/** `"1.5e3"`, `"0.(3)"` (repeating digits), `"+Infinity"`, `"NaN"`. */
function parseNumberLiteral(text: string): number {
  const repeating = /^([+-]?\d*)\.(\d*)\((\d+)\)$/.exec(text);
  if (repeating !== null) {
    const [, whole, fixed, cycle] = repeating as unknown as [string, string, string, string];
    const sign = whole.startsWith('-') ? -1 : 1;
    const base = Math.abs(Number(`${whole || '0'}.${fixed || '0'}`));
    const cycleValue = Number(cycle) / (10 ** cycle.length - 1) / 10 ** fixed.length;
    return sign * (base + cycleValue);
  }
  return Number(text);
}

/** The head of a function expression, or null for atoms. */
export function head(expr: Expr): string | null {
  return Array.isArray(expr) && typeof expr[0] === 'string' ? expr[0] : null;
}

/** Arguments of a function expression (empty for atoms). */
export function args(expr: Expr): Expr[] {
  return Array.isArray(expr) ? expr.slice(1) : [];
}

const CONSTANTS: Record<string, number> = {
  Pi: Math.PI, ExponentialE: Math.E, e: Math.E, PositiveInfinity: Infinity, NegativeInfinity: -Infinity,
  GoldenRatio: (1 + Math.sqrt(5)) / 2, Half: 0.5,
};

/** Symbols that are not free variables. */
export function isConstant(name: string): boolean {
  return name in CONSTANTS;
}

/** Thrown for a head the evaluator does not know: the caller falls back to structure. */
export class Unsupported extends Error {}

function factorial(n: number): number {
  if (!Number.isInteger(n) || n < 0) return NaN;
  if (n > 170) return Infinity;
  let result = 1;
  for (let k = 2; k <= n; k++) result *= k;
  return result;
}

function binomial(n: number, k: number): number {
  if (!Number.isInteger(n) || !Number.isInteger(k) || k < 0 || n < 0 || k > n) return k === 0 ? 1 : 0;
  let result = 1;
  for (let j = 1; j <= Math.min(k, n - k); j++) result = (result * (n - j + 1)) / j;
  return Math.round(result);
}

/** Real power with odd roots of negatives kept real ((-8)^(1/3) = -2). */
function power(base: number, exponent: number): number {
  if (base < 0 && !Number.isInteger(exponent)) {
    const inverse = 1 / exponent;
    if (Number.isInteger(Math.round(inverse)) && Math.abs(inverse - Math.round(inverse)) < 1e-12 && Math.round(inverse) % 2 !== 0) {
      return -Math.pow(-base, exponent);
    }
  }
  return Math.pow(base, exponent);
}

/** Whether `expr` (a product's operand) is an integer literal. */
function isIntegerLiteral(expr: Expr): boolean {
  return typeof expr === 'number' && Number.isInteger(expr) && expr >= 0;
}

/** `2\frac{1}{2}`: an integer juxtaposed with a fraction of integer literals is a mixed number. */
export function isMixedNumber(expr: Expr): boolean {
  if (head(expr) !== 'InvisibleOperator') return false;
  const [whole, fraction, ...rest] = args(expr);
  return rest.length === 0 && whole !== undefined && fraction !== undefined && isIntegerLiteral(whole)
    && head(fraction) === 'Divide' && args(fraction).every(isIntegerLiteral);
}

const UNARY: Record<string, (x: number) => number> = {
  Sqrt: Math.sqrt, Abs: Math.abs, Exp: Math.exp, Ln: Math.log, Lb: Math.log2, Lg: Math.log10,
  Sin: Math.sin, Cos: Math.cos, Tan: Math.tan, Cot: (x) => 1 / Math.tan(x), Sec: (x) => 1 / Math.cos(x), Csc: (x) => 1 / Math.sin(x),
  Arcsin: Math.asin, Arccos: Math.acos, Arctan: Math.atan, Sinh: Math.sinh, Cosh: Math.cosh, Tanh: Math.tanh,
  Floor: Math.floor, Ceil: Math.ceil, Factorial: factorial, Negate: (x) => -x, Degrees: (x) => x,
  Delimiter: (x) => x, Hold: (x) => x, Square: (x) => x * x,
};

/**
 * Value of `expr` with free symbols from `scope`. Throws Unsupported for unknown heads and
 * symbols; NaN where the value is undefined (a root of a negative number).
 */
export function evaluate(expr: Expr, scope: Readonly<Record<string, number>>): number {
  if (typeof expr === 'number') return expr;
  if (typeof expr === 'string') {
    const constant = CONSTANTS[expr];
    if (constant !== undefined) return constant;
    const value = scope[expr];
    if (value === undefined) throw new Unsupported(expr);
    return value;
  }
  const name = head(expr);
  const operands = args(expr);
  if (name === null) throw new Unsupported('array head');
  const unary = UNARY[name];
  if (unary !== undefined && operands.length === 1) return unary(evaluate(operands[0]!, scope));
  const values = () => operands.map((operand) => evaluate(operand, scope));
  switch (name) {
    case 'Add':
      return values().reduce((a, b) => a + b, 0);
    case 'Subtract': {
      const [a, b] = values();
      return operands.length === 2 ? a! - b! : NaN;
    }
    case 'InvisibleOperator':
      if (isMixedNumber(expr)) return values().reduce((a, b) => a + b, 0);
      return values().reduce((a, b) => a * b, 1);
    case 'Multiply':
      return values().reduce((a, b) => a * b, 1);
    case 'Divide':
    case 'Rational': {
      const [a, b] = values();
      return operands.length === 2 ? a! / b! : NaN;
    }
    case 'Power': {
      const [a, b] = values();
      return operands.length === 2 ? power(a!, b!) : NaN;
    }
    case 'Root': {
      const [a, n] = values();
      return operands.length === 2 ? power(a!, 1 / n!) : NaN;
    }
    case 'Log': {
      const [a, base] = values();
      if (operands.length === 1) return Math.log10(a!);
      return operands.length === 2 ? Math.log(a!) / Math.log(base!) : NaN;
    }
    case 'Binomial':
    case 'Choose': {
      const [n, k] = values();
      return operands.length === 2 ? binomial(n!, k!) : NaN;
    }
    case 'Max':
      return Math.max(...values());
    case 'Min':
      return Math.min(...values());
    case 'GCD':
    case 'LCM': {
      const integers = values();
      if (integers.length === 0 || !integers.every((n) => Number.isSafeInteger(n))) return NaN;
      const gcd = (a: number, b: number): number => (b === 0 ? Math.abs(a) : gcd(b, a % b));
      return integers.reduce((a, b) => (name === 'GCD' ? gcd(a, b) : Math.abs(a * b) / (gcd(a, b) || 1)));
    }
    case 'Mod': {
      const [a, b] = values();
      return operands.length === 2 ? a! - b! * Math.floor(a! / b!) : NaN;
    }
    default:
      throw new Unsupported(name);
  }
}

/** Free symbols of `expr` (callee names excluded), at most `limit` of them (more: null). */
export function freeSymbols(expr: Expr, limit = 6): string[] | null {
  const names = new Set<string>();
  const visit = (node: Expr): boolean => {
    if (typeof node === 'string') {
      if (!isConstant(node) && !node.startsWith("'")) names.add(node);
      return names.size <= limit;
    }
    if (typeof node === 'number') return true;
    return args(node).every(visit);
  };
  return visit(expr) ? [...names].sort() : null;
}
