/**
 * feedbackMask in plain TypeScript, single-threaded: one pass over the roles, writing the
 * mask and counting per sequence. Same math as MATH.md "Feedback masking".
 */
export function feedbackMaskTs(
  roles: Uint8Array,
  seqOffsets: Int32Array,
  keep: Uint8Array | undefined,
  mask: Uint8Array,
  actionTokens: Int32Array,
): void {
  const numSeqs = seqOffsets.length - 1;
  for (let s = 0; s < numSeqs; s++) {
    const end = seqOffsets[s + 1];
    let count = 0;
    if (keep !== undefined && keep[s] === 0) {
      mask.fill(0, seqOffsets[s], end);
    } else {
      for (let t = seqOffsets[s]; t < end; t++) {
        const m = roles[t] === 1 ? 1 : 0;
        mask[t] = m;
        count += m;
      }
    }
    actionTokens[s] = count;
  }
}
