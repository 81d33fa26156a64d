/**
 * The cache state of `tirl bench`'s large cases: which cases are timed from evicted caches,
 * and the sweep that evicts them.
 *
 * A case whose bytes fit in the private L2 is timed warm, its calls back to back. A larger
 * one no longer fits there, but it may still fit in the shared last-level cache (300 MiB on
 * the Xeon VM of the committed runs holds a 17 MB ppoLoss case whole), and then a warm
 * timing depends on how many calls a sample makes: the same-bytes copy of ppoLoss/512x2048
 * took 0.77 ms with its buffers in cache and 1.70 ms after a sweep, so a fast peer (several
 * calls a sample, mostly warm) and a slow one (one or two, half cold) were measured in two
 * different states. Such a case is therefore timed one call at a time, each call after a
 * sweep that reads a buffer of twice the last-level cache, one load per cache line: STREAM's
 * rule for a bandwidth reference (arrays far larger than the caches), applied to every peer.
 *
 * The sweep only reads. Reading leaves the caches full of clean lines, which the timed call
 * evicts for free; a sweep that wrote would leave dirty lines, and the timed call would pay
 * for writing them back. The buffer is written once, when it is allocated: a buffer never
 * written maps every page to the kernel's one zero page, and reading it evicts nothing.
 *
 * The sweep runs on one thread per CPU (up to MAX_SWEEP_THREADS), each reading its own share
 * at the same time, so that the private L2 of every core is swept too: our kernels' pool
 * threads, and the main thread after a migration, leave data in the L2 of the other core.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/** The private L2 when the OS does not say (sysfs): 2 MiB a core on the Xeon VM of the committed runs. */
export const FALLBACK_L2_BYTES = 2 * 2 ** 20;
/** The last-level cache when the OS does not say: a large server's L3. */
export const FALLBACK_LLC_BYTES = 256 * 2 ** 20;
/**
 * The sweep buffer's cap: the bench keeps one in this process and one in the PyTorch
 * co-process, beside the largest case's 1.9 GB of inputs, inside a 24 GiB machine.
 */
export const MAX_SWEEP_BYTES = 1024 * 2 ** 20;
/** Threads that sweep at once (the calling thread and workers): enough for a workstation's cores. */
export const MAX_SWEEP_THREADS = 16;
/** Bytes between two loads of the sweep: one cache line. */
const LINE_BYTES = 64;
/** How long the calling thread waits for a sweep worker before it gives up. */
const WORKER_TIMEOUT_MS = 60_000;

/** One cache of CPU 0 as sysfs describes it. */
export interface CacheLevel {
  level: number;
  type: string;
  bytes: number;
}

/** Parses a sysfs cache size (`48K`, `2048K`, `300M`) into bytes; undefined when it is not one. */
export function parseCacheSize(text: string): number | undefined {
  const match = /^\s*(\d+)\s*([KMG]?)\s*$/i.exec(text);
  if (!match) return undefined;
  const unit = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30 }[match[2].toUpperCase() as '' | 'K' | 'M' | 'G'];
  const bytes = Number(match[1]) * unit;
  return bytes > 0 ? bytes : undefined;
}

/** CPU 0's data and unified caches from sysfs (Linux); empty elsewhere or when unreadable. */
export function cpuCaches(root = '/sys/devices/system/cpu/cpu0/cache'): CacheLevel[] {
  let entries: string[];
  try {
    entries = readdirSync(root).filter((name) => /^index\d+$/.test(name));
  } catch {
    return [];
  }
  const caches: CacheLevel[] = [];
  for (const entry of entries) {
    try {
      const read = (field: string) => readFileSync(`${root}/${entry}/${field}`, 'utf8').trim();
      const type = read('type');
      const level = Number(read('level'));
      const bytes = parseCacheSize(read('size'));
      if (type !== 'Instruction' && Number.isInteger(level) && bytes !== undefined) caches.push({ level, type, bytes });
    } catch {
      // an index without these files: skip it
    }
  }
  return caches.sort((a, b) => a.level - b.level);
}

/** How the bench times its large cases, for the report. */
export interface CachePlan {
  /** Cases of more bytes than this are timed cold: the private L2, or `--cold-above`'s bytes. */
  coldAboveBytes: number;
  /** Set when `tirl bench --cold-above` chose coldAboveBytes instead of the L2. */
  coldAboveFromFlag?: boolean;
  /** The last-level cache the sweep is sized from. */
  lastLevelBytes: number;
  /** Bytes one sweep reads: twice the last-level cache, at most MAX_SWEEP_BYTES. */
  sweepBytes: number;
  /** Threads that read it at once. */
  sweepThreads: number;
  /** Where the sizes came from. */
  source: string;
}

/** The plan for this machine, from sysfs where it has the sizes, else from the fallbacks. */
export function cachePlan(caches: CacheLevel[] = cpuCaches(), cpus = availableParallelism()): CachePlan {
  const l2 = caches.find((c) => c.level === 2);
  const last = caches.length > 0 ? caches[caches.length - 1] : undefined;
  const lastLevelBytes = last && last.level >= 2 ? last.bytes : FALLBACK_LLC_BYTES;
  const sweepBytes = Math.min(MAX_SWEEP_BYTES, 2 * lastLevelBytes);
  const source = [
    l2 ? `L2 ${l2.bytes / 2 ** 10} KiB` : `L2 unknown, taken as ${FALLBACK_L2_BYTES / 2 ** 20} MiB`,
    last && last.level >= 2 ? `L${last.level} ${last.bytes / 2 ** 20} MiB (sysfs, cpu0)` : `last-level cache unknown, taken as ${FALLBACK_LLC_BYTES / 2 ** 20} MiB`,
  ].join(', ');
  return {
    coldAboveBytes: l2?.bytes ?? FALLBACK_L2_BYTES,
    lastLevelBytes,
    sweepBytes,
    sweepThreads: Math.max(1, Math.min(MAX_SWEEP_THREADS, cpus)),
    source,
  };
}

/** Reads one double per cache line of `view` from index `begin` to `end` (exclusive); returns their sum. */
function sweepRange(view: Float64Array, begin: number, end: number): number {
  const stride = LINE_BYTES / 8;
  let sum = 0;
  for (let i = begin; i < end; i += stride) sum += view[i];
  return sum;
}

// A sweep worker: waits for a new generation in control[0], reads its share, stores the
// generation in control[1 + index]. A negative generation ends it.
const WORKER_SOURCE = `
const { workerData } = require('node:worker_threads');
const { buffer, control, index, begin, end, stride } = workerData;
const view = new Float64Array(buffer);
let seen = 0;
let sink = 0;
for (;;) {
  Atomics.wait(control, 0, seen);
  const generation = Atomics.load(control, 0);
  if (generation < 0) break;
  seen = generation;
  for (let i = begin; i < end; i += stride) sink += view[i];
  Atomics.store(control, 1 + index, generation);
  Atomics.notify(control, 1 + index);
}
if (sink === -1) console.log(sink);
`;

/**
 * Evicts the caches by reading a buffer larger than them all. `evict()` blocks until every
 * sweeping thread has read its share. `close()` ends the workers.
 */
export class CacheSweeper {
  readonly bytes: number;
  readonly threads: number;
  private readonly view: Float64Array;
  private readonly control: Int32Array;
  private readonly workers: Worker[] = [];
  private readonly ownEnd: number;
  private generation = 0;
  /** Keeps the sweep's loads observable. */
  private sink = 0;

  /** `bytes` to sweep (rounded down to whole cache lines), read by `threads` threads. */
  constructor(bytes: number, threads: number) {
    if (!Number.isFinite(bytes) || bytes < LINE_BYTES) {
      throw new RangeError(`Expected at least ${LINE_BYTES} for bytes but received ${bytes}`);
    }
    if (!Number.isInteger(threads) || threads < 1) {
      throw new RangeError(`Expected a positive integer for threads but received ${threads}`);
    }
    const lines = Math.floor(bytes / LINE_BYTES);
    this.bytes = lines * LINE_BYTES;
    this.threads = Math.min(threads, lines);
    const stride = LINE_BYTES / 8;
    const buffer = this.threads > 1 ? new SharedArrayBuffer(this.bytes) : new ArrayBuffer(this.bytes);
    this.view = new Float64Array(buffer).fill(1); // written once: real pages, not the zero page
    this.control = new Int32Array(new SharedArrayBuffer(4 * (1 + this.threads)));
    const share = (t: number) => Math.floor((lines * t) / this.threads) * stride;
    this.ownEnd = share(1);
    for (let t = 1; t < this.threads; t++) {
      const worker = new Worker(WORKER_SOURCE, {
        eval: true,
        workerData: { buffer, control: this.control, index: t, begin: share(t), end: share(t + 1), stride },
      });
      worker.unref();
      this.workers.push(worker);
    }
  }

  /** Sweeps once; returns the seconds it took. */
  evict(): number {
    const started = performance.now();
    const generation = ++this.generation;
    Atomics.store(this.control, 0, generation);
    Atomics.notify(this.control, 0);
    this.sink += sweepRange(this.view, 0, this.ownEnd);
    for (let t = 1; t < this.threads; t++) {
      for (let seen = Atomics.load(this.control, 1 + t); seen !== generation; seen = Atomics.load(this.control, 1 + t)) {
        if (Atomics.wait(this.control, 1 + t, seen, WORKER_TIMEOUT_MS) === 'timed-out') {
          throw new Error(`bench: cache sweep worker ${t} did not answer within ${WORKER_TIMEOUT_MS / 1e3} s`);
        }
      }
    }
    if (this.sink === -1) this.sink = 0; // never true (the buffer holds ones); reads sink so the loads stay
    return (performance.now() - started) / 1e3;
  }

  /** Ends the workers; the sweeper must not be used afterwards. */
  async close(): Promise<void> {
    Atomics.store(this.control, 0, -1);
    Atomics.notify(this.control, 0);
    await Promise.all(this.workers.map((w) => w.terminate()));
    this.workers.length = 0;
  }
}
