/**
 * Mathematical equivalence of a predicted and a gold answer. LaTeX is normalised to plain
 * math, split into structure (sets, intervals, tuples, matrices, lists), and scalars are
 * parsed and evaluated with mathjs under a whitelist of node types, so no answer text can
 * call arbitrary functions. Modelled on sympy-based checkers (Math-Verify, the MATH and
 * DeepScaleR graders): same cases, same leniencies.
 */
import { createRequire } from 'node:module';
import type { MathNode } from 'mathjs';
import { balancedGroup, extractAnswer, trimEndChars } from './extract.js';

type MathjsParse = typeof import('mathjs').parse;
let mathjsParse: MathjsParse | undefined;

/**
 * mathjs takes about a second to load, so it is required (synchronously) on the first
 * comparison that needs it rather than when the package is imported.
 */
function parse(expression: string): MathNode {
  mathjsParse ??= (createRequire(import.meta.url)('mathjs') as typeof import('mathjs')).parse;
  return mathjsParse(expression);
}

/** Longer answers are compared as normalised text only (bounded work on garbage). */
const MAX_MATH_CHARS = 400;
/** Most AST nodes an answer expression may have. */
const MAX_NODES = 120;
/** Relative tolerance of numeric comparison. */
const RELATIVE_TOLERANCE = 1e-6;

const TEXT_COMMANDS = ['\\text', '\\textbf', '\\textit', '\\textrm', '\\mathrm', '\\mathbf', '\\mbox', '\\operatorname', '\\mathit'];

/** Replaces `\cmd{content}` by ` content ` for each text-like command (nested braces kept). */
function unwrapCommands(text: string, commands: readonly string[]): string {
  for (const command of commands) {
    let at = text.indexOf(command + '{');
    while (at >= 0) {
      const content = balancedGroup(text, at + command.length);
      if (content === null) break;
      text = text.slice(0, at) + ' ' + content + ' ' + text.slice(at + command.length + content.length + 2);
      at = text.indexOf(command + '{', at);
    }
  }
  return text;
}

/** Unit words stripped after a number ("5 cm", "12 dollars", "90 degrees"). */
const UNIT_WORDS = new Set([
  'cm', 'mm', 'm', 'km', 'meter', 'meters', 'metre', 'metres', 'inch', 'inches', 'in', 'ft', 'feet', 'foot', 'yard', 'yards', 'mile', 'miles',
  'g', 'kg', 'gram', 'grams', 'kilogram', 'kilograms', 'lb', 'lbs', 'pound', 'pounds', 'ounce', 'ounces', 'oz',
  's', 'sec', 'second', 'seconds', 'min', 'minute', 'minutes', 'hour', 'hours', 'hr', 'hrs', 'day', 'days', 'week', 'weeks', 'year', 'years', 'month', 'months',
  'dollar', 'dollars', 'cent', 'cents', 'euro', 'euros', 'degree', 'degrees', 'deg', 'radian', 'radians', 'unit', 'units',
  'sq', 'square', 'cubic', 'l', 'liter', 'liters', 'litre', 'litres', 'ml', 'mph', 'km/h', 'percent',
  'people', 'students', 'apples', 'marbles', 'books', 'cookies', 'ways', 'times', 'points', 'items', 'balls', 'cars', 'pages',
]);

/** Plain normalisation shared by every comparison: delimiters, spacing, LaTeX variants. */
function normalizeAnswer(raw: string): string {
  let text = raw.trim();
  if (text.length > MAX_MATH_CHARS * 4) return text;
  text = text.replace(/\\left\.|\\right\./g, '').replace(/\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)\s*/g, '');
  text = text.replace(/\\\$/g, '').replace(/\\\[|\\\]|\\\(|\\\)/g, '').replace(/\$/g, '');
  text = text.replace(/(?<!\\)\\(?:displaystyle|textstyle|quad|qquad|!|,|;|:|\s)/g, ' ').replace(/~/g, ' ');
  text = text.replace(/\\[dt]frac/g, '\\frac').replace(/\\dbinom|\\tbinom/g, '\\binom');
  text = text.replace(/\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree/g, '');
  text = text.replace(/\\%/g, '%').replace(/\{,\}/g, ',');
  text = unwrapCommands(text, TEXT_COMMANDS);
  // Malformed but common: \frac13, \frac1{3}, \frac{1}3, \sqrt3, \sqrt x.
  text = text.replace(/\\frac\s*([0-9a-zA-Z])\s*([0-9a-zA-Z])/g, '\\frac{$1}{$2}')
    .replace(/\\frac\s*([0-9a-zA-Z])\s*\{/g, '\\frac{$1}{')
    .replace(/\\frac(\{[^{}]*\})\s*([0-9a-zA-Z])/g, '\\frac$1{$2}')
    .replace(/\\sqrt\s*([0-9]+|[a-zA-Z](?![a-zA-Z]))/g, '\\sqrt{$1}');
  // Mixed numbers, as graders of school problems read them: 2\frac{1}{2} = 2 + 1/2.
  text = text.replace(/(^|[^\d.])(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}/g, '$1($2+\\frac{$3}{$4})');
  text = text.replace(/_\{(\w+)\}/g, '_$1');
  text = text.replace(/\s+/g, ' ').trim();
  text = trimEndChars(text.replace(/^(?:the answer is|answer:?)\s*/i, ''), '.。').trim();
  return text;
}

/** Removes a unit after a numeric value: "5 cm" → "5", "\$12" → "12". */
function stripUnits(text: string): string {
  text = text.replace(/^\\?\$\s*/, '').replace(/\\\$/g, '');
  // Words are separated by required spaces, so a run of letters splits one way only (no
  // exponential backtracking on "1 aaaa…!").
  const match = /^(.*?[0-9}%)])\s*([a-zA-Z/]+(?:\s*\^?[23])?(?:\s+[a-zA-Z/]+(?:\s*\^?[23])?)*)$/.exec(text);
  if (match === null) return text;
  const words = match[2]!.replace(/\s*\^?[23]/g, '').trim().toLowerCase().split(/\s+/);
  return words.every((word) => UNIT_WORDS.has(word)) ? match[1]!.trim() : text;
}

/** A parsed answer. */
type Answer =
  | { kind: 'scalar'; text: string; percent: boolean }
  | { kind: 'list'; open: string; close: string; items: Answer[]; ordered: boolean }
  | { kind: 'matrix'; rows: Answer[][] }
  | { kind: 'text'; text: string };

/** Splits at commas (or another separator) that are outside all brackets and braces. */
function splitTopLevel(text: string, separator: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') depth--;
    else if (depth === 0 && text.startsWith(separator, i)) {
      parts.push(text.slice(start, i));
      start = i + separator.length;
    }
  }
  parts.push(text.slice(start));
  return parts.map((part) => part.trim());
}

/** Whether the bracket opening at 0 closes at the last character (any of ( [ with any of ) ]). */
function enclosesWhole(text: string): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '(' || c === '[' || c === '{') depth++;
    else if ((c === ')' || c === ']' || c === '}') && --depth === 0) return i === text.length - 1;
  }
  return false;
}

const THOUSANDS = /^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$/;
const SPACED_THOUSANDS = /^[+-]?\d{1,3}(?: \d{3})+(?:\.\d+)?$/;
const DECIMAL_COMMA = /^[+-]?\d+,(?:\d{1,2}|\d{4,})$/;

function parseAnswer(raw: string, depth = 0): Answer {
  let text = raw.trim();
  if (text.length > MAX_MATH_CHARS || depth > 4) return { kind: 'text', text: textKey(text) };
  // A relation with a single-symbol left side answers with its right side: "x = 2", "x \in [0,1]".
  const relation = /^[a-zA-Z](?:_\{?\w+\}?)?\s*(?:=|\\in\b|\\approx|≈)\s*/.exec(text);
  if (relation !== null && !text.slice(relation[0].length).includes('=')) text = text.slice(relation[0].length);
  if (THOUSANDS.test(text)) text = text.replace(/,/g, '');
  else if (SPACED_THOUSANDS.test(text)) text = text.replace(/ /g, '');
  else if (DECIMAL_COMMA.test(text)) text = text.replace(',', '.');

  const matrix = /^\\begin\{([pbvB]?matrix|array)\}(?:\{[^}]*\})?([\s\S]*)\\end\{\1\}$/.exec(text);
  if (matrix !== null) {
    const rows = matrix[2]!.split('\\\\').map((row) => row.trim()).filter((row) => row !== '')
      .map((row) => row.split('&').map((cell) => parseAnswer(cell, depth + 1)));
    return { kind: 'matrix', rows };
  }
  // a ± b is the pair of answers {a + b, a − b}.
  const pm = text.search(/\\pm(?![a-zA-Z])/);
  if (pm >= 0 && text.slice(pm + 3).search(/\\pm(?![a-zA-Z])/) < 0) {
    const [before, after] = [text.slice(0, pm), text.slice(pm + 3)];
    return { kind: 'list', open: '', close: '', items: [parseAnswer(`${before}+${after}`, depth + 1), parseAnswer(`${before}-${after}`, depth + 1)], ordered: false };
  }
  if (text.includes('\\cup')) {
    return { kind: 'list', open: '', close: '', items: text.split('\\cup').map((part) => parseAnswer(part, depth + 1)), ordered: false };
  }
  if (text.startsWith('\\{') && text.endsWith('\\}')) {
    const inner = text.slice(2, -2).trim();
    return { kind: 'list', open: '{', close: '}', items: inner === '' ? [] : splitTopLevel(inner, ',').map((part) => parseAnswer(part, depth + 1)), ordered: false };
  }
  if (/^[([]/.test(text) && /[)\]]$/.test(text) && enclosesWhole(text)) {
    const parts = splitTopLevel(text.slice(1, -1), ',');
    if (parts.length > 1) {
      return { kind: 'list', open: text[0]!, close: text[text.length - 1]!, items: parts.map((part) => parseAnswer(part, depth + 1)), ordered: true };
    }
  }
  const parts = splitTopLevel(text, ',');
  if (parts.length > 1) {
    // A bare list of answers ("1, 2" or "x = 1, x = 2"): order does not matter.
    return { kind: 'list', open: '', close: '', items: parts.map((part) => parseAnswer(part, depth + 1)), ordered: false };
  }
  text = stripUnits(text);
  const percent = /%\s*$/.test(text);
  if (percent) text = text.replace(/%\s*$/, '').trim();
  return { kind: 'scalar', text, percent };
}

/** Normalised text key for non-mathematical answers: "(C)" ≡ "C", "Yes." ≡ "yes". */
function textKey(text: string): string {
  let key = trimEndChars(text.toLowerCase().replace(/\s+/g, ''), '.。');
  const choice = /^\(([a-z])\)$/.exec(key);
  if (choice !== null) key = choice[1]!;
  return key;
}

const FUNCTIONS: Record<string, string> = {
  '\\sin': 'sin', '\\cos': 'cos', '\\tan': 'tan', '\\ln': 'log', '\\log': 'log', '\\exp': 'exp',
  '\\cot': 'cot', '\\sec': 'sec', '\\csc': 'csc', '\\arcsin': 'asin', '\\arccos': 'acos', '\\arctan': 'atan',
};
const SYMBOLS: Record<string, string> = {
  '\\cdot': '*', '\\times': '*', '\\ast': '*', '\\div': '/', '\\pi': 'pi', '\\infty': 'Infinity', '\\infin': 'Infinity',
  '\\le': '<=', '\\leq': '<=', '\\ge': '>=', '\\geq': '>=', '\\neq': '!=',
};
const ALLOWED_FUNCTIONS = new Set(['sqrt', 'nthRoot', 'sin', 'cos', 'tan', 'cot', 'sec', 'csc', 'asin', 'acos', 'atan', 'log', 'exp', 'abs', 'combinations']);
const CONSTANTS = new Set(['pi', 'e', 'Infinity', 'i']);
const PLAIN_NAMES = new Set([...ALLOWED_FUNCTIONS, ...CONSTANTS, 'ln']);

/** Converts LaTeX math to mathjs syntax; null when a command remains that we do not know. */
function latexToMathjs(text: string, depth = 0): string | null {
  if (depth > 20) return null;
  let out = '';
  for (let i = 0; i < text.length;) {
    const c = text[i]!;
    if (c !== '\\') {
      const word = /^[a-zA-Z]+(?:_\w+)?/.exec(text.slice(i, i + 40))?.[0];
      if (word !== undefined) {
        // A longer unknown word is text, not a product of variables ("listen" is not "silent").
        if (word.length > 3 && !PLAIN_NAMES.has(word) && !word.includes('_')) return null;
        // Juxtaposed letters are a product of variables ("ab" = a·b); known names stay whole.
        out += word === 'ln' ? ' log ' : ` ${PLAIN_NAMES.has(word) || word.includes('_') ? word : word.split('').join(' ')} `;
        i += word.length;
        continue;
      }
      out += c === '{' ? '(' : c === '}' ? ')' : c;
      i++;
      continue;
    }
    const name = /^\\[a-zA-Z]+/.exec(text.slice(i, i + 20))?.[0];
    if (name === undefined) return null;
    i += name.length;
    while (text[i] === ' ') i++;
    if (name === '\\frac' || name === '\\binom') {
      const numerator = text[i] === '{' ? balancedGroup(text, i) : null;
      if (numerator === null) return null;
      i += numerator.length + 2;
      while (text[i] === ' ') i++;
      const denominator = text[i] === '{' ? balancedGroup(text, i) : null;
      if (denominator === null) return null;
      i += denominator.length + 2;
      const a = latexToMathjs(numerator, depth + 1);
      const b = latexToMathjs(denominator, depth + 1);
      if (a === null || b === null) return null;
      out += name === '\\frac' ? `((${a})/(${b}))` : `combinations(${a},${b})`;
    } else if (name === '\\sqrt') {
      let index: string | null = null;
      if (text[i] === '[') {
        index = balancedGroup(text, i, '[', ']');
        if (index === null) return null;
        i += index.length + 2;
      }
      const radicand = text[i] === '{' ? balancedGroup(text, i) : null;
      if (radicand === null) return null;
      i += radicand.length + 2;
      const a = latexToMathjs(radicand, depth + 1);
      const n = index === null ? null : latexToMathjs(index, depth + 1);
      if (a === null || (index !== null && n === null)) return null;
      out += n === null ? `sqrt(${a})` : `nthRoot(${a},${n})`;
    } else if (FUNCTIONS[name] !== undefined) {
      // \ln 2, \sin x: an unparenthesised argument is the next number or letter.
      const argument = text[i] === '(' || text[i] === '{' ? null : /^(?:\d+(?:\.\d+)?|[a-zA-Z])/.exec(text.slice(i))?.[0];
      out += ` ${FUNCTIONS[name]}`;
      if (argument !== undefined && argument !== null) {
        out += `(${argument})`;
        i += argument.length;
      }
    } else if (SYMBOLS[name] !== undefined) {
      out += ` ${SYMBOLS[name]} `;
    } else {
      return null;
    }
  }
  return out;
}

/** Parses a scalar to a whitelisted mathjs tree, or null. */
function scalarTree(text: string): MathNode | null {
  if (text === '' || text.length > MAX_MATH_CHARS) return null;
  const converted = latexToMathjs(text.replace(/(\d),(?=\d{3}\b)/g, '$1'));
  if (converted === null || /[<>=!&|;"'`]|\bto\b|\bin\b/.test(converted)) return null;
  let tree: MathNode;
  try {
    tree = parse(converted);
  } catch {
    return null;
  }
  let nodes = 0;
  let allowed = true;
  tree.traverse((node) => {
    nodes++;
    switch (node.type) {
      case 'ConstantNode':
        if (typeof (node as unknown as { value: unknown }).value !== 'number') allowed = false;
        break;
      case 'SymbolNode': {
        const name = (node as unknown as { name: string }).name;
        if (!CONSTANTS.has(name) && !ALLOWED_FUNCTIONS.has(name) && !/^[a-zA-Z](?:_\w+)?$/.test(name)) allowed = false;
        break;
      }
      case 'OperatorNode':
        if (!['add', 'subtract', 'multiply', 'divide', 'pow', 'unaryMinus', 'unaryPlus'].includes((node as unknown as { fn: string }).fn)) allowed = false;
        break;
      case 'FunctionNode':
        if (!ALLOWED_FUNCTIONS.has((node as unknown as { fn: { name?: string } }).fn.name ?? '')) allowed = false;
        break;
      case 'ParenthesisNode':
        break;
      default:
        allowed = false;
    }
  });
  return allowed && nodes <= MAX_NODES ? tree : null;
}

function freeSymbols(tree: MathNode): Set<string> {
  const names = new Set<string>();
  tree.traverse((node, _path, parent) => {
    if (node.type !== 'SymbolNode') return;
    const name = (node as unknown as { name: string }).name;
    const isCallee = parent !== null && parent.type === 'FunctionNode' && (parent as unknown as { fn: MathNode }).fn === node;
    if (!isCallee && !CONSTANTS.has(name)) names.add(name);
  });
  return names;
}

/** Real and imaginary parts of an evaluation result, or null if it is not a number. */
function toComplex(value: unknown): [number, number] | null {
  if (typeof value === 'number') return [value, 0];
  if (value !== null && typeof value === 'object' && 're' in value && 'im' in value) {
    const { re, im } = value as { re: unknown; im: unknown };
    if (typeof re === 'number' && typeof im === 'number') return [re, im];
  }
  return null;
}

function close(a: number, b: number): boolean {
  // Overflowed values (9^9^9^9) are not equal to each other; identical texts matched earlier.
  if (!Number.isFinite(a) || !Number.isFinite(b)) return false;
  return Math.abs(a - b) <= RELATIVE_TOLERANCE * Math.max(1, Math.abs(a), Math.abs(b));
}

/** Values at which expressions with free symbols are compared; distinct per symbol. */
const SAMPLE_POINTS = [[0.7391, 1.3247, 2.2361], [1.6180, 0.4142, 3.1416], [2.7183, 0.5772, 1.4142], [0.3010, 2.0794, 0.9163]];

function scalarsEqual(a: { text: string; percent: boolean }, b: { text: string; percent: boolean }): boolean {
  if (textKey(a.text) === textKey(b.text) && a.percent === b.percent) return true;
  const treeA = scalarTree(a.text);
  const treeB = scalarTree(b.text);
  if (treeA === null || treeB === null) return textKey(a.text) === textKey(b.text);
  const symbols = [...new Set([...freeSymbols(treeA), ...freeSymbols(treeB)])];
  if (symbols.length > 4) return false;
  // "50%" may mean 50 or 0.5; gold and prediction agree if any reading matches.
  const scalesA = a.percent ? [1, 0.01] : [1];
  const scalesB = b.percent ? [1, 0.01] : [1];
  try {
    const codeA = treeA.compile();
    const codeB = treeB.compile();
    return scalesA.some((scaleA) => scalesB.some((scaleB) => SAMPLE_POINTS.every((point) => {
      const scope: Record<string, number> = {};
      symbols.forEach((name, k) => { scope[name] = point[k % point.length]! + k; });
      const x = toComplex(codeA.evaluate({ ...scope }));
      const y = toComplex(codeB.evaluate({ ...scope }));
      if (x === null || y === null) return false;
      return close(x[0] * scaleA, y[0] * scaleB) && close(x[1] * scaleA, y[1] * scaleB);
    })));
  } catch {
    return false;
  }
}

function answersEqual(a: Answer, b: Answer): boolean {
  if (a.kind === 'scalar' && b.kind === 'scalar') return scalarsEqual(a, b);
  if (a.kind === 'text' || b.kind === 'text') {
    const key = (x: Answer) => (x.kind === 'text' || x.kind === 'scalar' ? textKey(x.text) : null);
    return key(a) !== null && key(a) === key(b);
  }
  if (a.kind === 'matrix' && b.kind === 'matrix') {
    return a.rows.length === b.rows.length && a.rows.every((row, r) => row.length === b.rows[r]!.length
      && row.every((cell, c) => answersEqual(cell, b.rows[r]![c]!)));
  }
  if (a.kind === 'list' && b.kind === 'list') {
    if (a.items.length !== b.items.length) return false;
    // Bracket kinds distinguish intervals: [1,2) is not (1,2]. Bare lists match any brackets but sets.
    const bare = a.open === '' || b.open === '';
    if (!bare && (a.open !== b.open || a.close !== b.close)) return false;
    if (a.ordered && b.ordered) return a.items.every((item, k) => answersEqual(item, b.items[k]!));
    const used = new Array<boolean>(b.items.length).fill(false);
    return a.items.every((item) => {
      const k = b.items.findIndex((other, j) => !used[j] && answersEqual(item, other));
      if (k < 0) return false;
      used[k] = true;
      return true;
    });
  }
  return false;
}

/** The answer part of a text: extracted (boxed first), else its last `$…$` span, else the whole text. */
function answerText(text: string): string {
  const extracted = extractAnswer(text);
  if (extracted !== null) return extracted;
  const end = text.lastIndexOf('$');
  if (end > 0 && text.length > 40) {
    const start = text.lastIndexOf('$', end - 1);
    if (start >= 0 && end - start < MAX_MATH_CHARS) return text.slice(start + 1, end);
  }
  return text;
}

/**
 * Whether a predicted answer is mathematically equal to the gold answer. Either side may be
 * free text or LaTeX; the final answer is extracted from each (boxed first, see
 * `extractAnswer`), then compared: numbers with thousands separators or decimal commas,
 * fractions (`\frac`, `\dfrac`, malformed `\frac13`), roots, percentages (50% ≡ 50 ≡ 0.5),
 * units and `\text{}` stripped, expressions (compared at sample points), relations like
 * `x = 2`, intervals (brackets must agree), tuples, sets and bare lists (order-free),
 * matrices. Never throws; non-strings give false.
 */
export function answersMatch(prediction: string, gold: string): boolean {
  if (typeof prediction !== 'string' || typeof gold !== 'string') return false;
  try {
    const predicted = normalizeAnswer(answerText(prediction));
    const expected = normalizeAnswer(answerText(gold));
    if (predicted === '' || expected === '') return false;
    if (predicted === expected) return true;
    return answersEqual(parseAnswer(predicted), parseAnswer(expected));
  } catch {
    // Answers are model garbage as often as not; a checker that throws would stop training.
    return false;
  }
}
