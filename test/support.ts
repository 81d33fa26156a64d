/**
 * Test helpers shared by the kernel tests: a seeded random source, float64 comparison,
 * ragged batches, and the bad-input table runner.
 */
import assert from 'node:assert/strict';

import { SeededRandom } from '../lib/training/random.js';

/** The library's seeded PRNG with the draws tests need: tests are reproducible. */
export class Random extends SeededRandom {
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }
  /** Integer in [lo, hi). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }
  /** Standard normal (Box-Muller). */
  normal(): number {
    const u = 1 - this.next();
    const v = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
  floats(n: number, lo: number, hi: number): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = this.uniform(lo, hi);
    return a;
  }
  normals(n: number, scale = 1): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = this.normal() * scale;
    return a;
  }
  /** A 0/1 mask with probability `p` of 1. */
  mask(n: number, p: number): Uint8Array {
    const a = new Uint8Array(n);
    for (let i = 0; i < n; i++) a[i] = this.next() < p ? 1 : 0;
    return a;
  }
  /** Ragged offsets for `b` sequences of lengths in [minLen, maxLen]. */
  seqOffsets(b: number, minLen: number, maxLen: number): Int32Array {
    const offsets = new Int32Array(b + 1);
    for (let i = 0; i < b; i++) offsets[i + 1] = offsets[i] + this.int(minLen, maxLen + 1);
    return offsets;
  }
}

/** Sequence index of every token, from ragged offsets. */
export function sequenceOf(seqOffsets: Int32Array): Int32Array {
  const n = seqOffsets[seqOffsets.length - 1];
  const seq = new Int32Array(n);
  for (let i = 0; i + 1 < seqOffsets.length; i++) seq.fill(i, seqOffsets[i], seqOffsets[i + 1]);
  return seq;
}

/**
 * Asserts |actual - expected| <= atol + rtol * |expected| elementwise; non-finite values
 * must match exactly (NaN with NaN, +Inf with +Inf).
 */
export function assertClose(
  actual: ArrayLike<number> | number,
  expected: ArrayLike<number> | number,
  { rtol = 1e-5, atol = 1e-6, label = 'value' }: { rtol?: number; atol?: number; label?: string } = {},
): void {
  const a = typeof actual === 'number' ? [actual] : actual;
  const e = typeof expected === 'number' ? [expected] : expected;
  assert.equal(a.length, e.length, `${label}: length ${a.length} != ${e.length}`);
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = e[i];
    if (!Number.isFinite(y) || !Number.isFinite(x)) {
      assert.ok(Object.is(x, y) || (Number.isNaN(x) && Number.isNaN(y)), `${label}[${i}]: ${x} != ${y}`);
      continue;
    }
    const tolerance = atol + rtol * Math.abs(y);
    if (Math.abs(x - y) > tolerance) {
      assert.fail(`${label}[${i}]: ${x} vs expected ${y} (|diff| ${Math.abs(x - y)} > ${tolerance})`);
    }
  }
}

/** Asserts two typed arrays are bitwise identical. */
export function assertBitwiseEqual(a: ArrayBufferView, b: ArrayBufferView, label = 'arrays'): void {
  const x = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const y = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  assert.ok(x.equals(y), `${label} differ bitwise`);
}

/** A malformed call and the error it must raise. */
export interface BadInputCase {
  name: string;
  call: () => unknown;
  error: typeof TypeError | typeof RangeError;
  /** A fragment the message must contain (usually the argument's name). */
  message: string | RegExp;
}

/** Runs each case: it must throw exactly `error` with `message`, and nothing else. */
export function checkBadInputs(cases: BadInputCase[]): void {
  for (const c of cases) {
    let thrown: unknown;
    try {
      c.call();
    } catch (error) {
      thrown = error;
    }
    assert.ok(thrown !== undefined, `${c.name}: did not throw`);
    assert.equal((thrown as Error).constructor, c.error, `${c.name}: threw ${String(thrown)}`);
    const message = (thrown as Error).message;
    if (typeof c.message === 'string') assert.ok(message.includes(c.message), `${c.name}: message "${message}"`);
    else assert.match(message, c.message, `${c.name}`);
  }
}

/** A typed array whose buffer has been detached (transferred away). */
export function detached<T extends Float32Array | Float64Array | Uint8Array | Int32Array | Uint16Array>(make: (n: number) => T): T {
  const array = make(4);
  structuredClone(array.buffer, { transfer: [array.buffer as ArrayBuffer] });
  return array;
}

/**
 * Why this process runs under AddressSanitizer (its runtime preloaded or its options set),
 * or false. Such a run keeps freed memory in quarantine and reserves terabytes of address
 * space: tests of resident memory or of address-space limits loosen or skip there.
 */
export function sanitizerRun(): string | false {
  if (/asan/i.test(process.env.LD_PRELOAD ?? '')) return `AddressSanitizer preloaded (LD_PRELOAD=${process.env.LD_PRELOAD})`;
  if (process.env.ASAN_OPTIONS !== undefined) return 'AddressSanitizer options set (ASAN_OPTIONS)';
  return false;
}
