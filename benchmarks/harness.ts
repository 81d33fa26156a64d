/**
 * The measuring core of `tirl bench`: each case's peers (our kernel reusing `out` buffers
 * and allocating, the plain TypeScript peer, PyTorch in a Python co-process, and a memory
 * copy of the same number of bytes) are warmed up, then sampled in interleaved rounds so
 * that a noisy neighbour slows all of them alike; each peer is summarised by its median
 * and its min–max. A case larger than the private L2 is timed one call at a time, each call
 * after a sweep that evicts the caches (benchmarks/cache.ts); a smaller one warm, its calls
 * back to back.
 */
import { performance } from 'node:perf_hooks';
import { SeededRandom, setThreads, info } from '../lib/index.js';
import type { CacheSweeper } from './cache.js';

/** What a peer is, for the report's columns and the speed-up arithmetic. */
export type PeerKind =
  | 'tirl' // our kernel, writing into reused `out` buffers: the reference row
  | 'tirl-alloc' // our kernel, allocating its outputs on every call
  | 'tirl-1thread' // our kernel on one thread (the scaling row)
  | 'tirl-async' // the …Async form (binding-overhead case)
  | 'tirl-prepared' // a prepared call (preparePpoLoss), options read once (binding-overhead case)
  | 'tirl-positional' // a prepared call's positional form (arrays as arguments; binding-overhead case)
  | 'pool-hop' // Node's own libuv thread-pool round trip, no kernel (binding-overhead case)
  | 'napi-hop' // a bare Node-API async work (native.poolRoundTrip), no kernel (binding-overhead case)
  | 'c-abi' // the op's C call alone, timed natively (native.<op>CCalls: cCallPeer)
  | 'tirl-python' // tirl's own Python package (python/tirl, ctypes), in the Python co-process (binding-overhead case)
  | 'typescript' // the plain TypeScript peer from test/reference/<op>.ts
  | 'torch' // PyTorch eager, in the Python co-process
  | 'copy'; // Float32Array.prototype.set of the same number of bytes (memcpy)

/**
 * One sample, per call: wall-clock seconds, and CPU seconds of the whole process (all its
 * threads). On a loaded machine the wall time includes waiting for a core; the CPU time
 * does not, so it shows what the op itself costs.
 */
export interface Sample {
  wall: number;
  cpu: number;
  /** Bytes a peer in another process (PyTorch) read in its own cache sweep before this sample: 0 when it swept none. */
  sweptBytes?: number;
}

export interface Peer {
  name: string;
  kind: PeerKind;
  /** Runs `inner` calls back to back and returns the time per call. */
  sample(inner: number): Sample | Promise<Sample>;
  /**
   * Evicts the caches, then times one call, the eviction outside the timed region: for a
   * peer in another process (PyTorch), which sweeps its own cores. Without it, the harness
   * sweeps in this process and then calls `sample(1)`.
   */
  sampleCold?(): Promise<Sample>;
  /**
   * Sets what the next sample needs (our thread count) before it and before a cold case's
   * sweep, so that nothing but the timed call runs between the sweep and the timer: a native
   * call there (setThreads) brings the call path back into the caches, and the one-thread
   * peer, which made one, read 5-8% faster than ours in the short cold cases (0.2-0.4 ms).
   */
  prepare?(): void;
}

/** One sample of `peer`, `prepare` first. */
function sampleOf(peer: Peer, inner: number): Sample | Promise<Sample> {
  peer.prepare?.();
  return peer.sample(inner);
}

/** CPU seconds this process has used so far, all threads, user and system. */
export function cpuSeconds(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

/** A peer calling `call` synchronously. */
export function syncPeer(name: string, kind: PeerKind, call: () => unknown): Peer {
  return {
    name,
    kind,
    sample(inner) {
      const cpu0 = cpuSeconds();
      const t0 = performance.now();
      for (let i = 0; i < inner; i++) call();
      const wall = (performance.now() - t0) / 1e3 / inner;
      return { wall, cpu: (cpuSeconds() - cpu0) / inner };
    },
  };
}

/** An op's `<op>CCalls` (bindings/common.h, define_c_call_loop). */
export type CCalls = (options: object, calls: number, times?: Float64Array) => void;

/**
 * Our kernel's C calls alone: for each [cCalls, options], the op's `<op>CCalls` reads the
 * options once as the sync form does, then makes the C call `inner` times and writes the
 * wall-clock and process CPU seconds a call took, timed natively around the C calls; a
 * sample is their sum. The difference from the sync form's row is what the binding costs;
 * a cold sample (after a sweep) is a cold C call, the arrays' data evicted as for every
 * other peer (the reading of the options only brings the binding's code back).
 */
export function cCallPeer(calls: [CCalls, object][], name = 'tirl, the C call alone (no binding)'): Peer {
  const times = new Float64Array(2);
  return {
    name,
    kind: 'c-abi',
    sample(inner) {
      let wall = 0;
      let cpu = 0;
      for (const [cCalls, options] of calls) {
        cCalls(options, inner, times);
        wall += times[0];
        cpu += times[1];
      }
      return { wall, cpu };
    },
  };
}

/** A peer awaiting `call` (one call in flight at a time: its latency, not a throughput). */
export function asyncPeer(name: string, kind: PeerKind, call: () => Promise<unknown>): Peer {
  return {
    name,
    kind,
    async sample(inner) {
      const cpu0 = cpuSeconds();
      const t0 = performance.now();
      for (let i = 0; i < inner; i++) await call();
      const wall = (performance.now() - t0) / 1e3 / inner;
      return { wall, cpu: (cpuSeconds() - cpu0) / inner };
    },
  };
}

/** Beyond this many bytes (far past any cache) the copy is measured on this many and scaled. */
const COPY_BYTES_CAP = 512 * 2 ** 20;
/** Bytes between the copy's source and target: half a page plus a cache line. */
const COPY_TARGET_GAP = 2048 + 64;

/**
 * The bandwidth reference of a case: a copy whose reads plus writes equal the op's bytes
 * (bytes/2 read, bytes/2 written), so that cache effects at small sizes are the same for
 * the op and its reference. V8 implements `TypedArray.prototype.set` between distinct
 * buffers as one memmove (glibc's, with non-temporal stores for large sizes). Past
 * COPY_BYTES_CAP the copy's time is linear in its size, so a copy of the cap, scaled,
 * stands for the 1.9 GB of the largest tokenLogprobs case without allocating it.
 */
export function copyPeer(bytes: number): Peer {
  const copied = Math.min(bytes, COPY_BYTES_CAP);
  const floats = Math.max(1, Math.round(copied / 8));
  const scale = bytes / (floats * 8);
  // One buffer, the target half a page and a cache line after the source's end. Two
  // separate allocations land at whatever page offsets malloc gives them, and on this
  // Zen 3 VM glibc's memmove ran 10× slower for some of them (4K aliasing of source and
  // target): a reference must not depend on that luck.
  const buffer = new ArrayBuffer(floats * 8 + COPY_TARGET_GAP);
  const source = new Float32Array(buffer, 0, floats).fill(1);
  const target = new Float32Array(buffer, floats * 4 + COPY_TARGET_GAP, floats);
  const copy = syncPeer('memory copy, same bytes', 'copy', () => target.set(source));
  return {
    ...copy,
    sample(inner) {
      const { wall, cpu } = copy.sample(inner) as Sample;
      return { wall: wall * scale, cpu: cpu * scale };
    },
  };
}

export type SizeName = 'quick' | 'full';

/** Parameters of a case for the PyTorch co-process (see peers/torch_peers.py). */
export interface TorchCase {
  op: string;
  params: Record<string, number | string | boolean>;
}

export interface BenchCase {
  /** Name of the op in the kernel contract, e.g. `ppoLoss`. */
  op: string;
  /** Unique id, e.g. `ppoLoss/1M/kl`. */
  id: string;
  /** What is measured, for the table. */
  title: string;
  /** `--sizes` that include this case. */
  sizes: SizeName[];
  /** Bytes the op must move at least (see README, "byte model"). */
  bytes: number;
  /** That byte model in words. */
  byteModel: string;
  /** Issue 3's target for our share of the copy bandwidth (0.7 = 70%), if it sets one. */
  bandwidthTarget?: number;
  /** The PyTorch peer, when there is one. */
  torch?: TorchCase;
  /**
   * tirl's own Python package on the same call, run by the PyTorch co-process beside the
   * PyTorch peer (a case with `torch` only): the binding-overhead case's Python form.
   */
  python?: TorchCase;
  /**
   * Set on the small case that measures the fixed cost of a call: the report sets its sync
   * and async times beside the same call through the C ABI.
   */
  callOverhead?: boolean;
  /**
   * Allocates the inputs and returns the peers, the first of kind 'tirl'. Called just
   * before the case runs; everything it allocated is dropped after it.
   */
  setup(): CaseSetup;
}

/** The co-process's id of a case's `python` peer. */
export function pythonId(benchCase: BenchCase): string {
  return `${benchCase.id}/python`;
}

export interface CaseSetup {
  peers: Peer[];
  /**
   * Our kernel's call on the first `units` (rows, sequences, groups) of the case's `total`,
   * a slice small enough that twice it stays in the caches (`slice(units)` makes that call):
   * timed warm on one thread, it gives the case's arithmetic alone (CaseResult.arithmeticMs),
   * what the call would take if its bytes cost nothing.
   */
  arithmetic?: Arithmetic;
  /**
   * Compares our kernel's result with the TypeScript peer's; returns a description of a
   * mismatch, or undefined. Guards against a peer measuring different math.
   */
  check?(): string | undefined;
}

/** Bytes of a case's smaller in-cache slice: twice it stays inside an L2 of 1 MiB or more. */
const SLICE_BYTES = 256 * 1024;

/**
 * The units (rows, sequences, groups) of a case's smaller in-cache slice, of its `total`
 * units and `bytes` in all: as many as SLICE_BYTES holds, at least one, at most half.
 */
export function sliceUnits(bytes: number, total: number): number {
  return Math.max(1, Math.min(Math.floor(total / 2), Math.floor(SLICE_BYTES / (bytes / total))));
}

/** A case's in-cache slices (CaseSetup.arithmetic). */
export interface Arithmetic {
  slice(units: number): () => unknown;
  units: number;
  total: number;
}

/** Where PyTorch timings come from; implemented by the Python co-process. */
export interface TorchRunner {
  readonly version: string;
  readonly allocator: string;
  /** Builds the inputs; returns a reason when the case cannot run there. */
  setup(benchCase: BenchCase): Promise<string | undefined>;
  /**
   * Runs `inner` calls; time per call, measured inside Python. With `evict`, the co-process
   * first sweeps its own buffer of the same size as ours, on as many threads, outside the
   * timed region.
   */
  sample(id: string, inner: number, evict?: boolean): Promise<Sample>;
  drop(id: string): Promise<void>;
}

export interface MeasureOptions {
  threads: number;
  reps: number;
  /** Rounds of a cold case (default `reps`): its samples are single calls. */
  coldReps?: number;
  warmup: number;
  /** Each sample lasts at least this long (small ops run several calls per sample). */
  minSampleSeconds: number;
  /**
   * Rounds are cut below `reps` or `coldReps` (to no fewer than MIN_ROUNDS) when they would
   * take longer than this in all: the TypeScript peer needs seconds a call on the largest logits.
   */
  caseBudgetSeconds: number;
  /** Also measure our kernel on one thread (when threads > 1). */
  scaling: boolean;
  /**
   * Cases of more bytes than `coldAboveBytes` are timed cold: each sample is one call after
   * `sweeper` evicted the caches. Without it, every case is timed warm.
   */
  cache?: { coldAboveBytes: number; sweeper: CacheSweeper };
}

/**
 * How a case was timed: `warm`, `inner` calls back to back per sample; `cold`, one call per
 * sample, each after a sweep of a buffer larger than the last-level cache.
 */
export type CacheState = 'warm' | 'cold';

export interface PeerResult {
  name: string;
  kind: PeerKind;
  medianMs: number;
  minMs: number;
  maxMs: number;
  /** Median CPU time per call of the peer's process, all threads (see {@link Sample}). */
  cpuMs: number;
  /** Calls per sample. */
  inner: number;
  samples: number;
  /** Bytes of the op's byte model per second. */
  gbPerSecond: number;
  /** Time of the same-bytes copy divided by this peer's time. */
  copyShare: number;
  /** This peer's median divided by our kernel's ('tirl') median: how much faster we are. */
  tirlSpeedup: number;
}

export interface CaseResult {
  op: string;
  id: string;
  title: string;
  bytes: number;
  byteModel: string;
  /** The caches' state at the start of each timed call. */
  cache: CacheState;
  /** A cold case's sweep, timed once before its rounds (ms, wall): what each sample adds to the run. */
  sweepMs?: number;
  peers: PeerResult[];
  skipped: { peer: string; reason: string }[];
  /** Set when the TypeScript peer disagrees with the kernel (a warning, not a failure). */
  mismatch?: string;
  /**
   * The case's arithmetic alone (CaseSetup.arithmetic), in ms: on one thread, the median CPU
   * time a call of the in-cache slice of 2u units takes beyond that of u units, scaled to
   * the whole case and divided by the threads (arithmeticMsOf).
   */
  arithmeticMs?: number;
  /**
   * With the 1-thread peer: the median over rounds of its time over ours in the same round
   * (as the "threads vs 1" sweep's verdict), so that load that changes between rounds
   * cancels; the peers' medians are in `peers`.
   */
  threadsVsOne?: number;
  /** threadsVsOne's interval over the rounds (medianRatioInterval). */
  threadsVsOneInterval?: MedianInterval;
  callOverhead?: boolean;
  bandwidthTarget?: number;
}

function median(sorted: number[]): number {
  const n = sorted.length;
  return n % 2 === 1 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/**
 * The median over rounds of `numerator[r] / denominator[r]`, two peers' times in the same
 * round: load that changes between rounds cancels, where a ratio of the two medians keeps it.
 */
export function medianRatio(numerator: number[], denominator: number[]): number {
  return median(roundRatios('medianRatio', numerator, denominator));
}

/** The rounds' ratios numerator[r] / denominator[r], sorted. */
function roundRatios(caller: string, numerator: number[], denominator: number[]): number[] {
  if (numerator.length !== denominator.length || numerator.length === 0) {
    throw new RangeError(`${caller}: Expected two equal, non-empty lengths but received ${numerator.length} and ${denominator.length}`);
  }
  return numerator.map((x, r) => x / denominator[r]).sort((a, b) => a - b);
}

/**
 * An interval for a median from the samples' order statistics, `confidence` its coverage:
 * what a median of the rounds may read in another run of the same rounds, where the
 * samples are independent (a spell of load that lasts the whole case shifts every round
 * alike, and the interval with it).
 */
export interface MedianInterval {
  low: number;
  high: number;
  confidence: number;
}

/**
 * {@link medianRatio}'s interval: the `k`-th smallest and largest of the rounds' ratios, `k`
 * the largest for which [x_(k), x_(n+1-k)] covers the median with probability at least
 * `level` (exactly, from the binomial distribution of the samples below the median,
 * distribution-free). Fewer than 6 rounds cannot reach 95%: then it is the whole range,
 * with the coverage it has.
 */
export function medianRatioInterval(numerator: number[], denominator: number[], level = 0.95): MedianInterval {
  const sorted = roundRatios('medianRatioInterval', numerator, denominator);
  const n = sorted.length;
  // B ~ Binomial(n, 1/2), the samples below the median: [x_(k), x_(n+1-k)] misses it with
  // probability 2 P(B <= k - 1). P(B = i) = C(n, i) 2^-n, in logs.
  let logTerm = -n * Math.LN2;
  let below = Math.exp(logTerm); // P(B <= k - 1), for k = 1
  let k = 1;
  for (let i = 1; i < n; i++) {
    logTerm += Math.log(n - i + 1) - Math.log(i);
    const next = below + Math.exp(logTerm);
    if (2 * next > 1 - level) break;
    below = next;
    k = i + 1;
  }
  return { low: sorted[k - 1], high: sorted[n - k], confidence: 1 - 2 * below };
}

/** Our kernel on `threads` threads (the scaling row): `prepare` sets them, each sample restores `restore`. */
function withThreads(peer: Peer, threads: number, restore: number, name: string, kind: PeerKind): Peer {
  return {
    name,
    kind,
    prepare: () => setThreads(threads),
    async sample(inner) {
      try {
        return await peer.sample(inner);
      } finally {
        setThreads(restore);
      }
    },
  };
}

export type Progress = (message: string) => void;

/** Fewest rounds of a case, whatever its budget: a median of three still drops one outlier. */
const MIN_ROUNDS = 3;

/** Measures one case: warm-up and calibration, then `reps` (cold: `coldReps`) interleaved rounds. */
export async function measureCase(
  benchCase: BenchCase,
  options: MeasureOptions,
  torch: TorchRunner | undefined,
  torchSkipReason: string | undefined,
  progress: Progress,
): Promise<CaseResult> {
  const skipped: { peer: string; reason: string }[] = [];
  progress(`${benchCase.id}: preparing inputs`);
  const prepared = benchCase.setup();
  const peers = prepared.peers;
  if (peers.length === 0 || peers[0].kind !== 'tirl') {
    throw new Error(`bench: case ${benchCase.id} must list our kernel ('tirl') first`);
  }
  if (options.scaling && options.threads > 1) {
    peers.splice(1, 0, withThreads(peers[0], 1, options.threads, `${peers[0].name}, 1 thread`, 'tirl-1thread'));
  }
  const mismatch = prepared.check?.();
  if (benchCase.torch) {
    if (torch) {
      progress(`${benchCase.id}: preparing PyTorch inputs`);
      const reason = await torch.setup(benchCase);
      if (reason === undefined) {
        peers.push({
          name: `PyTorch ${torch.version} eager`,
          kind: 'torch',
          sample: (inner) => torch.sample(benchCase.id, inner),
          sampleCold: () => torch.sample(benchCase.id, 1, true),
        });
      } else {
        skipped.push({ peer: 'PyTorch', reason });
      }
      if (benchCase.python) {
        const id = pythonId(benchCase);
        const pythonReason = await torch.setup({ ...benchCase, id });
        if (pythonReason === undefined) {
          peers.push({
            name: "tirl's Python package (tirl.ppo_loss, ctypes)",
            kind: 'tirl-python',
            sample: (inner) => torch.sample(id, inner),
            sampleCold: () => torch.sample(id, 1, true),
          });
        } else {
          skipped.push({ peer: "tirl's Python package", reason: pythonReason });
        }
      }
    } else {
      skipped.push({ peer: 'PyTorch', reason: torchSkipReason ?? 'not run' });
    }
  }
  peers.push(copyPeer(benchCase.bytes));
  const sweeper = options.cache && benchCase.bytes > options.cache.coldAboveBytes ? options.cache.sweeper : undefined;
  const cache: CacheState = sweeper ? 'cold' : 'warm';
  const sample = async (peer: Peer, inner: number): Promise<Sample> => {
    if (!sweeper) return sampleOf(peer, inner);
    if (peer.sampleCold) return peer.sampleCold();
    peer.prepare?.();
    sweeper.evict();
    return peer.sample(1);
  };

  // Warm-up (JIT, page faults of reused buffers, caches), then calls per sample so that a
  // sample lasts at least minSampleSeconds: timer resolution and call jitter stay small.
  // A fast peer warms up for at least minSampleSeconds, not only `warmup` calls: the first
  // calls of the async form start libuv's thread pool and took milliseconds each, and a
  // calls-per-sample estimate from two of them gave that peer one call per sample, whose
  // median (12 ms on a loaded machine, against 0.1 ms a call in steady state) measured the
  // start-up and single wake-ups, not the call. A cold case warms up the same way (JIT, page
  // faults), then samples one call at a time.
  const inner: number[] = [];
  const warmTimes: number[] = [];
  for (let p = 0; p < peers.length; p++) {
    progress(`${benchCase.id}: warming up ${peers[p].name}`);
    let fastest = Infinity;
    let spent = 0;
    for (let w = 0; w < Math.max(1, options.warmup) || (spent < options.minSampleSeconds && w < 10_000); w++) {
      const wall = (await sampleOf(peers[p], 1)).wall;
      fastest = Math.min(fastest, wall);
      spent += wall;
      if (fastest > 0.25) break; // a call this long is warm after one: save the run's time
    }
    warmTimes.push(fastest);
    inner.push(sweeper ? 1 : Math.max(1, Math.min(100_000, Math.ceil(options.minSampleSeconds / Math.max(fastest, 1e-9)))));
    if (inner[p] > 1) await sampleOf(peers[p], inner[p]);
  }
  // A cold sample also costs a sweep (PyTorch's, in its own process, about the same).
  const sweepSeconds = sweeper ? sweeper.evict() : 0;

  // Interleaved rounds, each in its own order (a seeded shuffle): a peer inherits the caches
  // and the pending garbage collection of the one before it. A rotated fixed order had the
  // 1-thread row follow ours in most rounds, and it ran up to 10% faster than the very same
  // single-threaded code in ours (grpo, rloo, sequenceLogprobs backward at 512x2048).
  const roundSeconds = warmTimes.reduce((sum, t, p) => sum + t * inner[p] + sweepSeconds, 0);
  const wantedRounds = sweeper ? (options.coldReps ?? options.reps) : options.reps;
  const rounds = Math.min(wantedRounds, Math.max(MIN_ROUNDS, Math.floor(options.caseBudgetSeconds / roundSeconds)));
  const samples: Sample[][] = peers.map(() => []);
  const order = new SeededRandom(rounds * 7919 + peers.length);
  for (let r = 0; r < rounds; r++) {
    progress(`${benchCase.id}: round ${r + 1}/${rounds}${sweeper ? ' (cold)' : ''}`);
    const sequence = peers.map((_, p) => p);
    for (let k = sequence.length - 1; k > 0; k--) {
      const j = Math.floor(order.next() * (k + 1));
      [sequence[k], sequence[j]] = [sequence[j]!, sequence[k]!];
    }
    for (const p of sequence) samples[p].push(await sample(peers[p], inner[p]));
  }
  const arithmeticMs = prepared.arithmetic && measureArithmetic(prepared.arithmetic, options, progress, benchCase.id);
  if (torch && benchCase.torch && !skipped.some((s) => s.peer === 'PyTorch')) await torch.drop(benchCase.id);
  if (torch && benchCase.python && peers.some((p) => p.kind === 'tirl-python')) await torch.drop(pythonId(benchCase));

  const stats = peers.map((peer, p) => {
    const sorted = samples[p].map((x) => x.wall).sort((a, b) => a - b);
    const cpu = median(samples[p].map((x) => x.cpu).sort((a, b) => a - b));
    return { peer, p, median: median(sorted), min: sorted[0], max: sorted[sorted.length - 1], cpu };
  });
  const tirlMedian = stats[0].median;
  const oneThread = peers.findIndex((p) => p.kind === 'tirl-1thread');
  const walls = (p: number) => samples[p].map((s) => s.wall);
  const threadsVsOne = oneThread < 0 ? undefined : medianRatio(walls(oneThread), walls(0));
  const threadsVsOneInterval = oneThread < 0 ? undefined : medianRatioInterval(walls(oneThread), walls(0));
  const copyMedian = stats[stats.length - 1].median;
  return {
    op: benchCase.op,
    id: benchCase.id,
    title: benchCase.title,
    bytes: benchCase.bytes,
    byteModel: benchCase.byteModel,
    cache,
    ...(sweeper ? { sweepMs: sweepSeconds * 1e3 } : {}),
    peers: stats.map((s) => ({
      name: s.peer.name,
      kind: s.peer.kind,
      medianMs: s.median * 1e3,
      minMs: s.min * 1e3,
      maxMs: s.max * 1e3,
      cpuMs: s.cpu * 1e3,
      inner: inner[s.p],
      samples: samples[s.p].length,
      gbPerSecond: benchCase.bytes / s.median / 1e9,
      copyShare: copyMedian / s.median,
      tirlSpeedup: s.median / tirlMedian,
    })),
    skipped,
    ...(mismatch === undefined ? {} : { mismatch }),
    ...(arithmeticMs === undefined ? {} : { arithmeticMs }),
    ...(threadsVsOne === undefined ? {} : { threadsVsOne, threadsVsOneInterval }),
    ...(benchCase.callOverhead ? { callOverhead: true } : {}),
    ...(benchCase.bandwidthTarget === undefined ? {} : { bandwidthTarget: benchCase.bandwidthTarget }),
  };
}

/** Samples of a case's in-cache slices (CaseSetup.arithmetic). */
const ARITHMETIC_SAMPLES = 9;

/**
 * The case's arithmetic alone, in ms: on one thread, warm, the CPU time a call of its slice
 * of 2·units less that of its slice of `units` (the call's fixed cost cancels), the median
 * over ARITHMETIC_SAMPLES samples of at least minSampleSeconds each, scaled to the case's
 * total and divided by the threads (as if they scaled perfectly: a lower bound).
 */
function measureArithmetic(arithmetic: Arithmetic, options: MeasureOptions, progress: Progress, id: string): number {
  progress(`${id}: timing the arithmetic alone`);
  const single = syncPeer('slice', 'tirl-1thread', arithmetic.slice(arithmetic.units));
  const double = syncPeer('slice', 'tirl-1thread', arithmetic.slice(2 * arithmetic.units));
  const differences: number[] = [];
  setThreads(1);
  try {
    let fastest = Infinity;
    for (let w = 0; w < Math.max(2, options.warmup); w++) {
      single.sample(1);
      fastest = Math.min(fastest, (double.sample(1) as Sample).cpu);
    }
    const inner = Math.max(1, Math.ceil(options.minSampleSeconds / Math.max(fastest, 1e-9)));
    for (let s = 0; s < ARITHMETIC_SAMPLES; s++) {
      const one = (single.sample(inner) as Sample).cpu;
      differences.push((double.sample(inner) as Sample).cpu - one);
    }
  } finally {
    setThreads(options.threads);
  }
  return arithmeticMsOf(differences, arithmetic.units, arithmetic.total, options.threads);
}

/**
 * A case's arithmetic alone in ms, from the samples' CPU seconds a call of the slice of
 * 2·units less that of the slice of `units`: their median a unit, times the case's `total`
 * units, over `threads`.
 */
export function arithmeticMsOf(differences: number[], units: number, total: number, threads: number): number {
  const perUnit = median([...differences].sort((a, b) => a - b)) / units;
  return ((perUnit * total) / threads) * 1e3;
}

/** The thread count our kernels use now. */
export function currentThreads(): number {
  return info().threads;
}

/** Describes how `a` and `b` differ beyond a relative `tolerance`, or undefined. */
export function compareNumbers(name: string, a: number, b: number, tolerance: number): string | undefined {
  const scale = Math.max(Math.abs(a), Math.abs(b), 1e-12);
  return Math.abs(a - b) <= tolerance * scale ? undefined : `${name}: ${a} vs ${b}`;
}

/**
 * Describes the worst element of `a` and `b` beyond `tolerance` relative to the largest
 * magnitude in `b` (elementwise relative error is meaningless next to zeros), or undefined.
 */
export function compareArrays(name: string, a: ArrayLike<number>, b: ArrayLike<number>, tolerance: number): string | undefined {
  if (a.length !== b.length) return `${name}: lengths ${a.length} vs ${b.length}`;
  let scale = 1e-30;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  let worst = -1;
  let worstError = 0;
  for (let i = 0; i < a.length; i++) {
    const error = Math.abs(a[i] - b[i]);
    if (!(error <= worstError)) {
      worst = i;
      worstError = error;
    }
  }
  return worst < 0 || worstError <= tolerance * scale
    ? undefined
    : `${name}[${worst}]: ${a[worst]} vs ${b[worst]} (scale ${scale.toPrecision(3)})`;
}
