import { typeError } from '../check.js';
/** SimpleTIR's void-turn rule (MATH.md): a turn with neither a complete code block nor a final answer. */

/** Options for `isVoidTurn`. */
export interface VoidTurnOptions {
  /** Languages whose fenced blocks count as code (case-insensitive). Default ['python']. */
  codeLanguages?: readonly string[];
  /**
   * Markers of a final answer. A marker ending in `{` or `(` counts only when its bracket
   * closes (so `\boxed{5` is not an answer). Default ['\\boxed{', 'final_answer('].
   */
  answerMarkers?: readonly string[];
  /** Delimiter pairs that also make a code block (e.g. `{ open: '<calc>', close: '</calc>' }`): an opening one followed by its closing one. Default none. */
  codeMarkup?: readonly { open: string; close: string }[];
  /** Delimiter pairs that also make a final answer (e.g. `{ open: '<ans>', close: '</ans>' }`). Default none. */
  answerMarkup?: readonly { open: string; close: string }[];
}

/** Whether `text` holds `open` followed later by `close`. */
function hasPair(text: string, pair: { open: string; close: string }): boolean {
  const open = text.indexOf(String(pair.open));
  return open >= 0 && text.indexOf(String(pair.close), open + String(pair.open).length) >= 0;
}

const DEFAULT_LANGUAGES = ['python'];
const DEFAULT_MARKERS = ['\\boxed{', 'final_answer('];

/** Whether `text` has an opening ```lang fence (at a line start) followed by a closing fence. */
function hasCompleteCodeBlock(text: string, lower: string, language: string): boolean {
  const fence = '```' + language.toLowerCase();
  for (let at = lower.indexOf(fence); at >= 0; at = lower.indexOf(fence, at + 1)) {
    const after = at + fence.length;
    // "```python" must end its line: "```pythonic" is another language.
    const next = lower[after];
    if (next !== undefined && next !== '\n' && next !== '\r' && next !== ' ' && next !== '\t') continue;
    if (text.indexOf('```', after) >= 0) return true;
    return false;
  }
  return false;
}

function hasClosedMarker(text: string, marker: string): boolean {
  const open = marker[marker.length - 1];
  const close = open === '{' ? '}' : open === '(' ? ')' : null;
  const first = text.indexOf(marker);
  if (first < 0 || close === null) return first >= 0;
  // One pass with a stack of open brackets, each remembering whether a marker opened it.
  const openedByMarker: boolean[] = [];
  for (let i = first; i < text.length; i++) {
    if (text.startsWith(marker, i)) {
      openedByMarker.push(true);
      i += marker.length - 1;
    } else if (text[i] === open) {
      openedByMarker.push(false);
    } else if (text[i] === close && openedByMarker.pop() === true) {
      return true;
    }
  }
  return false;
}

/**
 * Whether a turn's text is void: it holds neither a complete code block (an opening
 * ```python fence and its closing fence, or a `codeMarkup` pair) nor a final answer
 * (`\boxed{…}`, `final_answer(…)`, or an `answerMarkup` pair). A non-string is void.
 * @throws TypeError for malformed options.
 */
export function isVoidTurn(text: string, options: VoidTurnOptions = {}): boolean {
  if (typeof text !== 'string') return true;
  const languages = options.codeLanguages ?? DEFAULT_LANGUAGES;
  const markers = options.answerMarkers ?? DEFAULT_MARKERS;
  if (!Array.isArray(languages)) throw typeError('options.codeLanguages', 'an array of strings', languages);
  if (!Array.isArray(markers)) throw typeError('options.answerMarkers', 'an array of strings', markers);
  const pairs = [...(options.codeMarkup ?? []), ...(options.answerMarkup ?? [])];
  if (!pairs.every((pair) => pair !== null && typeof pair === 'object' && typeof pair.open === 'string' && pair.open !== '' && typeof pair.close === 'string' && pair.close !== '')) {
    throw typeError('options.codeMarkup/answerMarkup', 'arrays of { open, close } non-empty strings', pairs);
  }
  const lower = text.toLowerCase();
  for (const language of languages) if (hasCompleteCodeBlock(text, lower, String(language))) return false;
  for (const marker of markers) if (marker !== '' && hasClosedMarker(text, String(marker))) return false;
  for (const pair of pairs) if (hasPair(text, pair)) return false;
  return true;
}
