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
