/**
 * Tokenizers: a small interface, and a real byte-level BPE tokenizer that works offline
 * (js-tiktoken ships its vocabularies inside the package).
 */
import { Tiktoken } from 'js-tiktoken/lite';
import { rangeError, typeError } from '../check.js';

/** What packing and templates need from a tokenizer. */
export interface Tokenizer {
  /** Name of the vocabulary, e.g. "cl100k_base". */
  readonly name: string;
  /** One more than the largest token id (ids lie in [0, vocabSize)). */
  readonly vocabSize: number;
  /** Special tokens by their text, e.g. { "<|im_end|>": 100265 }. */
  readonly specialTokens: Readonly<Record<string, number>>;
  /** Encodes ordinary text; special-token strings inside it are encoded as plain text. */
  encode(text: string): number[];
  /** Decodes token ids (special tokens included) back to text. */
  decode(tokenIds: readonly number[]): string;
  /** Id of a special token by its text. @throws RangeError if the tokenizer has no such token. */
  specialTokenId(text: string): number;
}

/** Vocabularies of js-tiktoken that this SDK loads. */
export type TiktokenEncodingName = 'cl100k_base' | 'o200k_base';

/** Options for `loadTiktokenTokenizer`. */
export interface TiktokenTokenizerOptions {
  /**
   * Special tokens to add, by text and id. Default: the ChatML tokens `<|im_start|>` and
   * `<|im_end|>` (cl100k_base: 100264 and 100265, as OpenAI's chat models used them;
   * o200k_base: the first two ids after its vocabulary).
   */
  specialTokens?: Record<string, number>;
  /**
   * Longest pre-tokenizer piece (in UTF-16 code units) that is byte-pair merged whole.
   * js-tiktoken merges a piece in time quadratic in its length (a million-letter word would
   * take hours), so longer pieces — runs of one character, base64 blobs — are merged in
   * chunks of `chunkChars`. Ordinary text is tokenized exactly as tiktoken does. Default 64.
   */
  maxPieceChars?: number;
  /** Chunk length for pieces longer than `maxPieceChars`. Default 16. */
  chunkChars?: number;
}

/** Rank files as js-tiktoken ships them. */
interface RankFile { pat_str: string; special_tokens: Record<string, number>; bpe_ranks: string }

async function loadRanks(encoding: TiktokenEncodingName): Promise<RankFile> {
  switch (encoding) {
    case 'cl100k_base': return (await import('js-tiktoken/ranks/cl100k_base')).default as RankFile;
    case 'o200k_base': return (await import('js-tiktoken/ranks/o200k_base')).default as RankFile;
    default: throw typeError('encoding', "'cl100k_base' or 'o200k_base'", encoding);
  }
}

const CHATML_IDS: Record<TiktokenEncodingName, Record<string, number>> = {
  cl100k_base: { '<|im_start|>': 100264, '<|im_end|>': 100265 },
  o200k_base: { '<|im_start|>': 200019, '<|im_end|>': 200020 },
};

/** A byte-level BPE tokenizer backed by js-tiktoken. Create it with `loadTiktokenTokenizer`. */
export class TiktokenTokenizer implements Tokenizer {
  readonly name: string;
  readonly vocabSize: number;
  readonly specialTokens: Readonly<Record<string, number>>;
  readonly #encoder: Tiktoken;
  readonly #pieceRegex: RegExp;
  readonly #maxPieceChars: number;
  readonly #chunkChars: number;
  readonly #idsBySpecialText: Map<string, number>;

  /** @internal Use `loadTiktokenTokenizer`. */
  constructor(name: string, ranks: RankFile, specialTokens: Record<string, number>, maxPieceChars: number, chunkChars: number) {
    this.name = name;
    this.#encoder = new Tiktoken(ranks, specialTokens);
    this.#pieceRegex = new RegExp(ranks.pat_str, 'gu');
    this.#maxPieceChars = maxPieceChars;
    this.#chunkChars = chunkChars;
    const allSpecial = { ...ranks.special_tokens, ...specialTokens };
    this.specialTokens = Object.freeze(allSpecial);
    this.#idsBySpecialText = new Map(Object.entries(allSpecial));
    // The last line of a rank file holds the largest ordinary rank.
    const lines = ranks.bpe_ranks.trimEnd().split('\n');
    const last = lines[lines.length - 1]!.split(' ');
    const largestOrdinary = Number.parseInt(last[1]!, 10) + last.length - 3;
    this.vocabSize = Math.max(largestOrdinary, ...Object.values(allSpecial)) + 1;
  }

  encode(text: string): number[] {
    if (typeof text !== 'string') throw typeError('text', 'a string', text);
    const ids: number[] = [];
    let segmentStart = 0;
    // Pieces are matched as tiktoken matches them; text between long pieces is encoded
    // in one call, which yields the same ids as encoding the whole text.
    for (const match of text.matchAll(this.#pieceRegex)) {
      const piece = match[0];
      if (piece.length <= this.#maxPieceChars) continue;
      const start = match.index;
      if (start > segmentStart) this.#encodeExact(text.slice(segmentStart, start), ids);
      const cache = new Map<string, number[]>();
      for (let at = 0; at < piece.length;) {
        let end = Math.min(at + this.#chunkChars, piece.length);
        // Keep surrogate pairs whole so no chunk ends in half a character.
        if (end < piece.length && /[\uD800-\uDBFF]/.test(piece[end - 1]!)) end++;
        const chunk = piece.slice(at, end);
        let chunkIds = cache.get(chunk);
        if (chunkIds === undefined) {
          chunkIds = [];
          this.#encodeExact(chunk, chunkIds);
          cache.set(chunk, chunkIds);
        }
        for (const id of chunkIds) ids.push(id);
        at = end;
      }
      segmentStart = start + piece.length;
    }
    if (segmentStart < text.length) this.#encodeExact(text.slice(segmentStart), ids);
    return ids;
  }

  #encodeExact(text: string, into: number[]): void {
    // No special token is allowed or disallowed: their text in content is ordinary text.
    for (const id of this.#encoder.encode(text, [], [])) into.push(id);
  }

  decode(tokenIds: readonly number[]): string {
    if (!Array.isArray(tokenIds) && !ArrayBuffer.isView(tokenIds)) throw typeError('tokenIds', 'an array of token ids', tokenIds);
    return this.#encoder.decode(Array.from(tokenIds));
  }

  specialTokenId(text: string): number {
    const id = this.#idsBySpecialText.get(text);
    if (id === undefined) throw rangeError('text', `one of the special tokens ${[...this.#idsBySpecialText.keys()].join(', ')}`, text);
    return id;
  }
}

const loaded = new Map<string, Promise<TiktokenTokenizer>>();

/**
 * Loads a js-tiktoken vocabulary (offline; about one second the first time) and returns a
 * tokenizer. Loads with the default options are cached, so repeated calls share one instance.
 * @param encoding 'cl100k_base' (default) or 'o200k_base'.
 */
export function loadTiktokenTokenizer(
  encoding: TiktokenEncodingName = 'cl100k_base',
  options: TiktokenTokenizerOptions = {},
): Promise<TiktokenTokenizer> {
  if (encoding !== 'cl100k_base' && encoding !== 'o200k_base') throw typeError('encoding', "'cl100k_base' or 'o200k_base'", encoding);
  const maxPieceChars = options.maxPieceChars ?? 64;
  const chunkChars = options.chunkChars ?? 16;
  if (!Number.isInteger(maxPieceChars) || maxPieceChars < 1) throw rangeError('options.maxPieceChars', 'a positive integer', maxPieceChars);
  if (!Number.isInteger(chunkChars) || chunkChars < 2 || chunkChars > maxPieceChars) {
    throw rangeError('options.chunkChars', `an integer in [2, ${maxPieceChars}]`, chunkChars);
  }
  const specialTokens = options.specialTokens ?? CHATML_IDS[encoding];
  const isDefault = options.specialTokens === undefined && maxPieceChars === 64 && chunkChars === 16;
  const make = async () => new TiktokenTokenizer(encoding, await loadRanks(encoding), specialTokens, maxPieceChars, chunkChars);
  if (!isDefault) return make();
  let tokenizer = loaded.get(encoding);
  if (tokenizer === undefined) {
    tokenizer = make();
    loaded.set(encoding, tokenizer);
  }
  return tokenizer;
}
