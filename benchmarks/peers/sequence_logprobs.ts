/**
 * sequenceLogprobs and its backward in plain TypeScript, single-threaded: per-sequence
 * sums of masked log-probs (float64 accumulator), and the broadcast of each sequence's
 * gradient to its masked tokens.
 */
export function sequenceLogprobsTs(logp: Float32Array, mask: Uint8Array, seqOffsets: Int32Array, out: Float32Array): void {
  for (let s = 0; s + 1 < seqOffsets.length; s++) {
    let sum = 0;
    for (let t = seqOffsets[s]; t < seqOffsets[s + 1]; t++) if (mask[t] !== 0) sum += logp[t];
    out[s] = sum;
  }
}

export function sequenceLogprobsBackwardTs(gradSeq: Float32Array, mask: Uint8Array, seqOffsets: Int32Array, out: Float32Array): void {
  for (let s = 0; s + 1 < seqOffsets.length; s++) {
    const g = gradSeq[s];
    for (let t = seqOffsets[s]; t < seqOffsets[s + 1]; t++) out[t] = mask[t] === 0 ? 0 : g;
  }
}
