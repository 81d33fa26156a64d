/** Broadcast of sequence- and turn-level values to the action tokens that earned them. */
import type { TokenBatch } from '../trajectory/batch.js';
import { typeError } from '../check.js';

function checkMask(mask: Uint8Array, length: number): void {
  if (!(mask instanceof Uint8Array) || mask.length !== length) throw typeError('mask', `a Uint8Array of length ${length}`, mask);
}

function checkOut(out: Float32Array | undefined, length: number): Float32Array {
  if (out === undefined) return new Float32Array(length);
  if (!(out instanceof Float32Array) || out.length !== length) throw typeError('out', `a Float32Array of length ${length}`, out);
  return out.fill(0);
}

/**
 * Per-token values from per-sequence values: token t of sequence i gets `values[i]` where
 * `mask[t]` is 1 and 0 elsewhere — the `advantages` input of `ppoLoss`.
 * @param values Float32Array[B], e.g. group advantages.
 * @param mask Uint8Array[N], the loss mask from `feedbackMask`.
 * @param seqOffsets Int32Array[B+1].
 * @param out optional Float32Array[N] to write into.
 */
export function broadcastToTokens(values: Float32Array, mask: Uint8Array, seqOffsets: Int32Array, out?: Float32Array): Float32Array {
  if (!(seqOffsets instanceof Int32Array) || seqOffsets.length < 1) throw typeError('seqOffsets', 'an Int32Array of length B+1', seqOffsets);
  const size = seqOffsets.length - 1;
  if (!(values instanceof Float32Array) || values.length !== size) throw typeError('values', `a Float32Array of length ${size}`, values);
  const total = seqOffsets[size]!;
  checkMask(mask, total);
  const result = checkOut(out, total);
  for (let i = 0; i < size; i++) {
    const value = values[i]!;
    for (let t = seqOffsets[i]!; t < seqOffsets[i + 1]!; t++) if (mask[t] !== 0) result[t] = value;
  }
  return result;
}

/**
 * Per-token values from per-turn values: the action tokens of turn k get `turnValues[k]`
 * where `mask` is 1; feedback, prompt and padding get 0.
 * @param turnValues Float32Array[T], T = batch.turnOffsets[B] (global turn order of the batch).
 * @param mask Uint8Array[N], the loss mask from `feedbackMask`.
 */
export function broadcastTurnsToTokens(turnValues: Float32Array, mask: Uint8Array, batch: TokenBatch, out?: Float32Array): Float32Array {
  const turns = batch.turnStarts.length;
  if (!(turnValues instanceof Float32Array) || turnValues.length !== turns) throw typeError('turnValues', `a Float32Array of length ${turns}`, turnValues);
  const total = batch.seqOffsets[batch.size]!;
  checkMask(mask, total);
  const result = checkOut(out, total);
  for (let k = 0; k < turns; k++) {
    const value = turnValues[k]!;
    for (let t = batch.turnStarts[k]!; t < batch.turnActionEnds[k]!; t++) if (mask[t] !== 0) result[t] = value;
  }
  return result;
}
