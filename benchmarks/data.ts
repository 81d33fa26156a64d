/**
 * Inputs of the benchmark cases: seeded, realistic in shape and value range (ratios near 1
 * with some clipping, masks made of action spans between prompt and tool feedback). The
 * PyTorch peer draws its own inputs with the same shapes and distributions.
 */
import { SeededRandom } from '../lib/training/random.js';
import { sliceUnits, type Arithmetic } from './harness.js';

/** The library's seeded generator with the draws the benchmark inputs need. */
export class Rng extends SeededRandom {
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }
  uniform(n: number, lo: number, hi: number): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * this.next();
    return a;
  }
  /**
   * Bell-shaped values with the given mean and std (the sum of two uniforms, a triangular
   * distribution): cheap for the 155M logits, and the kernels' speed does not depend on
   * the exact shape.
   */
  bell(n: number, mean = 0, std = 1): Float32Array {
    const a = new Float32Array(n);
    const scale = std * Math.sqrt(6); // a sum of 2 U(-0.5, 0.5) has variance 1/6
    for (let i = 0; i < n; i++) a[i] = mean + scale * (this.next() + this.next() - 1);
    return a;
  }
}

/** Token roles (0 prompt, 1 action, 2 feedback, 3 padding) of a padded batch. */
export interface Batch {
  roles: Uint8Array;
  /** 1 where the role is an action: the loss mask. */
  mask: Uint8Array;
  seqOffsets: Int32Array;
  numSeqs: number;
  seqLen: number;
  /** Fraction of tokens with mask 1. */
  maskedIn: number;
}

/**
 * A padded batch of `numSeqs` sequences of `seqLen` tokens shaped like a multi-turn tool-use
 * rollout: a prompt (10% of the sequence), then action spans (40-200 tokens) alternating
 * with tool feedback (10-90 tokens), then padding (0-10%). About 60% of tokens are actions.
 */
export function toolUseBatch(numSeqs: number, seqLen: number, seed = 1): Batch {
  const rng = new Rng(seed);
  const n = numSeqs * seqLen;
  const roles = new Uint8Array(n);
  const seqOffsets = new Int32Array(numSeqs + 1);
  for (let s = 0; s < numSeqs; s++) {
    const base = s * seqLen;
    seqOffsets[s + 1] = base + seqLen;
    const prompt = Math.floor(seqLen * 0.1);
    const padding = Math.floor(seqLen * 0.1 * rng.next());
    let t = prompt; // roles before `prompt` stay 0
    let action = true;
    while (t < seqLen - padding) {
      const span = action ? rng.int(40, 201) : rng.int(10, 91);
      const end = Math.min(seqLen - padding, t + span);
      roles.fill(action ? 1 : 2, base + t, base + end);
      t = end;
      action = !action;
    }
    roles.fill(3, base + seqLen - padding, base + seqLen);
  }
  const mask = new Uint8Array(n);
  let count = 0;
  for (let i = 0; i < n; i++) {
    const m = roles[i] === 1 ? 1 : 0;
    mask[i] = m;
    count += m;
  }
  return { roles, mask, seqOffsets, numSeqs, seqLen, maskedIn: n === 0 ? 0 : count / n };
}

type TypedArray = Float32Array | Float64Array | Int32Array | Uint8Array | Uint16Array;

/**
 * The first `seqs` sequences of a ragged batch, for a case's in-cache slice
 * (CaseSetup.arithmetic): in `value` and the objects it holds (an `out`), each typed array
 * of one entry a token (seqOffsets' last entry) is cut at seqOffsets[seqs], each of a whole
 * number of blocks of one entry a sequence (gdpo's reward components) keeps the first
 * `seqs` of every block, and seqOffsets itself its first seqs + 1; other values are kept.
 * Token arrays are views; a sequence array of several blocks is a copy.
 */
export function firstSequences<T>(value: T, seqOffsets: Int32Array, seqs: number): T {
  const numSeqs = seqOffsets.length - 1;
  const tokens = seqOffsets[numSeqs];
  const cut = (x: unknown): unknown => {
    if (x === seqOffsets) return seqOffsets.subarray(0, seqs + 1);
    if (ArrayBuffer.isView(x) && !(x instanceof DataView)) {
      const array = x as TypedArray;
      if (array.length === tokens) return array.subarray(0, seqOffsets[seqs]);
      if (numSeqs > 0 && array.length % numSeqs === 0) {
        const blocks = array.length / numSeqs;
        if (blocks === 1) return array.subarray(0, seqs);
        const kept = new (array.constructor as new (n: number) => TypedArray)(blocks * seqs);
        for (let b = 0; b < blocks; b++) kept.set(array.subarray(b * numSeqs, b * numSeqs + seqs), b * seqs);
        return kept;
      }
      return array;
    }
    if (x !== null && typeof x === 'object' && !Array.isArray(x)) {
      return Object.fromEntries(Object.entries(x).map(([key, v]) => [key, cut(v)]));
    }
    return x;
  };
  return cut(value) as T;
}

/**
 * A case's in-cache slices (CaseSetup.arithmetic) of a ragged batch: `op` on its first
 * sequences (firstSequences), in units of `unitSeqs` sequences (whole groups), for a case
 * of `bytes` in all.
 */
export function sequenceSlices<T>(op: (options: T) => unknown, options: T, seqOffsets: Int32Array, bytes: number, unitSeqs = 1): Arithmetic {
  const total = Math.floor((seqOffsets.length - 1) / unitSeqs);
  return {
    slice(units) {
      const head = firstSequences(options, seqOffsets, units * unitSeqs);
      return () => op(head);
    },
    units: sliceUnits(bytes, total),
    total,
  };
}

/** bf16 bits of a float32 array (round to nearest even). */
export function toBf16(values: Float32Array): Uint16Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const b = bits[i];
    out[i] = (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
  }
  return out;
}

/** Logits like a language model's: bell-shaped with std 2, plus a few large ones per row. */
export function logitsLike(numTokens: number, vocabSize: number, seed = 7): Float32Array {
  const rng = new Rng(seed);
  const logits = rng.bell(numTokens * vocabSize, 0, 2);
  for (let t = 0; t < numTokens; t++) {
    for (let k = 0; k < 4; k++) logits[t * vocabSize + rng.int(0, vocabSize)] += 12;
  }
  return logits;
}

export function labelsFor(numTokens: number, vocabSize: number, seed = 11): Int32Array {
  const rng = new Rng(seed);
  const labels = new Int32Array(numTokens);
  for (let i = 0; i < numTokens; i++) labels[i] = rng.int(0, vocabSize);
  return labels;
}
