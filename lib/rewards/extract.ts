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

const ANSWER_PHRASES = ['the final answer is', 'final answer:', 'the answer is', 'answer:'];

/** Text after the last "The answer is" (or "Answer:") up to the end of its sentence. */
function lastAnswerPhrase(text: string): string | null {
  // Only the tail can hold the last phrase; lowercasing a megabyte output is wasted work.
  const tail = text.length > 20_000 ? text.slice(-20_000) : text;
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
  rest = trimEndChars(rest.replace(/^[:\s]+/, ''), ' \t\r\n.;,!');
  if (rest.startsWith('\\boxed')) return lastBoxed(rest) ?? rest;
  return rest === '' ? null : rest;
}

/**
 * The final answer in a model output: the last `\boxed{…}` (nested braces; also `\fbox`),
 * else the last `final_answer(…)` call, else the sentence after the last "The answer is" /
 * "Final answer:" / "Answer:". Returns null when there is none. Never throws; non-strings
 * give null. Answers longer than 10,000 characters are treated as absent.
 */
export function extractAnswer(text: string): string | null {
  if (typeof text !== 'string' || text === '') return null;
  const answer = lastBoxed(text) ?? lastFinalAnswerCall(text) ?? lastAnswerPhrase(text);
  if (answer === null) return null;
  const trimmed = answer.trim();
  return trimmed === '' || trimmed.length > MAX_ANSWER_CHARS ? null : trimmed;
}
