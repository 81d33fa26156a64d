/**
 * The demo's policy: the GRU language model behind tirl's `TfjsPolicy`, so its log-probs,
 * losses and gradients run through tirl's kernels (tokenLogprobs forward and backward).
 * Sampling is overridden to carry the GRU state forward token by token instead of
 * re-reading the whole context for every sampled token.
 */
import * as tf from '@tensorflow/tfjs';

import type { ObservationRole, SampleOptions, SampledTurn, SeededRandom } from '../../lib/index.js';
import { TfjsPolicy } from '../../lib/training/tfjs.js';
import { GruLanguageModel } from './model.js';
import { TOKEN, VOCAB_SIZE, decode, encode } from './vocab.js';

export interface DemoPolicyOptions {
  hidden: number;
  learningRate: number;
  rng: SeededRandom;
}

export class DemoPolicy extends TfjsPolicy {
  readonly network: GruLanguageModel;

  constructor({ hidden, learningRate, rng }: DemoPolicyOptions) {
    const network = new GruLanguageModel({ vocabSize: VOCAB_SIZE, hidden }, rng);
    super({
      model: (tokens) => network.logits(tokens),
      variables: network.variables,
      optimizer: tf.train.adam(learningRate),
      tokenizer: {
        encode: (text: string, role: ObservationRole) =>
          Int32Array.from(role === 'prompt' ? [TOKEN.bos, ...encode(text)] : encode(text)),
        decode: (tokens: Int32Array) => decode(tokens),
      },
      stopTokens: [TOKEN.calcEnd, TOKEN.ansEnd],
      padToken: TOKEN.pad,
    });
    this.network = network;
  }

  override async sampleTurns(contexts: readonly Int32Array[], options: SampleOptions): Promise<SampledTurn[]> {
    const turns = contexts.map(() => ({ tokens: [] as number[], logprobs: [] as number[], open: true }));
    // Read all but the last context token; the loop feeds that one and samples after it.
    let state = this.network.readContexts(contexts.map((c) => c.subarray(0, c.length - 1)));
    const inputs = Int32Array.from(contexts, (c) => c[c.length - 1]);
    for (let step = 0; step < options.maxTokens && turns.some((t) => t.open); step++) {
      const { logits, state: next } = this.network.step(inputs, state);
      const values = logits.dataSync() as Float32Array;
      tf.dispose([logits, state]);
      state = next;
      turns.forEach((turn, i) => {
        if (!turn.open) return;
        const { token, logprob } = sampleFromLogits(values.subarray(i * VOCAB_SIZE, (i + 1) * VOCAB_SIZE), options.random);
        turn.tokens.push(token);
        turn.logprobs.push(logprob);
        inputs[i] = token;
        if (token === TOKEN.calcEnd || token === TOKEN.ansEnd) turn.open = false;
      });
    }
    state.dispose();
    return turns.map((t) => {
      const tokens = Int32Array.from(t.tokens);
      return { tokens, logprobs: Float32Array.from(t.logprobs), text: decode(tokens) };
    });
  }
}

/** Draws a token from softmax(logits) (temperature 1, what the loss scores). */
function sampleFromLogits(logits: Float32Array, random: () => number): { token: number; logprob: number } {
  let max = -Infinity;
  for (const z of logits) max = Math.max(max, z);
  let total = 0;
  for (const z of logits) total += Math.exp(z - max);
  let u = random() * total;
  let token = logits.length - 1;
  for (let v = 0; v < logits.length; v++) {
    u -= Math.exp(logits[v] - max);
    if (u < 0) {
      token = v;
      break;
    }
  }
  return { token, logprob: logits[token] - max - Math.log(total) };
}
