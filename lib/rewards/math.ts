/**
 * Answer verification for math rewards: the final answer is found in the response
 * (`findAnswer`, extract.ts), then compared with the gold answer (`compareAnswers`,
 * equivalence.ts). `verifyAnswer` says what was extracted and which rule decided;
 * `answersMatch` is its boolean shorthand.
 */
import { compareAnswers, type EquivalenceOptions, type EquivalenceReason } from './equivalence.js';
import { findAnswer, DEFAULT_LOOKBACK, type AnswerSource } from './extract.js';
import { loadLatexParser } from './mathjson.js';

/** Options of `verifyAnswer`. */
export interface VerifyOptions {
  /** Absolute tolerance of numeric comparison when either side is a decimal. Default 1e-6 (so 1/3 ≡ 0.333333). */
  tolerance?: number;
  /** Relative tolerance of numeric comparison when either side is a decimal. Default 1e-9. Exact forms (integers, fractions, roots) are compared up to float round-off. */
  relativeTolerance?: number;
  /** Whether a percentage may equal its fraction (`50%` ≡ `0.5`). Default true. `50%` ≡ `50` always. */
  percentAsFraction?: boolean;
  /** Whether a gold set (`\{1, 2\}`, `1, 2`) may be matched by several boxes (`\boxed{1}, \boxed{2}`). Default true. */
  multipleBoxes?: boolean;
  /** Most milliseconds one call may take; past it the verdict is false with reason `'timeout'`. Default 1000. */
  timeLimitMs?: number;
  /** Characters from the end of the response searched for plain-text conclusions, math spans and numbers. Default 4000. */
  lookback?: number;
}

/** Which rule decided a verdict. */
export type VerifyReason = EquivalenceReason | 'no-answer' | 'no-gold' | 'boxes-as-set' | 'not-a-string';

/** The verdict of `verifyAnswer`. */
export interface AnswerVerdict {
  /** Whether the response's final answer equals the gold answer. */
  correct: boolean;
  /** The final answer found in the response, or null. */
  extracted: string | null;
  /** The rule that decided (e.g. `'number'`, `'expression'`, `'set'`, `'no-answer'`, `'timeout'`). */
  reason: VerifyReason;
  /** Where the answer was found (`'boxed'`, `'answer-tag'`, `'phrase'`, …), or null. */
  source: AnswerSource | null;
}

interface ResolvedOptions {
  absoluteTolerance: number;
  relativeTolerance: number;
  percentAsFraction: boolean;
  multipleBoxes: boolean;
  timeLimitMs: number;
  lookback: number;
}

function describe(value: unknown): string {
  return `${typeof value === 'string' ? JSON.stringify(value) : String(value)} of type ${value === null ? 'null' : typeof value}`;
}

function nonNegative(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(`Expected a number for options.${name} but received ${describe(value)}`);
  if (!(value >= 0) || value === Infinity) throw new RangeError(`Expected a finite number >= 0 for options.${name} but received ${value}`);
  return value;
}

function flag(value: unknown, name: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new TypeError(`Expected a boolean for options.${name} but received ${describe(value)}`);
  return value;
}

/** Validated options with defaults. @internal */
export function resolveVerifyOptions(options: VerifyOptions | undefined): ResolvedOptions {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new TypeError(`Expected an object for options but received ${describe(options)}`);
  }
  const o = options ?? {};
  const timeLimitMs = nonNegative(o.timeLimitMs, 'timeLimitMs', 1000);
  if (timeLimitMs === 0) throw new RangeError('Expected a number > 0 for options.timeLimitMs but received 0');
  const lookback = nonNegative(o.lookback, 'lookback', DEFAULT_LOOKBACK);
  if (!Number.isInteger(lookback) || lookback < 1) throw new RangeError(`Expected an integer >= 1 for options.lookback but received ${lookback}`);
  return {
    absoluteTolerance: nonNegative(o.tolerance, 'tolerance', 1e-6),
    relativeTolerance: nonNegative(o.relativeTolerance, 'relativeTolerance', 1e-9),
    percentAsFraction: flag(o.percentAsFraction, 'percentAsFraction', true),
    multipleBoxes: flag(o.multipleBoxes, 'multipleBoxes', true),
    timeLimitMs,
    lookback,
  };
}

/** A gold written as a set or a bare list of several items. */
function isSetGold(gold: string): boolean {
  const text = gold.trim().replace(/^\$|\$$/g, '');
  return /^\\\{.*\\\}$/.test(text) || (/,/.test(text) && !/^[([]/.test(text) && !/^\d{1,3}(,\d{3})+(\.\d+)?$/.test(text));
}

/** The gold's own answer: boxed or tagged golds are unwrapped; plain golds are used as they are. */
function goldAnswer(gold: string, lookback: number): string | null {
  if (/\\boxed|\\fbox|<answer>/.test(gold)) return findAnswer(gold, lookback).answer;
  const trimmed = gold.trim();
  return trimmed === '' ? null : trimmed;
}

/** `verifyAnswer` with options already resolved. @internal */
export function verifyResolved(response: unknown, gold: unknown, options: ResolvedOptions): AnswerVerdict {
  loadLatexParser();
  const deadline = performance.now() + options.timeLimitMs;
  if (typeof response !== 'string' || typeof gold !== 'string') return { correct: false, extracted: null, reason: 'not-a-string', source: null };
  try {
    const found = findAnswer(response, options.lookback);
    const expected = goldAnswer(gold, options.lookback);
    if (expected === null) return { correct: false, extracted: found.answer, reason: 'no-gold', source: found.source };
    if (found.answer === null) return { correct: false, extracted: null, reason: 'no-answer', source: null };
    const equivalence: EquivalenceOptions = { ...options, deadline };
    const verdict = compareAnswers(found.answer, expected, equivalence);
    if (!verdict.equal && verdict.reason !== 'timeout' && options.multipleBoxes && found.boxes.length > 1 && isSetGold(expected)) {
      const joined = `\\{${found.boxes.join(', ')}\\}`;
      const asSet = compareAnswers(joined, /^\s*\\\{/.test(expected) ? expected : `\\{${expected}\\}`, equivalence);
      if (asSet.equal) return { correct: true, extracted: joined, reason: 'boxes-as-set', source: found.source };
    }
    return { correct: verdict.equal, extracted: found.answer, reason: verdict.reason, source: found.source };
  } catch {
    // Responses are model garbage as often as not; a checker that throws would stop training.
    return { correct: false, extracted: null, reason: 'different', source: null };
  }
}

/**
 * Verifies a model response against a gold answer. The final answer is found in the
 * response (`<answer>` tags, the last `\boxed{}`, a "Final answer: …" conclusion, the last
 * math span or number; see `findAnswer`) and compared with the gold: numbers (separators,
 * decimal commas, fractions, mixed numbers, scientific notation, percent, units and
 * currencies dropped), expressions (equal values at fixed sample points of their variables),
 * equations (equal up to a non-zero factor), inequalities and their interval forms, tuples,
 * sets, intervals and unions, matrices (with simple matrix arithmetic), and text answers
 * (case, `\text{}`, multiple-choice letters, yes/no).
 *
 * Deterministic; never throws for any strings (non-strings give `correct: false`, reason
 * `'not-a-string'`) and gives up after `timeLimitMs` (default 1000 ms) with reason
 * `'timeout'`. Throws TypeError/RangeError for invalid options only.
 *
 * @example verifyAnswer('so the answer is $\\boxed{\\frac{1}{2}}$', '0.5')
 *   // { correct: true, extracted: '\\frac{1}{2}', reason: 'number', source: 'boxed' }
 */
export function verifyAnswer(response: string, gold: string, options?: VerifyOptions): AnswerVerdict {
  return verifyResolved(response, gold, resolveVerifyOptions(options));
}

const DEFAULTS = resolveVerifyOptions(undefined);

/**
 * Whether the final answer of `prediction` equals `gold`: `verifyAnswer(prediction, gold).correct`
 * with the default options. Never throws; non-strings give false.
 */
export function answersMatch(prediction: string, gold: string): boolean {
  return verifyResolved(prediction, gold, DEFAULTS).correct;
}
