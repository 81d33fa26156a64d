/**
 * `tirl bench`: parses the flags, measures the machine's memory bandwidth, runs the
 * selected cases against their peers, and writes the table, a JSON file and an SVG chart.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, release, platform } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { info, setThreads } from '../lib/index.js';
import { CacheSweeper, cachePlan, type CachePlan } from './cache.js';
import { allCases } from './cases.js';
import { measureCase, type BenchCase, type CaseResult, type SizeName } from './harness.js';
import { markdownReport, svgChart, terminalReport, type BenchReport, type BindingOverhead, type StreamResult } from './report.js';
import { measureScaling, type ScalingRow } from './scaling.js';
import { startTorch } from './torch.js';

const packageRoot = fileURLToPath(new URL('../..', import.meta.url));

export const benchUsage = `Usage: tirl bench [options]

Measures every kernel against a plain TypeScript peer, PyTorch eager on the CPU and the
memory bandwidth of this machine (see benchmarks/README.md). Cases larger than the L2 are
timed one call at a time, each after a sweep that evicts the caches.

Options:
  --ops LIST       ops to run, comma-separated (e.g. ppoLoss,tokenLogprobs); default all
  --sizes NAME     'full' (the sizes of issue 3, default) or 'quick' (small inputs)
  --quick          --sizes quick with fewer repetitions: a run of well under a minute
  --threads N      threads for our kernels and PyTorch (default: tirl's default)
  --reps N         interleaved rounds per warm case (default 15, quick 5; fewer, but at
                   least 3, where the rounds would exceed 40 s, or 3 s with --quick)
  --cold-reps N    interleaved rounds per cold case, one call a sample (default 9 x reps;
                   cut by the same budget)
  --cold-above N   time cases of more than N bytes cold (default: the private L2; 0 times
                   every case cold)
  --no-torch       do not run the PyTorch peer
  --no-scaling     skip the "threads vs 1" sweep (every op at three sizes)
  --scaling-only   run only that sweep (with --ops: of those ops)
  --json           print the JSON report on stdout instead of the table
  --out DIR        where to write cpu-<date>.json/.md/.svg (default bench-results/)
  -h, --help       this text`;

// A cold sample is one call from evicted caches, a warm one averages many calls: short cold
// cases (0.3-0.8 ms) moved by up to 20 points of `% copy` between two runs of one build at
// 15 rounds (feedbackMask 66% / 44%, remax 71% / 50%), so cold cases run more rounds;
// their median's spread shrinks by about the square root of the factor. At three times
// (45), their `threads vs 1` moved by ±5-8% between runs of one build (the estimators of
// 512 × 2048 tokens: 0.93-0.98× in a full run, 0.97-1.22× in two runs just after); at
// nine times (135), by ±2-5% (0.96-1.09×).
const COLD_REPS_FACTOR = 9;

interface BenchFlags {
  ops?: string[];
  sizes: SizeName;
  threads: number;
  reps: number;
  /** Rounds of a cold case (one call a sample: a median needs more of them). */
  coldReps: number;
  warmup: number;
  minSampleSeconds: number;
  caseBudgetSeconds: number;
  /** Cases of more bytes than this are timed cold; undefined: the private L2 (cachePlan). */
  coldAbove?: number;
  torch: boolean;
  scaling: 'yes' | 'no' | 'only';
  json: boolean;
  out: string;
}

function fail(message: string): never {
  throw Object.assign(new Error(`tirl bench: ${message}\n\n${benchUsage}`), { usage: true });
}

function positiveInteger(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) fail(`expected a positive integer for --${name} but received '${value}'`);
  return n;
}

export function parseBenchFlags(argv: string[]): BenchFlags | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        ops: { type: 'string' },
        sizes: { type: 'string' },
        quick: { type: 'boolean' },
        threads: { type: 'string' },
        reps: { type: 'string' },
        'cold-reps': { type: 'string' },
        'cold-above': { type: 'string' },
        'no-torch': { type: 'boolean' },
        'no-scaling': { type: 'boolean' },
        'scaling-only': { type: 'boolean' },
        json: { type: 'boolean' },
        out: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }).values;
  } catch (error) {
    fail((error as Error).message);
  }
  if (parsed.help) return 'help';
  if (parsed['scaling-only'] && parsed['no-scaling']) fail('--scaling-only and --no-scaling exclude each other');
  const quick = parsed.quick === true;
  const sizes = (parsed.sizes ?? (quick ? 'quick' : 'full')) as SizeName;
  if (sizes !== 'quick' && sizes !== 'full') fail(`expected 'quick' or 'full' for --sizes but received '${sizes}'`);
  const known = new Set(allCases.map((c) => c.op.toLowerCase()));
  const ops = parsed.ops?.split(',').map((op) => op.trim()).filter((op) => op !== '');
  for (const op of ops ?? []) {
    if (!known.has(op.toLowerCase())) fail(`unknown op '${op}' in --ops (known: ${[...new Set(allCases.map((c) => c.op))].join(', ')})`);
  }
  const threads = positiveInteger(parsed.threads, 'threads') ?? info().threads;
  const coldAboveText = parsed['cold-above'];
  const coldAbove = coldAboveText === undefined ? undefined : Number(coldAboveText);
  if (coldAbove !== undefined && !(Number.isSafeInteger(coldAbove) && coldAbove >= 0)) {
    fail(`expected a non-negative integer (bytes) for --cold-above but received '${coldAboveText}'`);
  }
  if (threads > 1024) fail(`expected at most 1024 for --threads but received ${threads}`);
  const reps = positiveInteger(parsed.reps, 'reps') ?? (sizes === 'quick' ? 5 : 15);
  return {
    ...(ops ? { ops } : {}),
    sizes,
    threads,
    reps,
    coldReps: positiveInteger(parsed['cold-reps'], 'cold-reps') ?? COLD_REPS_FACTOR * reps,
    warmup: sizes === 'quick' ? 1 : 2,
    minSampleSeconds: sizes === 'quick' ? 0.002 : 0.005,
    caseBudgetSeconds: sizes === 'quick' ? 3 : 40,
    ...(coldAbove !== undefined ? { coldAbove } : {}),
    torch: parsed['no-torch'] !== true,
    scaling: parsed['scaling-only'] === true ? 'only' : parsed['no-scaling'] === true ? 'no' : 'yes',
    json: parsed.json === true,
    out: resolve(parsed.out ?? 'bench-results'),
  };
}

/**
 * The CPU as lscpu describes it (model name, family/model, L3, hypervisor), or the model
 * name from os.cpus() where lscpu is missing.
 */
async function cpuDescription(): Promise<string> {
  try {
    const { stdout } = await promisify(execFile)('lscpu', [], { env: { ...process.env, LC_ALL: 'C' } });
    const field = (name: string) => new RegExp(`^${name}:\\s*(.+)$`, 'm').exec(stdout)?.[1]?.trim();
    const model = field('Model name');
    if (model) {
      const details = [
        field('CPU family') && `family ${field('CPU family')} model ${field('Model')}`,
        field('L3 cache') && `L3 ${field('L3 cache')}`,
        field('Hypervisor vendor') && `${field('Hypervisor vendor')} guest`,
      ].filter(Boolean);
      return details.length > 0 ? `${model} (${details.join(', ')})` : model;
    }
  } catch {
    // no lscpu: fall through
  }
  return cpus()[0]?.model ?? 'unknown CPU';
}

/** The checkout's commit, when the package runs from a git checkout. */
async function gitCommit(): Promise<string | undefined> {
  try {
    const { stdout } = await promisify(execFile)('git', ['rev-parse', '--short', 'HEAD'], { cwd: packageRoot });
    return stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** STREAM copy/triad and the C ABI ppoLoss call, from the native tirl_stream program. */
async function measureStream(threads: number, quick: boolean): Promise<StreamResult> {
  const program = join(packageRoot, 'build', 'Release', 'tirl_stream');
  if (!existsSync(program)) {
    return { skipped: `${program} not built (a source build, 'npm run build:native', makes it)` };
  }
  const args = ['--threads', String(Math.min(threads, 64)), '--mib', quick ? '64' : '256', '--reps', quick ? '3' : '10'];
  const libtirl = join(packageRoot, 'build', 'Release', 'libtirl.so');
  if (existsSync(libtirl)) args.push('--libtirl', libtirl);
  try {
    const { stdout } = await promisify(execFile)(program, args);
    return JSON.parse(stdout) as StreamResult;
  } catch (error) {
    return { skipped: `tirl_stream failed: ${(error as Error).message}` };
  }
}

function selectCases(flags: BenchFlags): BenchCase[] {
  const ops = flags.ops?.map((op) => op.toLowerCase());
  return allCases.filter((c) => c.sizes.includes(flags.sizes) && (!ops || ops.includes(c.op.toLowerCase())));
}

export async function runBench(argv: string[]): Promise<number> {
  const flags = parseBenchFlags(argv);
  if (flags === 'help') {
    console.log(benchUsage);
    return 0;
  }
  const previousThreads = info().threads;
  setThreads(flags.threads);
  const interactive = process.stderr.isTTY === true;
  let lastLength = 0;
  const progress = (message: string) => {
    if (interactive) {
      const line = `tirl bench ${message}`.slice(0, (process.stderr.columns ?? 100) - 1);
      process.stderr.write(`\r${line}${' '.repeat(Math.max(0, lastLength - line.length))}`);
      lastLength = line.length;
    } else {
      process.stderr.write(`tirl bench ${message}\n`);
    }
  };

  const cases = flags.scaling === 'only' ? [] : selectCases(flags);
  const started = new Date();
  progress('measuring memory bandwidth (tirl_stream)');
  const stream: StreamResult =
    flags.scaling === 'only' ? { skipped: 'not run (--scaling-only)' } : await measureStream(flags.threads, flags.sizes === 'quick');

  // Cases past the L2 are timed one call at a time after a sweep of the caches (cache.ts).
  const plan: CachePlan | undefined = cases.length > 0 ? cachePlan() : undefined;
  if (plan && flags.coldAbove !== undefined) {
    plan.coldAboveBytes = flags.coldAbove;
    plan.coldAboveFromFlag = true;
  }
  let torchDescription = 'not run (--no-torch)';
  let torchReason: string | undefined = '--no-torch';
  let torch;
  if (flags.torch && cases.some((c) => c.torch)) {
    progress('starting the PyTorch peer');
    const start = await startTorch(cases, flags.threads, plan && { bytes: plan.sweepBytes, threads: plan.sweepThreads });
    torch = start.runner;
    torchReason = start.reason;
    torchDescription = start.runner ? start.description : `skipped: ${start.reason}`;
  }

  const results: CaseResult[] = [];
  let scaling: ScalingRow[] | undefined;
  const needsSweep = plan !== undefined && cases.some((c) => c.bytes > plan.coldAboveBytes);
  const sweeper = needsSweep ? new CacheSweeper(plan.sweepBytes, plan.sweepThreads) : undefined;
  try {
    for (let i = 0; i < cases.length; i++) {
      const c = cases[i];
      results.push(
        await measureCase(
          c,
          {
            threads: flags.threads,
            reps: flags.reps,
            coldReps: flags.coldReps,
            warmup: flags.warmup,
            minSampleSeconds: flags.minSampleSeconds,
            caseBudgetSeconds: flags.caseBudgetSeconds,
            scaling: true,
            ...(sweeper ? { cache: { coldAboveBytes: plan!.coldAboveBytes, sweeper } } : {}),
          },
          torch,
          torchReason,
          (message) => progress(`[${i + 1}/${cases.length}] ${message}`),
        ),
      );
    }
    if (flags.scaling !== 'no' && flags.threads > 1) {
      scaling = await measureScaling({
        threads: flags.threads,
        rounds: flags.sizes === 'quick' ? 7 : 31,
        minSampleSeconds: flags.minSampleSeconds,
        ...(flags.ops ? { ops: flags.ops } : {}),
        progress,
      });
    }
  } finally {
    await sweeper?.close();
    torch?.close();
    setThreads(previousThreads);
    if (interactive) process.stderr.write(`\r${' '.repeat(lastLength)}\r`);
  }

  const commit = await gitCommit();
  const report: BenchReport = {
    date: started.toISOString(),
    seconds: (Date.now() - started.getTime()) / 1e3,
    machine: {
      cpu: await cpuDescription(),
      cores: cpus().length,
      memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
      os: `${platform()} ${release()}`,
      node: process.version,
      tirl: info(),
      ...(commit ? { commit } : {}),
    },
    settings: {
      sizes: flags.sizes,
      threads: flags.threads,
      reps: flags.reps,
      coldReps: flags.coldReps,
      warmup: flags.warmup,
      minSampleMs: flags.minSampleSeconds * 1e3,
      caseBudgetSeconds: flags.caseBudgetSeconds,
      ...(plan ? { cache: plan } : {}),
    },
    stream,
    torch: torchDescription,
    cases: results,
    ...(scaling ? { scaling } : {}),
  };
  const overhead = results.find((r) => r.callOverhead);
  if (overhead) {
    // Each form's peer, and its fields: median wall µs, and CPU µs in cpuUs.
    const forms = [
      ['tirl-async', 'asyncUs', 'async'],
      ['tirl-prepared', 'preparedUs', 'prepared'],
      ['tirl-positional', 'positionalUs', 'positional'],
      ['pool-hop', 'poolHopUs', 'poolHop'],
      ['napi-hop', 'napiHopUs', 'napiHop'],
      ['tirl-python', 'pythonUs', 'python'],
      ['c-abi', 'cAbiUs', 'cAbi'],
    ] as const;
    const wallUs: Partial<Record<(typeof forms)[number][1], number>> = {};
    const cpuUs: NonNullable<BindingOverhead['cpuUs']> = { sync: overhead.peers[0].cpuMs * 1e3 };
    const minUs: NonNullable<BindingOverhead['minUs']> = { sync: overhead.peers[0].minMs * 1e3 };
    for (const [kind, wall, cpu] of forms) {
      const peer = overhead.peers.find((p) => p.kind === kind);
      if (!peer) continue;
      wallUs[wall] = peer.medianMs * 1e3;
      cpuUs[cpu] = peer.cpuMs * 1e3;
      minUs[cpu] = peer.minMs * 1e3;
    }
    report.bindingOverhead = {
      syncUs: overhead.peers[0].medianMs * 1e3,
      ...wallUs,
      cpuUs,
      minUs,
      // The C call sampled in the same rounds (ppoLossCCalls) is the reference; tirl_stream's,
      // from another process, only where that peer is missing.
      ...(wallUs.cAbiUs !== undefined
        ? { cAbiFrom: 'same-process' as const, ...(stream.ppoLoss1024CallUs === undefined ? {} : { streamCAbiUs: stream.ppoLoss1024CallUs }) }
        : stream.ppoLoss1024CallUs === undefined
          ? {}
          : { cAbiUs: stream.ppoLoss1024CallUs, cAbiFrom: 'tirl_stream' as const }),
    };
  }

  mkdirSync(flags.out, { recursive: true });
  const base = join(flags.out, `cpu-${report.date.slice(0, 10)}`);
  writeFileSync(`${base}.json`, JSON.stringify(report, null, 2) + '\n');
  writeFileSync(`${base}.md`, markdownReport(report));
  writeFileSync(`${base}.svg`, svgChart(report));
  if (flags.json) {
    process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  } else {
    process.stdout.write(terminalReport(report));
    process.stdout.write(`\nWrote ${base}.json, .md and .svg\n`);
  }
  return 0;
}
