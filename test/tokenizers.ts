/** Test tokenizers whose ids can be counted by hand. */
import type { Tokenizer } from '../lib/sdk.js';

/** One token per UTF-16 unit (its code), specials at 1000+: roles can be counted by hand. */
export const charTokenizer: Tokenizer = {
  name: 'chars',
  vocabSize: 1002,
  specialTokens: { '<|im_start|>': 1000, '<|im_end|>': 1001 },
  encode: (text) => Array.from(text, (c) => c.charCodeAt(0) % 1000),
  decode: (ids) => ids.map((id) => (id === 1000 ? '<|im_start|>' : id === 1001 ? '<|im_end|>' : String.fromCharCode(id))).join(''),
  specialTokenId(text) {
    const id = this.specialTokens[text];
    if (id === undefined) throw new RangeError(text);
    return id;
  },
};
