/**
 * Independent float64 reference of tokenLogprobs and its backward (MATH.md), and bf16
 * rounding, shared by the op test, the fuzzer and `tirl bench`.
 */

/**
 * log softmax(x / T) of row t in float64 by max subtraction: log p_v = (z_v - max) - log sum
 * exp(z - max). A row with a NaN, a +Infinity, or only -Infinity gives NaN (as PyTorch).
 */
export function logSoftmaxRow(x: ArrayLike<number>, vocabSize: number, t: number, temperature: number): Float64Array {
  const z = new Float64Array(vocabSize);
  let max = -Infinity;
  let nan = false;
  for (let v = 0; v < vocabSize; v++) {
    z[v] = x[t * vocabSize + v] / temperature;
    if (Number.isNaN(z[v])) nan = true;
    if (z[v] > max) max = z[v];
  }
  if (nan || max === Infinity || max === -Infinity) return z.fill(NaN);
  let sum = 0;
  for (let v = 0; v < vocabSize; v++) sum += Math.exp(z[v] - max);
  const logSum = Math.log(sum);
  return z.map((zv) => zv - max - logSum);
}

export interface Reference {
  logp: Float64Array;
  entropy: Float64Array;
}

/** log p(label) and the entropy H = -sum p log p (terms with p = 0 add 0) per row. */
export function reference(x: ArrayLike<number>, vocabSize: number, labels: Int32Array, temperature: number): Reference {
  const n = labels.length;
  const logp = new Float64Array(n);
  const entropy = new Float64Array(n);
  for (let t = 0; t < n; t++) {
    const lp = logSoftmaxRow(x, vocabSize, t, temperature);
    logp[t] = lp[labels[t]];
    let h = 0;
    for (const l of lp) h -= l === -Infinity ? 0 : Math.exp(l) * l;
    entropy[t] = h;
  }
  return { logp, entropy };
}

/** dL/dlogits for L = sum gLogp * logp + sum gEntropy * H, from the closed form of MATH.md. */
export function referenceGrad(
  x: ArrayLike<number>,
  vocabSize: number,
  labels: Int32Array,
  temperature: number,
  gradLogp: Float32Array,
  gradEntropy?: Float32Array,
): Float64Array {
  const { entropy } = reference(x, vocabSize, labels, temperature);
  const grad = new Float64Array(labels.length * vocabSize);
  for (let t = 0; t < labels.length; t++) {
    const lp = logSoftmaxRow(x, vocabSize, t, temperature);
    const gh = gradEntropy ? gradEntropy[t] : 0;
    for (let v = 0; v < vocabSize; v++) {
      const p = Math.exp(lp[v]);
      // p = 0 adds 0 (the limit of p log p), times gh so that a NaN gradient still poisons the row.
      const entropyPart = p === 0 ? 0 * gh : gh * p * (lp[v] + entropy[t]);
      const dz = gradLogp[t] * ((v === labels[t] ? 1 : 0) - p) - entropyPart;
      grad[t * vocabSize + v] = dz / temperature;
    }
  }
  return grad;
}

/** The loss whose gradient the backward returns, in float64. */
export function referenceLoss(x: ArrayLike<number>, v: number, labels: Int32Array, temperature: number, gl: Float32Array, gh?: Float32Array) {
  const { logp, entropy } = reference(x, v, labels, temperature);
  let loss = 0;
  for (let t = 0; t < labels.length; t++) loss += gl[t] * logp[t] + (gh ? gh[t] * entropy[t] : 0);
  return loss;
}

/** Rounds float32 values to bfloat16 (round to nearest even), as raw bits. */
export function toBf16(x: Float32Array): Uint16Array {
  const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const b = bits[i];
    if ((b & 0x7fffffff) > 0x7f800000) out[i] = (b >>> 16) | 0x40; // NaN stays a quiet NaN
    else out[i] = (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
  }
  return out;
}

export function fromBf16(bits: Uint16Array): Float32Array {
  const wide = new Uint32Array(bits.length);
  for (let i = 0; i < bits.length; i++) wide[i] = bits[i] << 16;
  return new Float32Array(wide.buffer);
}

// The fused form the benchmark times as its "TypeScript, 1 thread" peer: the same math written
// for speed (single passes, no allocation per call), checked against the reference above in
// the op test.

/**
 * tokenLogprobs and its backward in plain TypeScript, single-threaded, one row at a time
 * (a row of 32,000 or 151,936 floats stays in the L2 cache between its passes): max, sum
 * of exponentials, then the label's log-probability, or the gradient
 * dlogits = g·(1[v = label] − p_v). Temperature 1, as benchmarked. bf16 rows are first
 * widened into a float32 scratch row (bf16 is the top half of a float32).
 */

/** log Σ exp(row[base .. base + size)), two passes. */
function logSumExp(row: Float32Array, base: number, size: number): number {
  let max = -Infinity;
  for (let v = base; v < base + size; v++) if (row[v] > max) max = row[v];
  let sum = 0;
  for (let v = base; v < base + size; v++) sum += Math.exp(row[v] - max);
  return max + Math.log(sum);
}

/** Widens bf16 row `t` into `scratch` (whose bits view is `scratchBits`). */
function widenRow(bits: Uint16Array, t: number, size: number, scratchBits: Uint32Array): void {
  const base = t * size;
  for (let v = 0; v < size; v++) scratchBits[v] = bits[base + v] << 16;
}

export function tokenLogprobsTs(logits: Float32Array, vocabSize: number, labels: Int32Array, logp: Float32Array): void {
  for (let t = 0; t < labels.length; t++) {
    const base = t * vocabSize;
    logp[t] = logits[base + labels[t]] - logSumExp(logits, base, vocabSize);
  }
}

export function tokenLogprobsBf16Ts(logits: Uint16Array, vocabSize: number, labels: Int32Array, logp: Float32Array): void {
  const scratch = new Float32Array(vocabSize);
  const scratchBits = new Uint32Array(scratch.buffer);
  for (let t = 0; t < labels.length; t++) {
    widenRow(logits, t, vocabSize, scratchBits);
    logp[t] = scratch[labels[t]] - logSumExp(scratch, 0, vocabSize);
  }
}

function backwardRow(
  row: Float32Array,
  base: number,
  vocabSize: number,
  label: number,
  g: number,
  grad: Float32Array,
  gradBase: number,
): void {
  const lse = logSumExp(row, base, vocabSize);
  for (let v = 0; v < vocabSize; v++) grad[gradBase + v] = -g * Math.exp(row[base + v] - lse);
  grad[gradBase + label] += g;
}

export function tokenLogprobsBackwardTs(
  logits: Float32Array,
  vocabSize: number,
  labels: Int32Array,
  gradLogp: Float32Array,
  grad: Float32Array,
): void {
  for (let t = 0; t < labels.length; t++) {
    backwardRow(logits, t * vocabSize, vocabSize, labels[t], gradLogp[t], grad, t * vocabSize);
  }
}

export function tokenLogprobsBackwardBf16Ts(
  logits: Uint16Array,
  vocabSize: number,
  labels: Int32Array,
  gradLogp: Float32Array,
  grad: Float32Array,
): void {
  const scratch = new Float32Array(vocabSize);
  const scratchBits = new Uint32Array(scratch.buffer);
  for (let t = 0; t < labels.length; t++) {
    widenRow(logits, t, vocabSize, scratchBits);
    backwardRow(scratch, 0, vocabSize, labels[t], gradLogp[t], grad, t * vocabSize);
  }
}
