/**
 * The calls of test/concurrency.test.ts: every op on seeded inputs, in a form both the main
 * thread and worker threads run. Loaded as a worker (with `workerData.job`) it runs one job
 * and reports to its parent.
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';

import * as kernels from '../lib/kernels/index.js';
import { Random } from './support.js';

export type HostArray = Float32Array | Int32Array | Uint8Array | Uint16Array;
type Options = Record<string, unknown>;

/** One op: its options (built from the shared inputs) and its two forms. */
export interface OpCall {
  name: string;
  options: Options;
  sync(options: Options): unknown;
  async(options: Options): Promise<unknown>;
}

const VOCAB = 8192;
const LOGIT_ROWS = 96;
const PAIRS = 4096;

/** Every op, sync and async, on inputs drawn from `seed`: the same seed gives the same calls. */
export function opCalls(seed: number): OpCall[] {
  const random = new Random(seed);
  // About 140,000 tokens: more than two chunks of the token kernels (65,536 tokens each).
  const seqOffsets = random.seqOffsets(200, 1, 1400);
  const n = seqOffsets[seqOffsets.length - 1];
  const b = seqOffsets.length - 1;
  const logp = random.floats(n, -6, 0);
  const mask = random.mask(n, 0.8);
  const roles = new Uint8Array(n).map(() => random.int(0, 4));
  const groupIds = new Int32Array(PAIRS).map(() => random.int(0, 512));
  const logits = random.normals(LOGIT_ROWS * VOCAB, 3);
  const labels = new Int32Array(LOGIT_ROWS).map(() => random.int(0, VOCAB));
  const perRow = (): Float32Array => random.normals(LOGIT_ROWS);
  const k = kernels as unknown as Record<string, (options: Options) => unknown>;
  const call = (name: string, options: Options): OpCall => ({
    name,
    options,
    sync: (o) => k[name]!(o),
    async: (o) => k[`${name}Async`]!(o) as Promise<unknown>,
  });
  return [
    call('ppoLoss', {
      logp, oldLogp: random.floats(n, -6, 0), advantages: random.normals(n), mask, seqOffsets,
      refLogp: random.floats(n, -6, 0), klCoef: 0.05, weights: random.floats(n, 0.5, 1.5),
      aggregation: 'seq-mean-token-mean', clipHigh: 0.28, dualClip: 3,
    }),
    call('groupAdvantages', { rewards: random.normals(PAIRS), groupIds }),
    call('advantages', {
      estimator: 'tir_optimal_token_baseline', tokenRewards: random.normals(n), mask, seqOffsets,
      groupIds: new Int32Array(b).map(() => random.int(0, 40)), oldLogp: logp,
      sumPiSquared: logp.map((x) => Math.exp(2 * x)), withReturns: true,
    }),
    call('advantages', { estimator: 'gae', rewards: random.normals(b), mask, seqOffsets, values: random.normals(n), lam: 0.95 }),
    call('dpoLoss', {
      policyChosen: random.floats(PAIRS, -80, -10), policyRejected: random.floats(PAIRS, -80, -10),
      refChosen: random.floats(PAIRS, -80, -10), refRejected: random.floats(PAIRS, -80, -10),
      beta: 0.2, labelSmoothing: 0.1,
    }),
    call('feedbackMask', { roles, seqOffsets, keep: random.mask(b, 0.9) }),
    call('sequenceLogprobs', { logp, mask, seqOffsets, average: true }),
    call('sequenceLogprobsBackward', { gradSeq: random.normals(b), mask, seqOffsets, average: true }),
    call('tokenLogprobs', { logits, vocabSize: VOCAB, labels, temperature: 0.7, withEntropy: true }),
    call('tokenLogprobsBackward', {
      logits, vocabSize: VOCAB, labels, temperature: 0.7, gradLogp: perRow(), gradEntropy: perRow(),
    }),
  ];
}

export function isHostArray(value: unknown): value is HostArray {
  return ArrayBuffer.isView(value) && !(value instanceof DataView);
}

/** A result as bytes, in a fixed order: typed arrays as they are, numbers as float64. */
export function resultBytes(result: unknown): Uint8Array[] {
  const values = isHostArray(result) ? [result] : Object.values(result as object);
  return values.map((v) =>
    isHostArray(v) ? new Uint8Array(v.buffer, v.byteOffset, v.byteLength).slice() : new Uint8Array(new Float64Array([v as number]).buffer),
  );
}

/** Names of the ops whose result differs bitwise from `reference` (one entry per op). */
export function mismatches(calls: OpCall[], results: unknown[], reference: Uint8Array[][]): string[] {
  const bad: string[] = [];
  results.forEach((result, i) => {
    const bytes = resultBytes(result);
    const same = bytes.length === reference[i]!.length && bytes.every((b, j) => Buffer.from(b).equals(reference[i]![j]!));
    if (!same) bad.push(calls[i]!.name);
  });
  return bad;
}

/** Runs every op `rounds` times sync and async (all async calls in flight at once). */
export async function compareRounds(seed: number, rounds: number, reference: Uint8Array[][]): Promise<string[]> {
  const calls = opCalls(seed);
  const bad: string[] = [];
  for (let r = 0; r < rounds; r++) {
    bad.push(...mismatches(calls, calls.map((c) => c.sync(c.options)), reference).map((n) => `${n} (sync)`));
    const results = await Promise.all(calls.map((c) => c.async(c.options)));
    bad.push(...mismatches(calls, results, reference).map((n) => `${n} (async)`));
  }
  return bad;
}

/** What a worker thread does, as `workerData.job` says. */
export type Job =
  | { kind: 'compare'; seed: number; rounds: number; reference: Uint8Array[][] }
  // Starts every op async (the logits `scale` times larger), reports 'started' and exits
  // at once if `exit`, else waits to be terminated.
  | { kind: 'abandon'; seed: number; exit: boolean; scale: number }
  // Until `stop[0]` becomes 1, flips random elements of the shared index arrays to a wild
  // value and back: mostly valid, so a kernel that checked one read and indexed with
  // another would read out of bounds.
  | { kind: 'scribble'; arrays: Int32Array[]; bytes: Uint8Array[]; stop: Int32Array }
  // Receives transferred buffers and drops them.
  | { kind: 'sink' };

async function runJob(job: Job): Promise<void> {
  const port = parentPort!;
  switch (job.kind) {
    case 'compare':
      port.postMessage(await compareRounds(job.seed, job.rounds, job.reference));
      return;
    case 'abandon': {
      const calls = opCalls(job.seed);
      const big = calls.find((c) => c.name === 'tokenLogprobsBackward')!;
      const logits = new Float32Array((big.options.logits as Float32Array).length * job.scale);
      const options = { ...big.options, logits, labels: new Int32Array(LOGIT_ROWS * job.scale) };
      const gradLogp = new Float32Array(LOGIT_ROWS * job.scale);
      const pending = calls.map((c) => c.async(c.options).catch(() => undefined));
      pending.push(big.async({ ...options, gradLogp, gradEntropy: gradLogp }).catch(() => undefined));
      port.postMessage('started');
      if (job.exit) process.exit(0);
      // Only terminate() may end this worker: on a loaded machine its kernels could all finish
      // before the parent's terminate() came, and the worker then exited by itself with code 0.
      setInterval(() => {}, 1 << 30);
      return;
    }
    case 'scribble': {
      const random = new Random(7);
      const all: (Int32Array | Uint8Array)[] = [...job.arrays, ...job.bytes];
      // About a microsecond, long enough for a kernel to read a wild value.
      const hold = (): void => {
        for (let spin = 0; spin < 300 && Atomics.load(job.stop, 0) === 0; spin++);
      };
      port.postMessage('running');
      while (Atomics.load(job.stop, 0) === 0) {
        const at = all.map((a) => random.int(0, a.length));
        const kept = all.map((a, i) => a[at[i]!]!);
        all.forEach((a, i) => Atomics.store(a, at[i]!, a instanceof Uint8Array ? 0xff : random.next() < 0.5 ? 0x7fffffff : -0x80000000));
        hold();
        all.forEach((a, i) => Atomics.store(a, at[i]!, kept[i]!));
        hold();
      }
      port.postMessage('stopped');
      return;
    }
    case 'sink':
      port.on('message', () => undefined);
      return;
  }
}

if (!isMainThread && (workerData as { job?: Job } | null)?.job) {
  void runJob((workerData as { job: Job }).job);
}
