/** Independent float64 references of sequenceLogprobs and its backward, shared by the op test, the fuzzer and `tirl bench`. */

/** Independent float64 reference: masked sum (or mean) per sequence, as MATH.md defines |y_i|. */
export function reference(logp: ArrayLike<number>, mask: Uint8Array, seqOffsets: Int32Array, average: boolean): Float64Array {
  const b = seqOffsets.length - 1;
  const out = new Float64Array(b);
  for (let i = 0; i < b; i++) {
    let sum = 0;
    let count = 0;
    for (let t = seqOffsets[i]; t < seqOffsets[i + 1]; t++) {
      if (mask[t]) {
        sum += logp[t];
        count++;
      }
    }
    out[i] = average ? (count > 0 ? sum / count : 0) : sum;
  }
  return out;
}

/** Independent backward: the transpose, column by column, by finite differences of the reference. */
export function finiteDifferenceBackward(logp: Float32Array, mask: Uint8Array, seqOffsets: Int32Array, average: boolean, gradSeq: Float32Array): Float64Array {
  const h = 0.5; // the map is linear: any step is exact up to rounding
  const x = Float64Array.from(logp);
  const grad = new Float64Array(x.length);
  for (let t = 0; t < x.length; t++) {
    const v = x[t];
    x[t] = v + h;
    const up = reference(x, mask, seqOffsets, average);
    x[t] = v - h;
    const down = reference(x, mask, seqOffsets, average);
    x[t] = v;
    for (let i = 0; i < gradSeq.length; i++) grad[t] += (gradSeq[i] * (up[i] - down[i])) / (2 * h);
  }
  return grad;
}

/** The backward in closed form: d/dlogp[t] = mask[t] * gradSeq[i], divided by the masked count of i with `average`. */
export function referenceBackward(gradSeq: ArrayLike<number>, mask: Uint8Array, seqOffsets: Int32Array, average: boolean): Float64Array {
  const grad = new Float64Array(mask.length);
  for (let i = 0; i + 1 < seqOffsets.length; i++) {
    let count = 0;
    for (let t = seqOffsets[i]; t < seqOffsets[i + 1]; t++) if (mask[t]) count++;
    for (let t = seqOffsets[i]; t < seqOffsets[i + 1]; t++) {
      grad[t] = mask[t] ? (average ? gradSeq[i] / count : gradSeq[i]) : 0;
    }
  }
  return grad;
}
