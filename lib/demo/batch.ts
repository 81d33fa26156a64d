/**
 * Packs episodes into the padded layout the model trains on: row b * T + t is the
 * prediction of token t + 1 of episode b from tokens 0..t, with that token's role and
 * behaviour log-prob. Padding rows carry the padding role, so the feedbackMask kernel
 * leaves them (and prompt and tool-feedback tokens) out of every loss.
 */
import { Role, feedbackMask } from '../kernels/index.js';
import type { Episode } from './episode.js';
import { TOKEN } from './vocab.js';

export interface PackedBatch {
  batch: number;
  steps: number;
  /** Model inputs, [B * T]. */
  inputs: Int32Array;
  /** Next-token labels, [B * T]. */
  labels: Int32Array;
  roles: Uint8Array;
  oldLogp: Float32Array;
  seqOffsets: Int32Array;
  /** Loss mask from the feedbackMask kernel: action tokens of kept episodes. */
  mask: Uint8Array;
  actionTokens: Int32Array;
}

/** Packs `episodes`; `keep[b] = 0` masks episode b out of the loss (a filtered trajectory). */
export function packEpisodes(episodes: readonly Episode[], keep?: Uint8Array): PackedBatch {
  const batch = episodes.length;
  const steps = Math.max(1, ...episodes.map((e) => e.tokens.length));
  const size = batch * steps;
  const inputs = new Int32Array(size).fill(TOKEN.pad);
  const labels = new Int32Array(size).fill(TOKEN.pad);
  const roles = new Uint8Array(size).fill(Role.padding);
  const oldLogp = new Float32Array(size);
  const seqOffsets = new Int32Array(batch + 1);
  episodes.forEach((episode, b) => {
    const row = b * steps;
    seqOffsets[b + 1] = row + steps;
    const n = episode.tokens.length;
    for (let t = 0; t < n; t++) inputs[row + t] = episode.tokens[t];
    for (let t = 0; t + 1 < n; t++) {
      labels[row + t] = episode.tokens[t + 1];
      roles[row + t] = episode.roles[t + 1];
      oldLogp[row + t] = episode.behaviourLogp[t + 1];
    }
  });
  const { mask, actionTokens } = feedbackMask({ roles, seqOffsets, keep });
  return { batch, steps, inputs, labels, roles, oldLogp, seqOffsets, mask, actionTokens };
}
