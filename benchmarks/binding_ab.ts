/**
 * A/B of two builds of the addon (`tirl.node`) in one process, for binding changes: every
 * call form of a 1,024-token ppoLoss (sync with `out` reused, allocating, prepared, prepared
 * positional, async, prepared async, async allocating), the same C call alone repeated in
 * one native call (`ppoLossCCalls`: the reference the forms' cost above the C call is read
 * from) and the bare Node-API round trip (`poolRoundTrip`), the
 * builds alternated call form by call form in rounds whose order reverses every round. It
 * prints, per build and form, the min and median over rounds of the wall time and of the
 * process CPU time (all threads) a call: on a shared machine the CPU times and the A/B
 * difference are what to read, never one wall-clock number.
 *
 *   node dist/benchmarks/binding_ab.js old=/tmp/old/tirl.node new=build/Release/tirl.node \
 *     [--rounds 61] [--calls 2000]
 *
 * Each `tirl.node` holds the whole native core, so two builds load side by side; keep a copy
 * of the old one before rebuilding.
 */
import { createRequire } from 'node:module';
import { resolve } from 'node:path';

import type { NativeAddon } from '../lib/native.js';
import type { PpoLossArrays, PpoLossPositional, PpoLossResult } from '../lib/kernels/ppo_loss.js';
import type { PreparedCall } from '../lib/kernels/prepared.js';
import { Rng } from './data.js';

type Addon = NativeAddon & {
  ppoLoss(options: PpoLossArrays): PpoLossResult;
  ppoLossAsync(options: PpoLossArrays): Promise<PpoLossResult>;
  preparePpoLoss(settings: object): PreparedCall<PpoLossArrays, PpoLossResult, PpoLossPositional>;
  // Absent from builds older than them: their forms are then left out for that build.
  ppoLossCCalls?(options: PpoLossArrays, calls: number): void;
};

const TOKENS = 1024;

interface Form {
  name: string;
  call: () => unknown;
  /** Makes `calls` calls in one (the C-call reference: no JavaScript between them). */
  batch?: (calls: number) => void;
}

function usage(message: string): never {
  process.stderr.write(`binding_ab: ${message}\nusage: node dist/benchmarks/binding_ab.js NAME=PATH/tirl.node [NAME=PATH ...] [--rounds N] [--calls N]\n`);
  process.exit(2);
}

function parse(argv: string[]): { builds: [string, string][]; rounds: number; calls: number } {
  const builds: [string, string][] = [];
  let rounds = 61;
  let calls = 2000;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--rounds' || a === '--calls') {
      const n = Number(argv[++i]);
      if (!Number.isInteger(n) || n < 1) usage(`${a} needs a positive integer`);
      if (a === '--rounds') rounds = n;
      else calls = n;
    } else if (/^[A-Za-z0-9_-]+=./.test(a)) {
      const at = a.indexOf('=');
      builds.push([a.slice(0, at), resolve(a.slice(at + 1))]);
    } else {
      usage(`unknown argument ${a}`);
    }
  }
  if (builds.length === 0) usage('name at least one build');
  return { builds, rounds, calls };
}

function inputs(): PpoLossArrays & { out: { grad: Float32Array } } {
  const rng = new Rng(2);
  const logp = rng.uniform(TOKENS, -5, 0);
  const noise = rng.bell(TOKENS, 0, 0.1);
  const mask = new Uint8Array(TOKENS);
  for (let i = 0; i < TOKENS; i++) mask[i] = i % 10 === 0 ? 0 : 1;
  return {
    logp,
    oldLogp: logp.map((x, i) => x + noise[i]!),
    advantages: rng.bell(TOKENS, 0, 1),
    mask,
    out: { grad: new Float32Array(TOKENS) },
  };
}

function formsOf(addon: Addon): Form[] {
  const reused = inputs();
  const { out: _out, ...allocating } = inputs();
  const prepared = addon.preparePpoLoss({});
  const { logp, oldLogp, advantages, mask, out } = reused;
  const cCalls = addon.ppoLossCCalls;
  return [
    // The same C call (tirl_policy_loss) on the same arrays, repeated in one native call.
    ...(cCalls ? [{ name: 'C call (ppoLossCCalls)', call: () => cCalls(reused, 1), batch: (n: number) => cCalls(reused, n) }] : []),
    { name: 'sync', call: () => addon.ppoLoss(reused) },
    { name: 'sync allocating', call: () => addon.ppoLoss(allocating) },
    { name: 'prepared', call: () => prepared(reused) },
    ...(typeof prepared.positional === 'function'
      ? [{ name: 'prepared positional', call: () => prepared.positional(logp, oldLogp, advantages, mask, undefined, undefined, undefined, out) }]
      : []),
    { name: 'async', call: () => addon.ppoLossAsync(reused) },
    { name: 'async allocating', call: () => addon.ppoLossAsync(allocating) },
    { name: 'prepared async', call: () => prepared.async(reused) },
    { name: 'poolRoundTrip', call: () => addon.poolRoundTrip() },
  ];
}

function cpuMicros(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** µs a call of `calls` calls, wall and CPU; a Promise is awaited before the next call. */
async function sample(form: Form, calls: number): Promise<[number, number]> {
  const c0 = cpuMicros();
  const t0 = performance.now();
  if (form.batch) form.batch(calls);
  else {
    for (let i = 0; i < calls; i++) {
      const r = form.call();
      if (r instanceof Promise) await r;
    }
  }
  return [((performance.now() - t0) * 1e3) / calls, (cpuMicros() - c0) / calls];
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 === 1 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
}

async function main(): Promise<void> {
  const { builds, rounds, calls } = parse(process.argv.slice(2));
  const require = createRequire(import.meta.url);
  const entries: { label: string; form: Form; wall: number[]; cpu: number[] }[] = [];
  const forms = builds.map(([name, path]) => [name, formsOf(require(path) as Addon)] as const);
  // Build by build within each form, so that the two sides of a form run back to back.
  const names = [...new Set(forms.flatMap(([, list]) => list.map((f) => f.name)))];
  for (const formName of names) {
    for (const [name, list] of forms) {
      const form = list.find((f) => f.name === formName);
      if (form) entries.push({ label: `${name}: ${formName}`, form, wall: [], cpu: [] });
    }
  }
  for (const e of entries) await sample(e.form, calls); // warm-up: JIT, the pool's threads
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? entries : [...entries].reverse();
    for (const e of order) {
      const [wall, cpu] = await sample(e.form, calls);
      e.wall.push(wall);
      e.cpu.push(cpu);
    }
  }
  const width = Math.max(...entries.map((e) => e.label.length));
  process.stdout.write(`${rounds} rounds of ${calls} calls, µs a call: wall min / median, CPU (all threads) min / median\n`);
  for (const e of entries) {
    const f = (x: number) => x.toFixed(2).padStart(7);
    process.stdout.write(`${e.label.padEnd(width)}  wall ${f(Math.min(...e.wall))} ${f(median(e.wall))}  CPU ${f(Math.min(...e.cpu))} ${f(median(e.cpu))}\n`);
  }
}

await main();
