/**
 * Runs the fuzz loop (fuzz.ts) in a child process, so that a crash of the addon (a
 * segfault, an abort) is caught and reported with the seed and the case that reproduces it;
 * after a crash the run goes on from the next case.
 *
 *   node dist/test/fuzz/run.js --seed 1 --calls 1000000 [--in-flight-mutation] [--json]
 *   node dist/test/fuzz/run.js --seed 1 --seconds 600
 *   node dist/test/fuzz/run.js --seed 1 --from 4711 --cases 1      (replay one case)
 *
 * Exits 1 when anything failed or crashed.
 */
import { fork } from 'node:child_process';
import { writeSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { emptyFuzzReport, fuzz, OUTCOMES, type Failure, type FuzzOptions, type FuzzReport } from './fuzz.js';
import { OP_NAMES } from './ops.js';

/** What a run covers: the fuzz loop's own options, less its callbacks. */
export type RunOptions = Pick<FuzzOptions, 'seed' | 'from' | 'calls' | 'cases' | 'seconds' | 'inFlightMutation'>;

export interface Crash {
  /** The case that crashed the process (replayed alone), or the first of the cases that may have. */
  index: number;
  /** True when replaying the case alone crashed again. */
  reproduced: boolean;
  signal: string | null;
  exitCode: number | null;
  /** The end of the child's stderr. */
  stderr: string;
}

export interface RunReport extends FuzzReport {
  crashes: Crash[];
  inFlightMutation: boolean;
}

type Message = { type: 'progress'; index: number; report: FuzzReport } | { type: 'failure'; failure: Failure } | { type: 'done'; report: FuzzReport };

const SELF = fileURLToPath(import.meta.url);

function argumentsOf(o: RunOptions & { progressEvery?: number; trace?: boolean }): string[] {
  const args = ['--seed', String(o.seed), '--from', String(o.from ?? 0)];
  if (o.calls !== undefined) args.push('--calls', String(o.calls));
  if (o.cases !== undefined) args.push('--cases', String(o.cases));
  if (o.seconds !== undefined) args.push('--seconds', String(o.seconds));
  if (o.inFlightMutation) args.push('--in-flight-mutation');
  if (o.progressEvery !== undefined) args.push('--progress-every', String(o.progressEvery));
  if (o.trace) args.push('--trace');
  return args;
}

interface ChildRun {
  report?: FuzzReport;
  /** The last progress: the report before case `index` ran. */
  progress?: { index: number; report: FuzzReport };
  failures: Failure[];
  signal: NodeJS.Signals | null;
  exitCode: number | null;
  stderr: string;
}

function runChild(o: RunOptions & { progressEvery?: number; trace?: boolean }): Promise<ChildRun> {
  return new Promise((resolve) => {
    const child = fork(SELF, [...argumentsOf(o), '--child'], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    const run: ChildRun = { failures: [], signal: null, exitCode: null, stderr: '' };
    child.stderr!.on('data', (chunk: Buffer) => {
      run.stderr = (run.stderr + chunk.toString()).slice(-4000);
    });
    child.on('message', (message: Message) => {
      if (message.type === 'progress') run.progress = { index: message.index, report: message.report };
      else if (message.type === 'failure') run.failures.push(message.failure);
      else run.report = message.report;
    });
    child.on('exit', (code, signal) => {
      run.exitCode = code;
      run.signal = signal;
      resolve(run);
    });
  });
}

function emptyReport(o: RunOptions): RunReport {
  return { ...emptyFuzzReport(o.seed, o.from ?? 0), crashes: [], inFlightMutation: o.inFlightMutation ?? false };
}

function add(total: RunReport, part: FuzzReport): void {
  total.cases += part.cases;
  total.calls += part.calls;
  for (const op of OP_NAMES) total.perOp[op] += part.perOp[op];
  for (const outcome of OUTCOMES) total.outcomes[outcome] += part.outcomes[outcome];
}

/** Fuzzes in child processes until the count or time is reached, surviving crashes. */
export async function runIsolated(o: RunOptions): Promise<RunReport> {
  const total = emptyReport(o);
  const start = performance.now();
  let from = o.from ?? 0;
  for (;;) {
    const elapsed = (performance.now() - start) / 1000;
    const calls = o.calls === undefined ? undefined : o.calls - total.calls;
    const cases = o.cases === undefined ? undefined : o.cases - total.cases;
    const seconds = o.seconds === undefined ? undefined : o.seconds - elapsed;
    if ((calls !== undefined && calls <= 0) || (cases !== undefined && cases <= 0) || (seconds !== undefined && seconds <= 0)) break;
    const run = await runChild({ ...o, from, calls, cases, seconds, progressEvery: 200 });
    total.failures.push(...run.failures.slice(0, 100 - total.failures.length));
    if (run.report && run.exitCode === 0) {
      add(total, run.report);
      break;
    }
    // Crashed somewhere in the cases after the last progress: replay them one by one.
    const last = run.progress ?? { index: from, report: emptyReport({ ...o, from }) };
    add(total, last.report);
    const { crash, before } = await locateCrash(o, last.index, run);
    if (before) add(total, before);
    total.crashes.push(crash);
    total.cases += 1;
    total.calls += 1;
    from = crash.index + 1;
  }
  total.seconds = (performance.now() - start) / 1000;
  return total;
}

/** Replays the cases from `first` one by one until one crashes; `before` counts the cases before it. */
async function locateCrash(o: RunOptions, first: number, run: ChildRun): Promise<{ crash: Crash; before?: FuzzReport }> {
  const replay = await runChild({ seed: o.seed, from: first, cases: 200, inFlightMutation: o.inFlightMutation, progressEvery: 1, trace: true });
  const crashed = !(replay.report && replay.exitCode === 0);
  const source = crashed ? replay : run;
  const crash = { index: first, reproduced: crashed, signal: source.signal, exitCode: source.exitCode, stderr: source.stderr.slice(-1500) };
  if (!crashed || !replay.progress) return { crash };
  return { crash: { ...crash, index: replay.progress.index }, before: replay.progress.report };
}

function printReport(r: RunReport, command: string): void {
  const lines = [
    `tirl fuzz: ${command}`,
    `seed ${r.seed}, cases ${r.from}..${r.from + r.cases - 1}, ${r.calls} calls in ${r.seconds.toFixed(1)} s` + ` (${Math.round(r.calls / Math.max(r.seconds, 1e-9))} calls/s), in-flight mutation ${r.inFlightMutation ? 'on' : 'off'}`,
    `per op: ${OP_NAMES.map((op) => `${op} ${r.perOp[op]}`).join(', ')}`,
    `outcomes: ${OUTCOMES.map((k) => `${k} ${r.outcomes[k]}`).join(', ')}`,
    `failures: ${r.failures.length}, crashes: ${r.crashes.length}`,
  ];
  for (const f of r.failures) lines.push(`  FAIL case ${f.index} ${f.op} (${f.call}; ${f.move}): ${f.problem}`);
  for (const c of r.crashes) {
    lines.push(`  CRASH case ${c.index}${c.reproduced ? '' : ' (or a case after it; not reproduced alone)'}: signal ${c.signal}, exit code ${c.exitCode}`);
    lines.push(`    replay: node dist/test/fuzz/run.js --seed ${r.seed} --from ${c.index} --cases 1${r.inFlightMutation ? ' --in-flight-mutation' : ''}`);
    if (c.stderr) lines.push(`    stderr: ${c.stderr.trim().split('\n').slice(-8).join('\n            ')}`);
  }
  console.log(lines.join('\n'));
}

function parse(argv: string[]): RunOptions & { child: boolean; json: boolean; trace: boolean; progressEvery: number } {
  const o = { seed: 1, child: false, json: false, trace: false, progressEvery: 1000, inFlightMutation: false } as RunOptions & { child: boolean; json: boolean; trace: boolean; progressEvery: number };
  const number = (i: number) => {
    const value = Number(argv[i + 1]);
    if (!Number.isFinite(value) || value < 0) throw new Error(`${argv[i]} needs a number >= 0, got ${argv[i + 1]}`);
    return value;
  };
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case '--seed': o.seed = number(i++); break;
      case '--from': o.from = number(i++); break;
      case '--calls': o.calls = number(i++); break;
      case '--cases': o.cases = number(i++); break;
      case '--seconds': o.seconds = number(i++); break;
      case '--progress-every': o.progressEvery = Math.max(1, number(i++)); break;
      case '--in-flight-mutation': o.inFlightMutation = true; break;
      case '--json': o.json = true; break;
      case '--child': o.child = true; break;
      case '--trace': o.trace = true; break;
      default: throw new Error(`unknown argument ${argv[i]} (see the header of test/fuzz/run.ts)`);
    }
  }
  if (o.calls === undefined && o.cases === undefined && o.seconds === undefined) o.calls = 10_000;
  return o;
}

/** The child: runs the loop and reports over IPC. */
async function child(o: ReturnType<typeof parse>): Promise<void> {
  const send = (message: Message) => process.send?.(message);
  const report = await fuzz({
    seed: o.seed,
    from: o.from,
    calls: o.calls,
    cases: o.cases,
    seconds: o.seconds,
    inFlightMutation: o.inFlightMutation,
    progressEvery: o.progressEvery,
    onProgress: (r, index) => send({ type: 'progress', index, report: r }),
    onFailure: (failure) => send({ type: 'failure', failure }),
    // Written synchronously, so the last line survives a crash.
    trace: o.trace ? (text) => writeSync(2, `${text}\n`) : undefined,
  });
  send({ type: 'done', report });
  if (process.connected) process.disconnect();
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  if (o.child) return child(o);
  const report = await runIsolated(o);
  if (o.json) console.log(JSON.stringify(report));
  else printReport(report, `node dist/test/fuzz/run.js ${process.argv.slice(2).join(' ')}`);
  process.exitCode = report.failures.length > 0 || report.crashes.length > 0 ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error) => {
    console.error(error);
    process.exitCode = 2;
  });
}
