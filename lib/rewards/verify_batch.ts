/**
 * `verifyAnswers`: `verifyAnswer` over many responses in worker threads, for reward
 * computation of thousands of rollouts. A watchdog enforces the time limit from outside:
 * a worker whose current item runs past `timeLimitMs` (plus a grace for scheduling) is
 * terminated, that item gets reason `'timeout'`, and the rest of its chunk goes to a fresh
 * worker.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { resolveVerifyOptions, type AnswerVerdict, type VerifyOptions } from './math.js';

/** One response to verify against its gold answer. */
export interface BatchItem {
  response: string;
  gold: string;
}

/** Options of `verifyAnswers`: those of `verifyAnswer`, plus the batch's own. */
export interface BatchOptions extends VerifyOptions {
  /** Worker threads. Default: available cores − 1, at least 1, at most 8. */
  threads?: number;
  /** Items per message to a worker. Default 64. */
  chunkSize?: number;
  /** Called after each chunk with the number of verdicts done and the total. */
  onProgress?: (done: number, total: number) => void;
}

/** Milliseconds past the time limit before the watchdog terminates a worker. */
const GRACE_MS = 500;
const WATCHDOG_INTERVAL_MS = 50;

function positiveInteger(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new RangeError(`Expected a positive integer for options.${name} but received ${String(value)} of type ${typeof value}`);
  }
  return value;
}

interface Slot {
  worker: Worker;
  watch: SharedArrayBuffer;
  chunk: { start: number; end: number } | null;
}

/**
 * Verifies each `{ response, gold }` item (see `verifyAnswer`) in worker threads and
 * resolves to the verdicts in item order. Deterministic: the verdicts equal those of
 * `verifyAnswer` on each item, except that an item past the time limit is `'timeout'`
 * even when the worker could not be interrupted. Throws TypeError/RangeError for invalid
 * items or options.
 */
export async function verifyAnswers(items: readonly BatchItem[], options: BatchOptions = {}): Promise<AnswerVerdict[]> {
  if (!Array.isArray(items)) throw new TypeError(`Expected an array for items but received ${String(items)} of type ${typeof items}`);
  items.forEach((item, i) => {
    if (item === null || typeof item !== 'object') throw new TypeError(`Expected an object { response, gold } for items[${i}] but received ${String(item)} of type ${typeof item}`);
  });
  const { threads: threadOption, chunkSize: chunkOption, onProgress, ...verifyOptions } = options;
  const resolved = resolveVerifyOptions(verifyOptions);
  if (onProgress !== undefined && typeof onProgress !== 'function') throw new TypeError(`Expected a function for options.onProgress but received ${typeof onProgress}`);
  const chunkSize = positiveInteger(chunkOption, 'chunkSize', 64);
  const total = items.length;
  const threads = Math.min(positiveInteger(threadOption, 'threads', Math.min(8, Math.max(1, availableParallelism() - 1))), Math.max(1, Math.ceil(total / chunkSize)));
  const verdicts: (AnswerVerdict | undefined)[] = new Array(total);
  if (total === 0) return [];

  const queue: { start: number; end: number }[] = [];
  for (let start = 0; start < total; start += chunkSize) queue.push({ start, end: Math.min(total, start + chunkSize) });
  let done = 0;
  const workerUrl = new URL('./verify_worker.js', import.meta.url);

  return new Promise<AnswerVerdict[]>((resolve, reject) => {
    const slots = new Set<Slot>();
    let finished = false;
    const finish = (error?: Error) => {
      if (finished) return;
      finished = true;
      clearInterval(watchdog);
      for (const slot of slots) void slot.worker.terminate();
      if (error !== undefined) reject(error);
      else resolve(verdicts as AnswerVerdict[]);
    };
    const dispatch = (slot: Slot) => {
      const chunk = queue.shift();
      slot.chunk = chunk ?? null;
      if (chunk === undefined) {
        slots.delete(slot);
        void slot.worker.terminate();
        if (slots.size === 0) finish();
        return;
      }
      const part = items.slice(chunk.start, chunk.end);
      slot.worker.postMessage({ start: chunk.start, responses: part.map((item) => item.response), golds: part.map((item) => item.gold) });
    };
    const spawn = () => {
      const watch = new SharedArrayBuffer(16);
      const worker = new Worker(workerUrl, { workerData: { options: verifyOptions, watch } });
      const slot: Slot = { worker, watch, chunk: null };
      slots.add(slot);
      worker.on('message', (message: { start: number; verdicts: AnswerVerdict[] }) => {
        message.verdicts.forEach((verdict, k) => { verdicts[message.start + k] = verdict; });
        done += message.verdicts.length;
        try {
          onProgress?.(done, total);
        } catch (error) {
          finish(error as Error);
          return;
        }
        dispatch(slot);
      });
      worker.on('error', (error) => finish(error));
      dispatch(slot);
    };
    const watchdog = setInterval(() => {
      const now = performance.timeOrigin + performance.now();
      for (const slot of [...slots]) {
        const startedAt = new Float64Array(slot.watch, 8, 1)[0]!;
        if (slot.chunk === null || startedAt === 0 || now - startedAt <= resolved.timeLimitMs + GRACE_MS) continue;
        const stalled = Atomics.load(new Int32Array(slot.watch, 0, 1), 0);
        slots.delete(slot);
        void slot.worker.terminate();
        verdicts[stalled] = { correct: false, extracted: null, reason: 'timeout', source: null };
        done++;
        // The chunk's other items are verified again by a fresh worker (verdicts are deterministic).
        if (stalled > slot.chunk.start) queue.unshift({ start: slot.chunk.start, end: stalled });
        if (stalled + 1 < slot.chunk.end) queue.unshift({ start: stalled + 1, end: slot.chunk.end });
        spawn();
      }
    }, WATCHDOG_INTERVAL_MS);
    for (let t = 0; t < threads; t++) spawn();
  });
}
