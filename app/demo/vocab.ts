/**
 * The demo's vocabulary: digits are single tokens, so numbers are spelled digit by digit
 * and the policy can copy them; markers delimit tool calls, tool output and answers.
 */

export const SPECIAL = ['<pad>', '<bos>', '<calc>', '</calc>', '<out>', '</out>', '<ans>', '</ans>', '<err>'] as const;
const DIGITS = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'] as const;
const OPERATORS = ['+', '-', '*', '/', '(', ')'] as const;
/** References the tool resolves: the question's numbers in order, and the last tool result. */
export const REFERENCES = ['#1', '#2', '#3', '#r'] as const;
const WORDS = [
  'what', 'is', 'times', 'plus', 'minus', 'how', 'many', 'in', '?', '.', 'a', 'box', 'holds',
  'items', 'boxes', 'm', 'km', 'g', 'kg', 'minutes', 'hours', 'seconds', 'then', 'add', 'multiply', 'by',
] as const;

export const VOCAB: readonly string[] = [...SPECIAL, ...DIGITS, ...OPERATORS, ...REFERENCES, ...WORDS];
export const VOCAB_SIZE = VOCAB.length;

const INDEX = new Map(VOCAB.map((token, id) => [token, id]));

/** Token id of a vocabulary entry; throws for unknown text (a bug in the demo, not model output). */
export function tokenId(token: string): number {
  const id = INDEX.get(token);
  if (id === undefined) throw new RangeError(`demo vocabulary has no token '${token}'`);
  return id;
}

export const TOKEN = {
  pad: tokenId('<pad>'),
  bos: tokenId('<bos>'),
  calc: tokenId('<calc>'),
  calcEnd: tokenId('</calc>'),
  out: tokenId('<out>'),
  outEnd: tokenId('</out>'),
  ans: tokenId('<ans>'),
  ansEnd: tokenId('</ans>'),
  err: tokenId('<err>'),
} as const;

/** Splits text into tokens: words and markers by spaces; numbers, operators and references glyph by glyph. */
export function encode(text: string): number[] {
  const ids: number[] = [];
  for (const piece of text.split(/\s+/).filter(Boolean)) {
    if (INDEX.has(piece)) ids.push(INDEX.get(piece)!);
    else for (const glyph of piece.match(/#[0-9r]|./g) ?? []) ids.push(tokenId(glyph));
  }
  return ids;
}

/** Renders ids as text, digits of one number joined (`3 4 7` -> `347`). */
export function decode(ids: ArrayLike<number>): string {
  let text = '';
  let previousWasGlyph = false;
  for (let i = 0; i < ids.length; i++) {
    const token = VOCAB[ids[i]] ?? '<?>';
    const glyph = /^([0-9+\-*/()]|#[0-9r])$/.test(token);
    text += (text && !(glyph && previousWasGlyph) ? ' ' : '') + token;
    previousWasGlyph = glyph;
  }
  return text;
}
