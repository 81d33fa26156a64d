/**
 * The trainers' seeded random source. Its whole state is one 32-bit integer, saved in
 * checkpoints, so a resumed run draws exactly the numbers the original would have.
 */
export class SeededRandom {
  /** The generator's state (mulberry32); assign a saved value to restore it. */
  state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [0, n). */
  below(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Integer in [lo, hi], both included. */
  between(lo: number, hi: number): number {
    return lo + this.below(hi - lo + 1);
  }

  /** One of `items`, uniformly. */
  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)];
  }

  /** A uniformly shuffled copy of `items` (Fisher-Yates). */
  shuffled<T>(items: readonly T[]): T[] {
    const out = items.slice();
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  }
}
