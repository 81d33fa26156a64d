/**
 * Final-answer extraction from model output. Linear scans with indexOf/lastIndexOf rather
 * than backtracking regexes, so megabyte outputs and unclosed braces cost O(length).
 */

/** Longest answer text returned; a "final answer" longer than this is model garbage. */
const MAX_ANSWER_CHARS = 10_000;
/** Unclosed `\boxed{` / `final_answer(` tried from the end before giving up (bounds work on garbage). */
const MAX_ATTEMPTS = 8;

/**
 * Content of the balanced `{…}` group that starts at `open` (which must be `{`), or null if
 * it does not close within `maxLength` characters. `\{` and `\}` count as braces too: in
 * LaTeX sets they come in pairs.
 */
export function balancedGroup(text: string, open: number, openChar = '{', closeChar = '}', maxLength = Infinity): string | null {
  let depth = 0;
  const end = Math.min(text.length, open + maxLength + 2);
  for (let i = open; i < end; i++) {
    const c = text[i];
    if (c === openChar) depth++;
    else if (c === closeChar && --depth === 0) return text.slice(open + 1, i);
  }
  return null;
}

/**
 * `text` without trailing characters from `chars`. A loop, not `/[…]+$/`: that regex
 * backtracks quadratically over a long run of those characters followed by something else.
 * @internal
 */
export function trimEndChars(text: string, chars: string): string {
  let end = text.length;
  while (end > 0 && chars.includes(text[end - 1]!)) end--;
  return text.slice(0, end);
}

function boxedAt(text: string, at: number, command: string): string | null {
  let i = at + command.length;
  while (i < text.length && (text[i] === ' ' || text[i] === '\t')) i++;
  if (text[i] === '{') return balancedGroup(text, i, '{', '}', MAX_ANSWER_CHARS);
  // `\boxed 5`: the answer runs to the next space, `$` or line end.
  if (i === at + command.length) return null;
  let end = i;
  while (end < text.length && !' \t\n$'.includes(text[end]!)) end++;
  return end > i ? text.slice(i, end) : null;
}

/** Last `\boxed{…}` or `\fbox{…}` content with nested braces, skipping unclosed ones. @internal */
export function lastBoxed(text: string): string | null {
  let before = text.length;
  for (let attempt = 0; attempt < MAX_ATTEMPTS && before > 0; attempt++) {
    const boxed = text.lastIndexOf('\\boxed', before - 1);
    const fbox = text.lastIndexOf('\\fbox', before - 1);
    const at = Math.max(boxed, fbox);
    if (at < 0) return null;
    const content = boxedAt(text, at, at === boxed ? '\\boxed' : '\\fbox');
    if (content !== null) return content;
    before = at;
  }
  return null;
}

/** Last `final_answer(…)` argument; a quoted string argument is unquoted. */
function lastFinalAnswerCall(text: string): string | null {
  let before = text.length;
  for (let attempt = 0; attempt < MAX_ATTEMPTS && before > 0; attempt++) {
    const at = text.lastIndexOf('final_answer(', before - 1);
    if (at < 0) return null;
    const content = balancedGroup(text, at + 'final_answer'.length, '(', ')', MAX_ANSWER_CHARS);
    if (content !== null) {
      const inner = content.trim();
      const quote = inner[0];
      if ((quote === '"' || quote === "'") && inner.length >= 2 && inner.endsWith(quote)) {
        return inner.slice(1, -1).replace(/\\(["'\\])/g, '$1');
      }
      const named = /^answer\s*=\s*/.exec(inner);
      return named === null ? inner : inner.slice(named[0].length).replace(/^(["'])([\s\S]*)\1$/, '$2');
    }
    before = at;
  }
  return null;
}

const ANSWER_PHRASES = ['the final answer is', 'final answer:', 'final answer', 'the answer is', 'answer is', 'answer:'];

/** How far back from the end plain-text conclusions and math spans are looked for, by default. */
export const DEFAULT_LOOKBACK = 4_000;

/** Text after the last "The answer is" (or "Answer:") up to the end of its sentence. */
function lastAnswerPhrase(text: string, lookback = 20_000): string | null {
  // Only the tail can hold the last phrase; lowercasing a megabyte output is wasted work.
  const tail = text.length > lookback ? text.slice(-lookback) : text;
  const lower = tail.toLowerCase();
  let best = -1;
  let phraseLength = 0;
  for (const phrase of ANSWER_PHRASES) {
    const at = lower.lastIndexOf(phrase);
    if (at > best) {
      best = at;
      phraseLength = phrase.length;
    }
  }
  if (best < 0) return null;
  let rest = tail.slice(best + phraseLength).trimStart();
  const lineEnd = rest.indexOf('\n');
  if (lineEnd >= 0) rest = rest.slice(0, lineEnd);
  rest = rest.trim();
  // Sentence end: a period followed by space or the end, not a decimal point; `$…$` kept whole.
  let inMath = false;
  for (let i = 0; i < rest.length; i++) {
    const c = rest[i];
    if (c === '$') inMath = !inMath;
    else if (!inMath && c === '.' && (i + 1 === rest.length || rest[i + 1] === ' ')) {
      rest = rest.slice(0, i);
      break;
    }
  }
  rest = trimEndChars(rest.replace(/^[:*_\s]+/, ''), ' \t\r\n.;,!*_');
  if (rest.startsWith('\\boxed')) return lastBoxed(rest) ?? rest;
  // "The largest n is 34": a sentence whose last clause states the value.
  const clause = /^(?:[A-Za-z][\w']*\s+){1,8}(?:is|are|equals|=)\s+(.+)$/.exec(rest);
  if (clause !== null && !/^\$/.test(rest)) rest = clause[1]!;
  return rest === '' ? null : rest;
}

/** Content of the last `<answer>…</answer>` (an unclosed `<think>` before it does not matter). */
function lastAnswerTag(text: string): string | null {
  const close = text.lastIndexOf('</answer>');
  if (close < 0) return null;
  const open = text.lastIndexOf('<answer>', close);
  if (open < 0) return null;
  const inner = text.slice(open + '<answer>'.length, close);
  return inner.length > MAX_ANSWER_CHARS ? null : inner;
}

/** Every `\boxed{…}` / `\fbox{…}` content, in order (at most 32). @internal */
export function allBoxed(text: string): string[] {
  const boxes: string[] = [];
  let at = 0;
  let failures = 0;
  while (boxes.length < 32 && failures < MAX_ATTEMPTS) {
    const boxed = text.indexOf('\\boxed', at);
    const fbox = text.indexOf('\\fbox', at);
    const next = boxed < 0 ? fbox : fbox < 0 ? boxed : Math.min(boxed, fbox);
    if (next < 0) break;
    const command = next === boxed ? '\\boxed' : '\\fbox';
    const content = boxedAt(text, next, command);
    if (content !== null && content.trim() !== '') {
      boxes.push(content.trim());
      at = next + command.length + content.length + 1;
    } else {
      failures++;
      at = next + command.length;
    }
  }
  return boxes;
}

/** Last `\[…\]`, `$$…$$`, `\(…\)` or `$…$` span in `text`, or null. */
function lastMathSpan(text: string): string | null {
  const candidates: [number, string][] = [];
  for (const [open, close] of [['\\[', '\\]'], ['\\(', '\\)'], ['$$', '$$']] as const) {
    const end = text.lastIndexOf(close);
    if (end < 0) continue;
    const start = text.lastIndexOf(open, end - 1);
    if (start >= 0 && end - start - open.length > 0) candidates.push([end, text.slice(start + open.length, end)]);
  }
  const end = text.lastIndexOf('$');
  if (end > 0) {
    const start = text.lastIndexOf('$', end - 1);
    if (start >= 0 && end - start > 1) candidates.push([end, text.slice(start + 1, end)]);
  }
  if (candidates.length === 0) return null;
  candidates.sort((a, b) => b[0] - a[0]);
  return candidates[0]![1].trim() || null;
}

/** Last number in `text` (with sign, separators, decimals, a fraction a/b, a percent). */
function lastNumber(text: string): string | null {
  const matches = text.match(/-?\d[\d,]*(?:\.\d+)?(?:\s*\/\s*\d+)?\s*(?:%|percent)?/g);
  if (matches === null) return null;
  return trimEndChars(matches[matches.length - 1]!.trim(), ',');
}

/** Where a final answer was found. */
export type AnswerSource = 'answer-tag' | 'boxed' | 'final_answer' | 'phrase' | 'math' | 'last-number' | 'whole';

/** The final answer of a response, all its boxes, and where the answer was found. */
export interface FoundAnswer {
  answer: string | null;
  boxes: string[];
  source: AnswerSource | null;
}

/**
 * The final answer in a model response, for grading: `<answer>` tags, else the last box,
 * else a `final_answer(…)` call, else a plain-text conclusion ("Final answer: …", "the
 * answer is …", "**Answer:** …"), else the last math span, else the last number; the last
 * three are looked for in the last `lookback` characters only; a bare answer (at most 80
 * characters and one word outside LaTeX commands) is its own answer (before the last-number rule). Never throws.
 */
export function findAnswer(text: string, lookback = DEFAULT_LOOKBACK): FoundAnswer {
  if (typeof text !== 'string' || text.trim() === '') return { answer: null, boxes: [], source: null };
  const tag = lastAnswerTag(text);
  if (tag !== null && tag.trim() !== '') {
    const inner = lastBoxed(tag);
    return { answer: (inner ?? tag).trim(), boxes: allBoxed(tag), source: 'answer-tag' };
  }
  const boxes = allBoxed(text);
  const boxed = lastBoxed(text);
  if (boxed !== null && boxed.trim() !== '') return { answer: boxed.trim(), boxes, source: 'boxed' };
  const call = lastFinalAnswerCall(text);
  if (call !== null && call.trim() !== '') return { answer: call.trim(), boxes, source: 'final_answer' };
  const tail = text.length > lookback ? text.slice(-lookback) : text;
  const phrase = lastAnswerPhrase(tail, lookback);
  if (phrase !== null && phrase.trim() !== '') return { answer: phrase.trim(), boxes, source: 'phrase' };
  const math = lastMathSpan(tail);
  if (math !== null) return { answer: math, boxes, source: 'math' };
  // A bare answer ("3/4", "\sin^2 x", "(C)") is its own answer; prose goes on to its last number.
  const trimmed = text.trim();
  const words = trimmed.match(/(?<![\\a-zA-Z])[a-zA-Z]{3,}/g)?.length ?? 0;
  if (trimmed.length <= 80 && words <= 1) return { answer: trimmed, boxes, source: 'whole' };
  const number = lastNumber(tail);
  return number === null ? { answer: null, boxes, source: null } : { answer: number, boxes, source: 'last-number' };
}

/**
 * The final answer in a model output: the last `<answer>…</answer>`, else the last
 * `\boxed{…}` (nested braces; also `\fbox`),
 * else the last `final_answer(…)` call, else the sentence after the last "The answer is" /
 * "Final answer:" / "Answer:". Returns null when there is none. Never throws; non-strings
 * give null. Answers longer than 10,000 characters are treated as absent.
 */
export function extractAnswer(text: string): string | null {
  if (typeof text !== 'string' || text === '') return null;
  const answer = lastAnswerTag(text) ?? lastBoxed(text) ?? lastFinalAnswerCall(text) ?? lastAnswerPhrase(text);
  if (answer === null) return null;
  const trimmed = answer.trim();
  return trimmed === '' || trimmed.length > MAX_ANSWER_CHARS ? null : trimmed;
}
