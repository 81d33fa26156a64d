/**
 * Index helpers the trainers share to cut a batch into mini- and micro-batches, and the
 * sums and means of their metrics.
 * @internal
 */

/** 0, 1, …, n − 1. */
export function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

/** Consecutive pieces of at most `size` items (at least one item each). */
export function chunk<T>(items: readonly T[], size: number): T[][] {
  const step = Math.max(1, size);
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += step) out.push(items.slice(i, i + step));
  return out;
}

/** `parts` consecutive pieces of near-equal size. */
export function split<T>(items: readonly T[], parts: number): T[][] {
  return range(parts).map((p) => items.slice(Math.floor((p * items.length) / parts), Math.floor(((p + 1) * items.length) / parts)));
}

/** Sum, left to right. */
export function sum(values: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < values.length; i++) total += values[i];
  return total;
}

/** Mean, 0 for no values. */
export function mean(values: ArrayLike<number>): number {
  return values.length ? sum(values) / values.length : 0;
}
