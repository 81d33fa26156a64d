/**
 * Equivalence of two extracted answers: are they the same mathematical object? An answer
 * is cleaned as text (units, currencies, separators, percent, `\text{}`), parsed from LaTeX
 * to MathJSON by the Compute Engine, read as one of a few shapes (number or expression,
 * relation, tuple, set, interval, union, matrix, text) and compared shape by shape; scalars
 * are compared at fixed pseudo-random points of their free variables. Deterministic, and
 * bounded: every loop is capped and the caller's deadline is checked between points.
 */
import { args, evaluate, freeSymbols, head, isConstant, parseLatex, Unsupported, type Expr } from './mathjson.js';

/** Options of the equivalence check (see `VerifyOptions` for the public description). */
export interface EquivalenceOptions {
  /** Absolute tolerance when a side is a decimal (default 1e-6). */
  absoluteTolerance: number;
  /** Relative tolerance when a side is a decimal (default 1e-9). */
  relativeTolerance: number;
  /** Whether `50%` may equal `0.5` (default true). `50%` always equals `50`. */
  percentAsFraction: boolean;
  /** `performance.now()` after which the comparison gives up. */
  deadline: number;
  /** Set internally when either answer is written with a decimal point ("101.0"): the tolerances apply. */
  approximate?: boolean;
}

/** Why an equivalence check ended. */
export type EquivalenceReason =
  | 'identical' | 'normalized' | 'text' | 'choice' | 'number' | 'expression' | 'percent' | 'relation' | 'assignment'
  | 'tuple' | 'set' | 'interval' | 'matrix' | 'no-parse' | 'timeout' | 'different';

/** Answers longer than this are compared as text only. */
const MAX_MATH_CHARS = 600;
/** Most elements of a tuple, set or matrix compared. */
const MAX_ITEMS = 64;

/** Timeout signal (internal, caught by `compareAnswers`). */
class Timeout extends Error {}

// ---------------------------------------------------------------- text cleaning

const TEXT_COMMANDS = /\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mathsf|mbox|hbox|boldsymbol)\s*\{([^{}]*)\}/g;

/** Unit and count words dropped after a number ("5 cm", "12 dollars", "3 apples"). */
const UNIT_WORDS = new Set((
  'mm cm dm m km meter meters metre metres inch inches in ft feet foot yd yard yards mi mile miles nm '
  + 'mg g kg gram grams kilogram kilograms lb lbs pound pounds oz ounce ounces ton tons tonnes '
  + 'ms s sec secs second seconds min mins minute minutes h hr hrs hour hours day days week weeks month months year years '
  + 'ml l liter liters litre litres gallon gallons cup cups '
  + 'dollar dollars cent cents euro euros usd eur gbp yen rupees '
  + 'deg degree degrees radian radians rad unit units sq square cubic kmh km/h mph m/s '
  + 'people persons students children apples marbles books cookies ways times points items balls cars pages '
  + 'hundred thousand'
).split(' '));

const CURRENCY = /^(?:\\\$|\$|€|£|¥|₹|usd|eur|us\$)\s*/i;
const PERCENT = /\s*(?:\\%|%|\\text\{\s*%\s*\}|\s(?:percent|per cent|pct|percentage(?: points)?))\s*$/i;

/** A cleaned answer. */
interface Cleaned {
  text: string;
  percent: boolean;
}

/** Spacing, delimiters, LaTeX variants and units removed; percent recorded. */
function clean(raw: string): Cleaned {
  let text = raw.trim();
  text = text.replace(/^\$+|\$+$/g, '').replace(/^\\\[|\\\]$/g, '').replace(/^\\\(|\\\)$/g, '').trim();
  // Unicode math to LaTeX.
  text = text.replace(/−/g, '-').replace(/×/g, '\\times ').replace(/·/g, '\\cdot ').replace(/≤/g, '\\le ').replace(/≥/g, '\\ge ')
    .replace(/≠/g, '\\ne ').replace(/∞/g, '\\infty ').replace(/π/g, '\\pi ').replace(/√/g, '\\sqrt').replace(/∅/g, '\\emptyset ')
    .replace(/²/g, '^2').replace(/³/g, '^3').replace(/∈/g, '\\in ').replace(/∪/g, '\\cup ');
  // Thousands separators in LaTeX spacing: 1\,000, 1{,}000, 1\ 000.
  text = text.replace(/(\d)(?:\\,|\\ |~|\\;|\\!)(?=\d{3}(?!\d))/g, '$1').replace(/\{,\}/g, ',');
  text = text.replace(/\\(?:displaystyle|textstyle|left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])\.?/g, '')
    .replace(/(?<!\\)\\(?:,|;|:|!|quad|qquad|\s)|~/g, ' ');
  text = text.replace(/\\[dtc]frac/g, '\\frac').replace(/\\[dt]binom/g, '\\binom');
  text = text.replace(/\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree/g, '');
  // Approximations answer with their value: "\approx 3.14", "x ≈ 3.14".
  const approx = Math.max(text.lastIndexOf('\\approx'), text.lastIndexOf('≈'));
  if (approx >= 0) text = text.slice(approx + (text.startsWith('≈', approx) ? 1 : 7));
  // "x < 1 or x > 3": a disjunction (spelled out before \text{} is unwrapped).
  text = text.replace(/\\(?:text|mbox|textrm)\s*\{\s*(or|and)\s*\}|\s(or|and)\s/g, (_, a?: string, b?: string) => ((a ?? b) === 'or' ? ' \\lor ' : ' \\land '));
  for (let k = 0; k < 4 && TEXT_COMMANDS.test(text); k++) text = text.replace(TEXT_COMMANDS, ' $1 ');
  text = text.replace(/\s+/g, ' ').trim();
  text = trimTrailing(text);
  let percent = false;
  const percentMatch = PERCENT.exec(text);
  if (percentMatch !== null) {
    percent = true;
    text = text.slice(0, percentMatch.index).trim();
  }
  text = stripCurrencyAndUnits(text);
  text = plainNumber(text);
  return { text, percent };
}

/** Sentence punctuation at the end. */
function trimTrailing(text: string): string {
  let end = text.length;
  while (end > 0 && '.。;'.includes(text[end - 1]!)) end--;
  return text.slice(0, end).trim();
}

function stripCurrencyAndUnits(text: string): string {
  text = text.replace(CURRENCY, '').replace(/\s*(?:€|£|¥)$/, '').trim();
  // Unit words after a number: at most three words, each from UNIT_WORDS (with ^2, ^3).
  let stripped = text;
  for (let k = 0; k < 3; k++) {
    const match = /(?<=^|[\s\d}])([a-zA-Z/]+)\s*(?:\^\s*\{?[23]\}?)?$/.exec(stripped);
    if (match === null || !UNIT_WORDS.has(match[1]!.toLowerCase())) break;
    stripped = stripped.slice(0, match.index).trim();
  }
  return stripped !== text && /[0-9})]$/.test(stripped) ? stripped : text;
}

const THOUSANDS = /^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$/;
const SPACED_THOUSANDS = /^[+-]?\d{1,3}(?: \d{3})+(?:[.,]\d+)?$/;
const DECIMAL_COMMA = /^[+-]?\d+,\d+$/;

/** Plain numbers written with separators: 1,000.99, 1 000, 2,74 (a comma before three digits is a thousands separator). */
function plainNumber(text: string): string {
  if (THOUSANDS.test(text)) return text.replace(/,/g, '');
  if (SPACED_THOUSANDS.test(text)) return text.replace(/ /g, '').replace(',', '.');
  if (DECIMAL_COMMA.test(text)) return text.replace(',', '.');
  return text;
}

// ---------------------------------------------------------------- shapes

/** An answer read as a mathematical object. */
type Shape =
  | { kind: 'scalar'; expr: Expr }
  | { kind: 'tuple'; items: Shape[] }
  | { kind: 'list'; items: Shape[] }
  | { kind: 'set'; items: Shape[] }
  | { kind: 'interval'; lo: Expr; hi: Expr; loOpen: boolean; hiOpen: boolean }
  | { kind: 'union'; parts: Shape[] }
  | { kind: 'matrix'; rows: Expr[][] }
  | { kind: 'relation'; op: string; sides: Expr[] }
  | { kind: 'element'; symbol: string; set: Shape }
  | { kind: 'or'; parts: Shape[] }
  | { kind: 'text'; key: string };

const FLIPPED: Record<string, string> = { Greater: 'Less', GreaterEqual: 'LessEqual' };
const RELATIONS = new Set(['Equal', 'NotEqual', 'Less', 'LessEqual', 'Greater', 'GreaterEqual']);

/** Strips `Delimiter` around a single item. */
function undelimit(expr: Expr): Expr {
  while (head(expr) === 'Delimiter' && args(expr).length === 1 && head(args(expr)[0]!) !== 'Sequence') expr = args(expr)[0]!;
  return expr;
}

function isOpen(expr: Expr): boolean {
  return head(expr) === 'Open';
}

function endpoint(expr: Expr): Expr {
  return head(expr) === 'Open' || head(expr) === 'Closed' ? args(expr)[0]! : expr;
}

function toShape(input: Expr, depth = 0): Shape {
  const expr = undelimit(input);
  if (depth > 8) return { kind: 'scalar', expr };
  const name = head(expr);
  const items = args(expr).slice(0, MAX_ITEMS);
  const shapes = () => items.map((item) => toShape(item, depth + 1));
  switch (name) {
    case 'Delimiter': {
      const inner = items[0]!;
      const open = typeof items[1] === 'string' ? items[1] : "'(,)'";
      const members = head(inner) === 'Sequence' ? args(inner).slice(0, MAX_ITEMS).map((item) => toShape(item, depth + 1)) : [toShape(inner, depth + 1)];
      if (open === "','" || open === "';'") return { kind: 'list', items: members };
      return { kind: 'tuple', items: members };
    }
    case 'Sequence':
      return { kind: 'list', items: shapes() };
    case 'Tuple': case 'Pair': case 'Triple': case 'AngleBracket':
      return { kind: 'tuple', items: shapes() };
    case 'List':
      // [a, b] is a closed interval when it has two items (the usual reading in answers).
      if (items.length === 2 && !items.some((item) => head(item) === 'List')) {
        return { kind: 'interval', lo: items[0]!, hi: items[1]!, loOpen: false, hiOpen: false };
      }
      return { kind: 'tuple', items: shapes() };
    case 'Set':
      return { kind: 'set', items: shapes() };
    case 'Interval':
      return { kind: 'interval', lo: endpoint(items[0]!), hi: endpoint(items[1]!), loOpen: isOpen(items[0]!), hiOpen: isOpen(items[1]!) };
    case 'Union':
      return { kind: 'union', parts: shapes() };
    case 'Matrix': {
      const rows = args(items[0]!).slice(0, MAX_ITEMS).map((row) => args(row).slice(0, MAX_ITEMS));
      return { kind: 'matrix', rows };
    }
    case 'Element':
      if (typeof items[0] === 'string') return { kind: 'element', symbol: items[0], set: toShape(items[1]!, depth + 1) };
      break;
    case 'Or':
      return { kind: 'or', parts: shapes() };
    case 'Measurement': {
      // a ± b: the pair of answers {a + b, a − b}.
      const [a, b] = items;
      if (a !== undefined && b !== undefined) return { kind: 'set', items: [{ kind: 'scalar', expr: ['Add', a, b] }, { kind: 'scalar', expr: ['Subtract', a, b] }] };
      break;
    }
    case 'EmptySet':
      return { kind: 'set', items: [] };
    default:
      if (name !== null && RELATIONS.has(name)) {
        const flipped = FLIPPED[name];
        return flipped === undefined ? { kind: 'relation', op: name, sides: items } : { kind: 'relation', op: flipped, sides: [...items].reverse() };
      }
  }
  if (expr === 'EmptySet') return { kind: 'set', items: [] };
  if (typeof expr === 'string' && expr.startsWith("'")) return { kind: 'text', key: textKey(expr.slice(1, -1)) };
  if (containsMatrix(expr, 0)) {
    const matrix = matrixValue(expr, 0);
    if (matrix !== null) return { kind: 'matrix', rows: matrix };
  }
  return { kind: 'scalar', expr };
}

function containsMatrix(expr: Expr, depth: number): boolean {
  if (depth > 6 || !Array.isArray(expr)) return false;
  return head(expr) === 'Matrix' || args(expr).some((item) => containsMatrix(item, depth + 1));
}

/** Simple matrix arithmetic in an answer: sums, scalar multiples and products of matrices. */
function matrixValue(expr: Expr, depth: number): Expr[][] | null {
  if (depth > 6) return null;
  expr = undelimit(expr);
  const name = head(expr);
  const items = args(expr);
  if (name === 'Matrix') return args(items[0]!).slice(0, MAX_ITEMS).map((row) => args(row).slice(0, MAX_ITEMS));
  if (name === 'Negate' && items.length === 1) {
    const m = matrixValue(items[0]!, depth + 1);
    return m === null ? null : m.map((row) => row.map((cell) => ['Negate', cell]));
  }
  if (name === 'Add' || name === 'Subtract') {
    const parts = items.map((item) => matrixValue(item, depth + 1));
    if (parts.some((part) => part === null)) return null;
    const [first, ...rest] = parts as Expr[][][];
    if (first === undefined || rest.some((m) => m.length !== first.length || m.some((row, r) => row.length !== first[r]!.length))) return null;
    return first.map((row, r) => row.map((cell, c) => (name === 'Add' ? ['Add', cell, ...rest.map((m) => m[r]![c]!)] : ['Subtract', cell, rest[0]![r]![c]!])));
  }
  if (name === 'Multiply' || name === 'InvisibleOperator') {
    let result: Expr[][] | null = null;
    let scalar: Expr[] = [];
    for (const item of items) {
      if (!containsMatrix(item, 0)) {
        scalar.push(item);
        continue;
      }
      const m = matrixValue(item, depth + 1);
      if (m === null) return null;
      if (result === null) result = m;
      else {
        const left: Expr[][] = result;
        if (left[0]!.length !== m.length) return null;
        result = left.map((row) => m[0]!.map((_, c) => ['Add', ...row.map((cell, k) => ['Multiply', cell, m[k]![c]!] as Expr)] as Expr));
      }
    }
    if (result === null) return null;
    const factors = scalar;
    scalar = [];
    return factors.length === 0 ? result : result.map((row) => row.map((cell) => ['Multiply', ...factors, cell]));
  }
  return null;
}

/** Normalised text of a word answer: case, spacing and final punctuation dropped. */
function textKey(text: string): string {
  return trimTrailing(text.toLowerCase().replace(/!+$/, '').replace(/\\text\{([^{}]*)\}/g, '$1').replace(/[\s{}]+/g, ''));
}

// ---------------------------------------------------------------- scalar comparison

/** Fixed sample coordinates: deterministic, irrational-looking, both signs. */
const SAMPLES = [0.7391, 1.3247, 2.2361, -0.5772, 1.6180, -1.4142, 0.4142, 2.7183, -2.0794, 0.3010];

interface Tolerance { absolute: number; relative: number }

function closeEnough(a: number, b: number, tolerance: Tolerance): boolean {
  if (!Number.isFinite(a) || !Number.isFinite(b)) return false;
  if (a === b) return true;
  return Math.abs(a - b) <= Math.max(tolerance.absolute, tolerance.relative * Math.max(Math.abs(a), Math.abs(b)));
}

/** Exact forms (no decimal point) are compared up to float round-off only. */
const EXACT: Tolerance = { absolute: 1e-12, relative: 1e-10 };

function hasDecimal(expr: Expr): boolean {
  if (typeof expr === 'number') return !Number.isInteger(expr);
  return Array.isArray(expr) && args(expr).some(hasDecimal);
}

/** Values of `a` and `b` at the sample points, or null when one cannot be evaluated. */
function sampled(a: Expr, b: Expr, deadline: number): [number[], number[]] | null {
  const symbols = freeSymbols(['List', a, b]);
  if (symbols === null) return null;
  const points = symbols.length === 0 ? 1 : SAMPLES.length;
  const left: number[] = [];
  const right: number[] = [];
  for (let p = 0; p < points; p++) {
    if (performance.now() > deadline) throw new Timeout();
    const scope: Record<string, number> = {};
    symbols.forEach((symbol, k) => { scope[symbol] = SAMPLES[(p + 3 * k) % SAMPLES.length]! + 0.1 * k; });
    try {
      left.push(evaluate(a, scope));
      right.push(evaluate(b, scope));
    } catch (error) {
      if (error instanceof Unsupported) return null;
      throw error;
    }
  }
  return [left, right];
}

/**
 * Whether `a` and `b` have equal values at every sample point where both are defined
 * (at least three such points when they have free variables; for constants, the one).
 * `scale` multiplies `b` (percent readings).
 */
function scalarsEqual(a: Expr, b: Expr, options: EquivalenceOptions, scale = 1): boolean | null {
  const values = sampled(a, b, options.deadline);
  if (values === null) return null;
  const tolerance = options.approximate === true || hasDecimal(a) || hasDecimal(b) || scale !== 1 ? { absolute: options.absoluteTolerance, relative: options.relativeTolerance } : EXACT;
  const [left, right] = values;
  let defined = 0;
  for (let p = 0; p < left.length; p++) {
    const x = left[p]!;
    const y = right[p]! * scale;
    // ∞ equals ∞ when written as such (interval ends), not when a power overflowed.
    if (x === y && !Number.isFinite(x) && !Number.isNaN(x)) {
      if (!isInfinitySymbol(a) || !isInfinitySymbol(b)) return false;
      defined++;
      continue;
    }
    if (Number.isNaN(x) && Number.isNaN(y)) continue;
    if (Number.isNaN(x) !== Number.isNaN(y)) {
      if (left.length === 1) return false;
      continue;
    }
    if (!closeEnough(x, y, tolerance)) return false;
    defined++;
  }
  return defined >= Math.min(3, left.length);
}

function isInfinitySymbol(expr: Expr): boolean {
  return expr === 'PositiveInfinity' || expr === 'NegativeInfinity' || (head(expr) === 'Negate' && isInfinitySymbol(args(expr)[0]!));
}

/**
 * Whether `a` = k·`b` for one constant k ≠ 0 at every sample point (k > 0 when `positive`):
 * equations equal up to a factor, inequalities up to a positive factor.
 */
function proportional(a: Expr, b: Expr, positive: boolean, deadline: number): boolean {
  const values = sampled(a, b, deadline);
  if (values === null) return false;
  const [left, right] = values;
  let ratio: number | null = null;
  let defined = 0;
  for (let p = 0; p < left.length; p++) {
    const x = left[p]!;
    const y = right[p]!;
    if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
    if (Math.abs(x) < 1e-12 && Math.abs(y) < 1e-12) continue;
    if (Math.abs(y) < 1e-12) return false;
    const r = x / y;
    if (ratio === null) ratio = r;
    else if (!closeEnough(r, ratio, EXACT)) return false;
    defined++;
  }
  return ratio !== null && ratio !== 0 && (!positive || ratio > 0) && defined >= 3;
}

// ---------------------------------------------------------------- shape comparison

/** A single-variable relation `x op c` or chain `a op x op b` as an interval (or null). */
function relationAsInterval(shape: Shape, options: EquivalenceOptions): Shape | null {
  if (shape.kind === 'element') return shape.set;
  if (shape.kind === 'or') {
    const parts = shape.parts.map((part) => relationAsInterval(part, options));
    return parts.every((part) => part !== null) ? { kind: 'union', parts: parts as Shape[] } : null;
  }
  if (shape.kind !== 'relation' || (shape.op !== 'Less' && shape.op !== 'LessEqual')) return null;
  const sides = shape.sides;
  const open = shape.op === 'Less';
  const constant = (expr: Expr) => freeSymbols(expr) !== null && freeSymbols(expr)!.length === 0;
  if (sides.length === 2) {
    const [lo, hi] = sides as [Expr, Expr];
    if (typeof lo === 'string' && !isConstant(lo) && constant(hi)) return { kind: 'interval', lo: ['Negate', 'PositiveInfinity'], hi, loOpen: true, hiOpen: open };
    if (typeof hi === 'string' && !isConstant(hi) && constant(lo)) return { kind: 'interval', lo, hi: 'PositiveInfinity', loOpen: open, hiOpen: true };
  }
  if (sides.length === 3) {
    const [lo, x, hi] = sides as [Expr, Expr, Expr];
    if (typeof x === 'string' && !isConstant(x) && constant(lo) && constant(hi)) return { kind: 'interval', lo, hi, loOpen: open, hiOpen: open };
  }
  return null;
}

function sameItemsUnordered(a: Shape[], b: Shape[], options: EquivalenceOptions, depth: number): boolean {
  if (a.length !== b.length) return false;
  const used = new Array<boolean>(b.length).fill(false);
  return a.every((item) => {
    const k = b.findIndex((other, j) => !used[j] && shapesEqual(item, other, options, depth + 1) !== null);
    if (k < 0) return false;
    used[k] = true;
    return true;
  });
}

function sameItemsOrdered(a: Shape[], b: Shape[], options: EquivalenceOptions, depth: number): boolean {
  return a.length === b.length && a.every((item, k) => shapesEqual(item, b[k]!, options, depth + 1) !== null);
}

/** A set-like shape's members: finite elements and intervals, unions flattened. */
function members(shape: Shape, depth = 0): Shape[] | null {
  if (depth > 6) return null;
  if (shape.kind === 'set' || shape.kind === 'list') return shape.items;
  if (shape.kind === 'interval') return [shape];
  if (shape.kind === 'union') {
    const all: Shape[] = [];
    for (const part of shape.parts) {
      const inner = members(part, depth + 1);
      if (inner === null) return null;
      all.push(...inner);
    }
    return all;
  }
  return null;
}

const SET_KINDS = new Set(['set', 'interval', 'union']);

/**
 * The rule by which `gold` and `answer` are equal, or null when they are not. Gold decides
 * the reading: a gold number is compared with the right side of an answer `x = …`.
 */
function shapesEqual(gold: Shape, answer: Shape, options: EquivalenceOptions, depth = 0): EquivalenceReason | null {
  if (depth > 8) return null;
  if (performance.now() > options.deadline) throw new Timeout();
  // Assignments answer with their value: x = 2 vs 2, (p, q) = (3, 2) vs (3, 2), a = b = 101 vs 101.
  if (answer.kind === 'relation' && answer.op === 'Equal' && gold.kind !== 'relation') {
    return shapesEqual(gold, toShape(answer.sides[answer.sides.length - 1]!), options, depth + 1) === null ? null : 'assignment';
  }
  if (gold.kind === 'relation' && gold.op === 'Equal' && answer.kind !== 'relation' && isAssignee(gold.sides[0]!)) {
    return shapesEqual(toShape(gold.sides[gold.sides.length - 1]!), answer, options, depth + 1) === null ? null : 'assignment';
  }
  // Relations against sets: -2 ≤ x ≤ 7 ≡ x ∈ [-2, 7] ≡ [-2, 7]; x > 3 ≡ (3, ∞).
  const relational = (shape: Shape) => shape.kind === 'relation' || shape.kind === 'element' || shape.kind === 'or';
  if (SET_KINDS.has(gold.kind) || SET_KINDS.has(answer.kind) || relational(gold) !== relational(answer) || gold.kind === 'element' || answer.kind === 'element') {
    const g = relationAsInterval(gold, options) ?? gold;
    const a = relationAsInterval(answer, options) ?? answer;
    if (g !== gold || a !== answer) return shapesEqual(g, a, options, depth + 1) === null ? null : 'interval';
  }
  if (gold.kind === 'relation' && answer.kind === 'relation') {
    const g = relationAsInterval(gold, options);
    const a = relationAsInterval(answer, options);
    if (g !== null && a !== null) return shapesEqual(g, a, options, depth + 1) === null ? null : 'relation';
    return relationsEqual(gold, answer, options) ? 'relation' : null;
  }
  switch (gold.kind) {
    case 'scalar':
      if (answer.kind === 'scalar') {
        const equal = scalarsEqual(gold.expr, answer.expr, options);
        if (equal === null) return JSON.stringify(gold.expr) === JSON.stringify(answer.expr) ? 'identical' : null;
        return equal ? (freeSymbols(['List', gold.expr, answer.expr])?.length === 0 ? 'number' : 'expression') : null;
      }
      if (answer.kind === 'set' && answer.items.length === 1) return shapesEqual(gold, answer.items[0]!, options, depth + 1);
      if (answer.kind === 'text') return null;
      return null;
    case 'text':
      return answer.kind === 'text' && answer.key === gold.key ? 'text' : null;
    case 'tuple':
      if (answer.kind === 'tuple' || answer.kind === 'list') return sameItemsOrdered(gold.items, answer.items, options, depth) ? 'tuple' : null;
      // (1, 2) may be the open interval.
      if (answer.kind === 'interval' && gold.items.length === 2 && answer.loOpen && answer.hiOpen) {
        return sameItemsOrdered(gold.items, [{ kind: 'scalar', expr: answer.lo }, { kind: 'scalar', expr: answer.hi }], options, depth) ? 'interval' : null;
      }
      return null;
    case 'list':
      if (answer.kind === 'list' || answer.kind === 'set') return sameItemsUnordered(gold.items, answer.items, options, depth) ? 'set' : null;
      if (answer.kind === 'tuple') return sameItemsOrdered(gold.items, answer.items, options, depth) ? 'tuple' : null;
      return null;
    case 'interval':
      if (answer.kind === 'interval') {
        return gold.loOpen === answer.loOpen && gold.hiOpen === answer.hiOpen
          && shapesEqual({ kind: 'scalar', expr: gold.lo }, { kind: 'scalar', expr: answer.lo }, options, depth + 1) !== null
          && shapesEqual({ kind: 'scalar', expr: gold.hi }, { kind: 'scalar', expr: answer.hi }, options, depth + 1) !== null ? 'interval' : null;
      }
      if (answer.kind === 'tuple' && gold.loOpen && gold.hiOpen) return shapesEqual(answer, gold, options, depth + 1);
      if (answer.kind === 'union' && answer.parts.length === 1) return shapesEqual(gold, answer.parts[0]!, options, depth + 1);
      return null;
    case 'set':
    case 'union': {
      const g = members(gold);
      const a = members(answer);
      if (g === null || a === null) {
        if (gold.kind === 'set' && gold.items.length === 1) return shapesEqual(gold.items[0]!, answer, options, depth + 1);
        return null;
      }
      return sameItemsUnordered(g, a, options, depth) ? 'set' : null;
    }
    case 'matrix':
      if (answer.kind !== 'matrix' || answer.rows.length !== gold.rows.length) return null;
      return gold.rows.every((row, r) => row.length === answer.rows[r]!.length
        && row.every((cell, c) => shapesEqual({ kind: 'scalar', expr: cell }, { kind: 'scalar', expr: answer.rows[r]![c]! }, options, depth + 1) !== null)) ? 'matrix' : null;
    case 'element':
    case 'or':
    case 'relation':
      return null;
  }
}

/** A left side that names what is assigned: a symbol or a tuple of symbols. */
function isAssignee(expr: Expr): boolean {
  expr = undelimit(expr);
  if (typeof expr === 'string') return !isConstant(expr);
  if (head(expr) === 'Delimiter' && head(args(expr)[0]!) === 'Sequence') return args(args(expr)[0]!).every((item) => typeof item === 'string');
  return false;
}

/** Equations equal up to a non-zero factor, inequalities up to a positive one (sides already flipped to < / ≤). */
function relationsEqual(gold: Extract<Shape, { kind: 'relation' }>, answer: Extract<Shape, { kind: 'relation' }>, options: EquivalenceOptions): boolean {
  if (gold.op !== answer.op || gold.sides.length !== answer.sides.length) return false;
  for (let k = 0; k + 1 < gold.sides.length; k++) {
    const g: Expr = ['Subtract', gold.sides[k]!, gold.sides[k + 1]!];
    const a: Expr = ['Subtract', answer.sides[k]!, answer.sides[k + 1]!];
    const symmetric = gold.op === 'Equal' || gold.op === 'NotEqual';
    if (!proportional(g, a, !symmetric, options.deadline) && scalarsEqual(g, a, options) !== true) return false;
  }
  return true;
}

// ---------------------------------------------------------------- entry

const PLAIN_NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/;

/** Multiple-choice letters: `(B)`, `B)`, `B.`, `\text{(B)}`, `option B`. */
function choiceLetter(text: string): string | null {
  const match = /^(?:option\s+|choice\s+)?\(?([A-Ea-e])\)?[.:]?$/i.exec(text.trim());
  return match === null ? null : match[1]!.toUpperCase();
}

/** Words only (yes, no, "north east", Tuesday): compared as text. */
function isWordAnswer(text: string): boolean {
  return /^[A-Za-z][A-Za-z' -]*$/.test(text) && (/[A-Za-z]{4,}/.test(text) || /^(?:yes|no)$/i.test(text));
}

/** Parsed shapes by cleaned text: a gold is compared with many responses. Cleared when full. */
const shapeCache = new Map<string, Shape | null>();
const SHAPE_CACHE_SIZE = 4096;

/** A cleaned answer read as a shape, or null when it is text the parser does not take. */
function readShape(cleaned: Cleaned): Shape | null {
  const cached = shapeCache.get(cleaned.text);
  if (cached !== undefined) return cached;
  const expr = parseLatex(cleaned.text);
  const shape = expr === null ? null : toShape(expr);
  if (shapeCache.size >= SHAPE_CACHE_SIZE) shapeCache.clear();
  shapeCache.set(cleaned.text, shape);
  return shape;
}

/**
 * Whether `answer` (extracted from a response) equals `gold`, and by which rule. Never
 * throws for strings.
 */
export function compareAnswers(answer: string, gold: string, options: EquivalenceOptions): { equal: boolean; reason: EquivalenceReason } {
  try {
    if (answer.trim() === gold.trim()) return { equal: true, reason: 'identical' };
    const a = clean(answer);
    const g = clean(gold);
    if (a.text === '' || g.text === '') return { equal: false, reason: 'different' };
    if (a.text === g.text && a.percent === g.percent) return { equal: true, reason: 'normalized' };
    const letters = [choiceLetter(a.text), choiceLetter(g.text)];
    if (letters[0] !== null && letters[1] !== null) return { equal: letters[0] === letters[1], reason: letters[0] === letters[1] ? 'choice' : 'different' };
    if (isWordAnswer(a.text) || isWordAnswer(g.text) || a.text.length > MAX_MATH_CHARS || g.text.length > MAX_MATH_CHARS) {
      const equal = textKey(a.text) === textKey(g.text);
      return { equal, reason: equal ? 'text' : 'different' };
    }
    if (PLAIN_NUMBER.test(a.text) && PLAIN_NUMBER.test(g.text) && a.percent === g.percent) {
      // Fast path for the commonest case: two plain decimal numbers.
      const approximate = a.text.includes('.') || g.text.includes('.');
      const tolerance = approximate ? { absolute: options.absoluteTolerance, relative: options.relativeTolerance } : EXACT;
      const equal = closeEnough(Number(a.text), Number(g.text), tolerance);
      return { equal, reason: equal ? 'number' : 'different' };
    }
    options = { ...options, approximate: /\d?\.\d/.test(a.text) || /\d?\.\d/.test(g.text) };
    const shapeA = readShape(a);
    const shapeG = readShape(g);
    if (shapeA === null || shapeG === null) {
      const equal = textKey(a.text) === textKey(g.text) && a.percent === g.percent;
      return { equal, reason: equal ? 'text' : 'no-parse' };
    }
    if (a.percent !== g.percent && shapeA.kind === 'scalar' && shapeG.kind === 'scalar') {
      // 50% ≡ 50 always; 50% ≡ 0.5 when the options allow it.
      if (scalarsEqual(shapeG.expr, shapeA.expr, options) === true) return { equal: true, reason: 'percent' };
      if (!options.percentAsFraction) return { equal: false, reason: 'different' };
      const scale = a.percent ? 0.01 : 100;
      return scalarsEqual(shapeG.expr, shapeA.expr, options, scale) === true ? { equal: true, reason: 'percent' } : { equal: false, reason: 'different' };
    }
    const reason = shapesEqual(shapeG, shapeA, options);
    return reason === null ? { equal: false, reason: 'different' } : { equal: true, reason };
  } catch (error) {
    if (error instanceof Timeout) return { equal: false, reason: 'timeout' };
    return { equal: false, reason: 'different' };
  }
}
