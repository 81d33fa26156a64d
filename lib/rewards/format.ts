/** Format checks: does an output have the shape a reward expects, before its content is judged. */
import { extractAnswer, lastBoxed } from './extract.js';

/** Options for `checkFormat`. */
export interface FormatOptions {
  /** Where the final answer must be: 'boxed' (a `\boxed{}`), or 'any' extractable answer (default). */
  answer?: 'boxed' | 'any';
  /** Require `<think>…</think>` reasoning before the answer. Default false. */
  requireThink?: boolean;
}

function count(text: string, needle: string): number {
  let n = 0;
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) n++;
  return n;
}

/**
 * Whether a model output is well formed: code fences (```) come in pairs, `<think>` tags
 * (if any, or if required) open and close once each with the answer after them, and a final
 * answer is present. Never throws; non-strings are not well formed.
 */
export function checkFormat(text: string, options: FormatOptions = {}): boolean {
  if (typeof text !== 'string') return false;
  if (count(text, '```') % 2 !== 0) return false;
  const opens = count(text, '<think>');
  const closes = count(text, '</think>');
  if (opens !== closes || opens > 1 || (options.requireThink === true && opens === 0)) return false;
  const afterThink = opens === 1 ? text.slice(text.indexOf('</think>') + '</think>'.length) : text;
  if (opens === 1 && text.indexOf('<think>') > text.indexOf('</think>')) return false;
  if (options.answer === 'boxed') return lastBoxed(afterThink) !== null;
  return extractAnswer(afterThink) !== null;
}
