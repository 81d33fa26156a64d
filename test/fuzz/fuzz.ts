/**
 * The fuzz loop and its oracle. Case `i` of seed `s` is drawn from its own generator, so it
 * can be replayed alone. Each case calls one op, sync or Async, through the public API
 * (`lib/kernels`) or the raw addon (`lib/native.ts`):
 * - a valid call of random size, its arrays possibly in shared, growable, resizable or offset
 *   memory: sync and Async must both succeed, agree bitwise, and match the float64 reference;
 * - an adversarial call (see mutate.ts): it must succeed (and then, when its options are
 *   plain data, be correct) or throw a TypeError or RangeError whose message has the one
 *   shape "<op>: Expected ... but received ..." and names an argument; an error thrown by a
 *   getter of the options themselves must come through unchanged;
 * - with `inFlightMutation`, an Async call whose input and output buffers JavaScript
 *   detaches, resizes or overwrites right after the call returns: it may give any values,
 *   but must settle with a result or a TypeError/RangeError and never crash.
 */
import * as api from '../../lib/index.js';
import { native } from '../../lib/native.js';
import { Random } from '../support.js';
import { arraysOf, disturb, GETTER_ERROR, junkOptions, mutate, rehome, type Move } from './mutate.js';
import { OP_NAMES, OPS, type OpName, type OpSpec, type Options } from './ops.js';

export type Outcome = 'ok' | 'TypeError' | 'RangeError' | 'getter error';
export const OUTCOMES: readonly Outcome[] = ['ok', 'TypeError', 'RangeError', 'getter error'];

export interface Failure {
  /** Case index: `--seed <seed> --from <index> --calls 1` replays it. */
  index: number;
  op: OpName;
  call: string;
  move: string;
  problem: string;
}

export interface FuzzReport {
  seed: number;
  from: number;
  cases: number;
  /** Op invocations (a valid case calls its op twice: sync and Async). */
  calls: number;
  perOp: Record<string, number>;
  outcomes: Record<Outcome, number>;
  failures: Failure[];
  seconds: number;
}

export interface FuzzOptions {
  seed: number;
  /** First case index. Default 0. */
  from?: number;
  /** Stop after this many op invocations. */
  calls?: number;
  /** Stop after this many cases. */
  cases?: number;
  /** Stop after this many seconds. */
  seconds?: number;
  /** Detach, resize and overwrite buffers while Async calls run. Default false. */
  inFlightMutation?: boolean;
  /** Called before case `index` runs, every `progressEvery` cases. */
  onProgress?: (report: FuzzReport, index: number) => void;
  progressEvery?: number;
  /** Called for each failure as it is found. */
  onFailure?: (failure: Failure) => void;
  /** Told of every invocation before it runs (e.g. to write it where a crash leaves it). */
  trace?: (text: string) => void;
}

type Call = (options: unknown) => unknown;
type Path = 'api' | 'raw';

function entry(path: Path, op: OpName, async: boolean): Call {
  const name = async ? `${op}Async` : op;
  const table = (path === 'api' ? api : native) as unknown as Record<string, Call>;
  return table[name];
}

/** A per-case seed, so that any case can be replayed alone. */
export function caseSeed(seed: number, index: number): number {
  let h = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index, 0xc2b2ae35);
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  return h >>> 0;
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Names an error message may name for this op. */
function argumentPattern(spec: OpSpec): RegExp {
  const names = [...spec.arguments.map((a) => a.name), 'out', 'the first argument'];
  if (spec.outMembers) names.push(...Object.keys(spec.outMembers).map((m) => `out.${m}`));
  return new RegExp(`(^|[^A-Za-z])(${names.map(escape).join('|')})([^A-Za-z]|$)`);
}
const PATTERNS = new Map<OpName, RegExp>(OP_NAMES.map((op) => [op, argumentPattern(OPS[op])]));

/** The outcome of a thrown value, or the problem with it. */
export function judgeError(op: OpName, error: unknown): { outcome?: Outcome; problem?: string } {
  if (error === GETTER_ERROR) return { outcome: 'getter error' };
  if (!(error instanceof Error)) return { problem: `threw a non-Error: ${String(error)}` };
  const kind = error.constructor === TypeError ? 'TypeError' : error.constructor === RangeError ? 'RangeError' : undefined;
  if (kind === undefined) return { problem: `threw ${error.constructor.name}: ${error.message}` };
  const shape = new RegExp(`^${op}: Expected [\\s\\S]+ but received [\\s\\S]+$`);
  if (!shape.test(error.message)) return { problem: `${kind} without the one message shape: "${error.message}"` };
  if (!PATTERNS.get(op)!.test(error.message.slice(op.length + 2))) return { problem: `${kind} naming no argument: "${error.message}"` };
  return { outcome: kind };
}

/** Set by `fuzz({ trace })`: told of every invocation before it runs. */
let trace: ((text: string) => void) | undefined;

/** Invokes and settles: the result, or the thrown value (sync throw or rejection). */
async function invoke(call: Call, options: unknown, text: string): Promise<{ result?: unknown; error?: unknown; threw: boolean }> {
  trace?.(text);
  try {
    return { result: await call(options), threw: false };
  } catch (error) {
    return { error, threw: true };
  }
}

/** A deep copy of a result: plain typed arrays and numbers, detached from the call's buffers. */
function snapshot(result: unknown): unknown {
  if (ArrayBuffer.isView(result)) return (result as Float32Array).slice();
  if (result !== null && typeof result === 'object') {
    return Object.fromEntries(Object.entries(result).map(([k, v]) => [k, snapshot(v)]));
  }
  return result;
}

function bytes(view: ArrayBufferView): Buffer {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

/** Where two results differ bitwise, or undefined. */
function bitwiseDifference(a: unknown, b: unknown, path = 'result'): string | undefined {
  if (ArrayBuffer.isView(a) || ArrayBuffer.isView(b)) {
    if (!ArrayBuffer.isView(a) || !ArrayBuffer.isView(b) || a.constructor !== b.constructor || !bytes(a).equals(bytes(b))) return path;
    return undefined;
  }
  if (a !== null && typeof a === 'object' && b !== null && typeof b === 'object') {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) {
      const d = bitwiseDifference((a as Options)[k], (b as Options)[k], `${path}.${k}`);
      if (d) return d;
    }
    return undefined;
  }
  return Object.is(a, b) ? undefined : `${path} (${String(a)} vs ${String(b)})`;
}

/** The results that must be the `out` arrays given (`out` itself, or its members). */
function outIdentityProblem(options: Options, result: unknown): string | undefined {
  const out = options.out;
  if (ArrayBuffer.isView(out)) return result === out ? undefined : 'the result is not the out array';
  if (out === null || typeof out !== 'object') return undefined;
  for (const [member, array] of Object.entries(out)) {
    const got = (result as Options)[member];
    if (got !== undefined && got !== array) return `result.${member} is not out.${member}`;
  }
  return undefined;
}

interface CaseResult {
  op: OpName;
  calls: number;
  outcomes: Outcome[];
  failure?: Omit<Failure, 'index'>;
}

/** Builds the call of a case; the same seeds always build the same call. */
function builder(spec: OpSpec, buildSeed: number, homeSeed: number, moveSeed?: number): () => { options: unknown; move: Move } {
  return () => {
    const o = spec.build(new Random(buildSeed));
    const home = new Random(homeSeed).next() < 0.5 ? rehome(o, new Random(homeSeed + 1)) : { label: 'plain arrays', plain: true };
    if (moveSeed === undefined) return { options: o, move: home };
    const m = mutate(spec, o, new Random(moveSeed));
    return { options: m.proxy ?? o, move: { label: `${m.label}; ${home.label}`, plain: m.plain && home.plain } };
  };
}

async function validCase(spec: OpSpec, path: Path, build: () => { options: unknown; move: Move }): Promise<CaseResult> {
  const op = spec.name;
  const fail = (call: string, move: Move, problem: string): CaseResult => ({ op, calls: 2, outcomes: [], failure: { op, call, move: move.label, problem } });
  const a = build();
  const sync = await invoke(entry(path, op, false), a.options, `${op} ${path} sync; ${a.move.label}`);
  if (sync.threw) return fail(`${path} sync`, a.move, `a valid call threw: ${String(sync.error)}`);
  const identity = outIdentityProblem(a.options as Options, sync.result);
  if (identity) return fail(`${path} sync`, a.move, identity);
  const first = snapshot(sync.result);
  const b = build();
  const async = await invoke(entry(path, op, true), b.options, `${op} ${path} Async; ${b.move.label}`);
  if (async.threw) return fail(`${path} Async`, b.move, `a valid call rejected: ${String(async.error)}`);
  const difference = bitwiseDifference(first, snapshot(async.result));
  if (difference) return fail(`${path} sync vs Async`, a.move, `sync and Async differ bitwise at ${difference}`);
  try {
    spec.check(build().options as Options, first);
  } catch (error) {
    return fail(`${path} sync`, a.move, `wrong result: ${(error as Error).message}`);
  }
  return { op, calls: 2, outcomes: ['ok', 'ok'] };
}

async function adversarialCase(spec: OpSpec, path: Path, async: boolean, build: () => { options: unknown; move: Move }, junk?: { value: unknown }): Promise<CaseResult> {
  const op = spec.name;
  const call = `${path} ${async ? 'Async' : 'sync'}`;
  const a = junk === undefined ? build() : { options: junk.value, move: { label: `options = ${typeof junk.value}`, plain: false } };
  const settled = await invoke(entry(path, op, async), a.options, `${op} ${call}; ${a.move.label}`);
  const fail = (problem: string): CaseResult => ({ op, calls: 1, outcomes: [], failure: { op, call, move: a.move.label, problem } });
  if (settled.threw) {
    const judged = judgeError(op, settled.error);
    return judged.problem ? fail(judged.problem) : { op, calls: 1, outcomes: [judged.outcome!] };
  }
  if (a.move.plain) {
    try {
      spec.check(build().options as Options, snapshot(settled.result));
    } catch (error) {
      return fail(`accepted the call but gave a wrong result: ${(error as Error).message}`);
    }
  }
  return { op, calls: 1, outcomes: ['ok'] };
}

async function inFlightCase(spec: OpSpec, path: Path, build: () => { options: unknown; move: Move }, rng: Random): Promise<CaseResult> {
  const op = spec.name;
  const a = build();
  let pending: Promise<unknown>;
  trace?.(`${op} ${path} Async in flight; ${a.move.label}`);
  try {
    pending = Promise.resolve(entry(path, op, true)(a.options));
  } catch (error) {
    pending = Promise.reject(error);
  }
  const disturbed = arraysOf(a.options as Options)
    .filter(() => rng.next() < 0.5)
    .map((array) => disturb(array, rng));
  const settled = await invoke(() => pending, undefined, 'awaiting it');
  const label = `${a.move.label}; in flight: ${disturbed.join(', ') || 'nothing'}`;
  if (!settled.threw) return { op, calls: 1, outcomes: ['ok'] };
  const judged = judgeError(op, settled.error);
  if (judged.problem) return { op, calls: 1, outcomes: [], failure: { op, call: `${path} Async`, move: label, problem: judged.problem } };
  return { op, calls: 1, outcomes: [judged.outcome!] };
}

/** Runs case `index` of `seed`. */
export async function runCase(seed: number, index: number, inFlightMutation: boolean): Promise<CaseResult> {
  const rng = new Random(caseSeed(seed, index));
  const spec = OPS[rng.pick(OP_NAMES)];
  const path: Path = rng.next() < 0.5 ? 'api' : 'raw';
  const buildSeed = rng.int(0, 2 ** 31);
  const homeSeed = rng.int(0, 2 ** 31);
  const moveSeed = rng.int(0, 2 ** 31);
  const kind = rng.next();
  if (kind < 0.3) return validCase(spec, path, builder(spec, buildSeed, homeSeed));
  if (kind < 0.4 && inFlightMutation) return inFlightCase(spec, path, builder(spec, buildSeed, homeSeed), rng);
  const async = rng.next() < 0.4;
  if (kind > 0.97) return adversarialCase(spec, path, async, builder(spec, buildSeed, homeSeed), { value: junkOptions(rng) });
  return adversarialCase(spec, path, async, builder(spec, buildSeed, homeSeed, moveSeed));
}

/** A report of no cases yet, starting at case `from`. */
export function emptyFuzzReport(seed: number, from: number): FuzzReport {
  return {
    seed,
    from,
    cases: 0,
    calls: 0,
    perOp: Object.fromEntries(OP_NAMES.map((op) => [op, 0])),
    outcomes: { ok: 0, TypeError: 0, RangeError: 0, 'getter error': 0 },
    failures: [],
    seconds: 0,
  };
}

/** Runs cases from `from` until `calls` invocations or `seconds` have passed (whichever first). */
export async function fuzz(options: FuzzOptions): Promise<FuzzReport> {
  const { seed, from = 0, inFlightMutation = false, progressEvery = 1000 } = options;
  const report = emptyFuzzReport(seed, from);
  trace = options.trace;
  const start = performance.now();
  const deadline = options.seconds === undefined ? Infinity : start + options.seconds * 1000;
  const maxCalls = options.calls ?? Infinity;
  const maxCases = options.cases ?? Infinity;
  for (let index = from; report.calls < maxCalls && report.cases < maxCases && performance.now() < deadline; index++) {
    if (options.onProgress && (index - from) % progressEvery === 0) {
      report.seconds = (performance.now() - start) / 1000;
      options.onProgress(report, index);
    }
    const result = await runCase(seed, index, inFlightMutation);
    report.cases++;
    report.calls += result.calls;
    report.perOp[result.op] += result.calls;
    for (const outcome of result.outcomes) report.outcomes[outcome]++;
    if (result.failure) {
      const failure = { index, ...result.failure };
      if (report.failures.length < 100) report.failures.push(failure);
      options.onFailure?.(failure);
    }
  }
  report.seconds = (performance.now() - start) / 1000;
  return report;
}
