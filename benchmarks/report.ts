/** The outputs of `tirl bench`: a terminal table, a Markdown file and an SVG chart. */
import type { TirlInfo } from '../lib/index.js';
import type { CachePlan } from './cache.js';
import type { CaseResult, MedianInterval, PeerResult } from './harness.js';
import { SCALING_PASSES, type ScalingRow } from './scaling.js';

/** What tirl_stream printed (benchmarks/native/stream.c), or why it did not run. */
export interface StreamResult {
  arrayMiB?: number;
  reps?: number;
  /** Copy bandwidth with 1, 2, … threads (STREAM convention: read + written bytes). */
  copyGBps?: number[];
  triadGBps?: number[];
  /** Median µs of one 1,024-token ppoLoss through the C ABI (no binding). */
  ppoLoss1024CallUs?: number;
  ppoLoss1024Skipped?: string;
  skipped?: string;
}

/** Issue 20's targets for the binding's cost above the C ABI call, in µs a call. */
export const OVERHEAD_TARGETS_US = { sync: 3, async: 15, prepared: 3, positional: 3 } as const;

export interface BindingOverhead {
  /** Median µs per call of the sync and async binding (1,024-token ppoLoss). */
  syncUs: number;
  asyncUs?: number;
  /** The same call prepared once (preparePpoLoss), then given only its arrays. */
  preparedUs?: number;
  /** The prepared call's positional form (`prepared.positional(logp, …)`): arrays as arguments. */
  positionalUs?: number;
  /**
   * The same call through the C ABI: the reference every form's cost "above the C call" is
   * taken from; absent when not measured. From `cAbiFrom`: 'same-process' is the op's own
   * C call repeated inside one native call (ppoLossCCalls), sampled in the same rounds as
   * the JavaScript forms; 'tirl_stream' is a C program's, in another process at another
   * moment (the fallback).
   */
  cAbiUs?: number;
  cAbiFrom?: 'same-process' | 'tirl_stream';
  /** tirl_stream's C call, where the same-process one is the reference: for comparison. */
  streamCAbiUs?: number;
  /**
   * Node's own round trip through libuv's thread pool (crypto.pbkdf2, one iteration), awaited
   * one by one like the async form: the floor of any call that leaves the event loop.
   */
  poolHopUs?: number;
  /**
   * The addon's bare Node-API async round trip (`poolRoundTrip`: the async form's own work
   * item and Promise with an empty body), awaited one by one: the floor of our async form,
   * which costs this, the C call and the binding's own work.
   */
  napiHopUs?: number;
  /**
   * Median CPU µs per call of the whole process (all threads) for each form: what a call
   * costs the machine, without the waits for a core that a loaded machine adds to wall time.
   */
  cpuUs?: { sync: number; prepared?: number; positional?: number; async?: number; poolHop?: number; napiHop?: number; python?: number; cAbi?: number };
  /**
   * Wall µs per call of each form's fastest sample (a sample averages thousands of calls):
   * the least disturbed one, steadier than the median on a loaded machine, where a wake-up
   * of a pool thread or of the event loop waits for a core.
   */
  minUs?: { sync: number; prepared?: number; positional?: number; async?: number; poolHop?: number; napiHop?: number; python?: number; cAbi?: number };
  /**
   * The same call through tirl's Python package (`tirl.ppo_loss` on torch tensors, ctypes),
   * timed inside the Python co-process; absent without PyTorch or outside a checkout.
   */
  pythonUs?: number;
}

export interface BenchReport {
  date: string;
  seconds: number;
  machine: { cpu: string; cores: number; memoryGiB: number; os: string; node: string; tirl: TirlInfo; commit?: string };
  settings: {
    sizes: string;
    threads: number;
    reps: number;
    /** Rounds of a cold case; absent in reports from before it existed (then `reps`). */
    coldReps?: number;
    warmup: number;
    minSampleMs: number;
    caseBudgetSeconds: number;
    /** How cases past the L2 are timed cold; absent in reports from before it existed (all warm). */
    cache?: CachePlan;
  };
  stream: StreamResult;
  torch: string;
  cases: CaseResult[];
  /** The "threads vs 1" sweep: every op at three sizes. */
  scaling?: ScalingRow[];
  bindingOverhead?: BindingOverhead;
}

/** Issue 20: more threads must never be slower than one, within noise. */
export const SCALING_FLOOR = 0.95;

const SCALING_HEADER = ['case', 'size', '1 thread ms', 'threads ms', 'best vs best', 'median paired', '95% interval', `≥ ${SCALING_FLOOR}×`];
const SCALING_RIGHT = [false, false, true, true, true, true, true, false];

/** An interval of a median ratio, as "0.93–1.01×" (the confidence where short of 95%). */
function interval(i: MedianInterval | undefined): string {
  if (!i) return '–';
  const short = i.confidence < 0.95 ? ` (${percent(i.confidence)})` : '';
  return `${fixed(i.low, 2)}–${fixed(i.high, 2)}×${short}`;
}

function scalingRows(r: BenchReport): string[][] {
  return (r.scaling ?? []).map((row) => [
    row.id,
    row.size,
    ms(row.oneThreadMs),
    ms(row.threadsMs),
    `${fixed(row.ratio, 2)}×`,
    `${fixed(row.pairedRatio, 2)}×`,
    interval(row.pairedInterval),
    row.pairedRatio >= SCALING_FLOOR ? 'yes' : 'NO',
  ]);
}

function scalingSummary(r: BenchReport): string[] {
  const rows = r.scaling ?? [];
  if (rows.length === 0) return [];
  const lowest = (ratio: (row: ScalingRow) => number) => rows.reduce((a, b) => (ratio(b) < ratio(a) ? b : a));
  const worst = lowest((row) => row.pairedRatio);
  const worstBest = lowest((row) => row.ratio);
  const below = rows.filter((row) => row.pairedRatio < SCALING_FLOOR).length;
  return [
    `${rows[0].threads} threads vs 1 over ${rows.length} op sizes (median of ${rows[0].rounds} paired rounds each, in ${SCALING_PASSES} passes over the sizes): ` +
      `lowest ${fixed(worst.pairedRatio, 2)}× (${worst.id}, 95% interval ${interval(worst.pairedInterval)}), ${below} below ${SCALING_FLOOR}×` +
      `${belowBeyondNoise(rows.map((row) => row.pairedInterval))}; best vs best: lowest ${fixed(worstBest.ratio, 2)}× (${worstBest.id})`,
  ];
}

/** ", N with the whole 95% interval below SCALING_FLOOR", for the verdict lines (nothing for a report without intervals). */
function belowBeyondNoise(intervals: (MedianInterval | undefined)[]): string {
  if (intervals.every((i) => i === undefined)) return '';
  return `, ${intervals.filter((i) => i !== undefined && i.high < SCALING_FLOOR).length} with the whole 95% interval below it`;
}

/** The summary's "threads vs 1" column (cold and warm cases): its lowest, and which read below SCALING_FLOOR. */
function caseThreadsLines(r: BenchReport): string[] {
  const rows = r.cases.flatMap((c) => (c.threadsVsOne === undefined ? [] : [{ id: c.id, ratio: c.threadsVsOne, range: c.threadsVsOneInterval }]));
  if (rows.length === 0) return [];
  const worst = rows.reduce((a, b) => (b.ratio < a.ratio ? b : a));
  const below = rows.filter((row) => row.ratio < SCALING_FLOOR);
  const list = below.map((row) => `${row.id} ${fixed(row.ratio, 2)}× (${interval(row.range)})`).join(', ');
  return [
    `The summary's \`threads vs 1\` (median over each case's rounds, with its 95% interval): lowest ${fixed(worst.ratio, 2)}× ` +
      `(${worst.id}, ${interval(worst.range)}); ${below.length} below ${SCALING_FLOOR}×${below.length > 0 ? ` (${list})` : ''}` +
      `${belowBeyondNoise(rows.map((row) => row.range))}`,
  ];
}

const fixed = (x: number, digits: number) => x.toFixed(digits);

function ms(x: number): string {
  if (x >= 100) return fixed(x, 1);
  if (x >= 1) return fixed(x, 2);
  if (x >= 0.01) return fixed(x, 3);
  return x.toPrecision(2);
}

function percent(share: number): string {
  return `${Math.round(share * 100)}%`;
}

function speedup(p: PeerResult): string {
  if (p.kind === 'tirl' || p.kind === 'copy') return '';
  return p.tirlSpeedup >= 10 ? `${fixed(p.tirlSpeedup, 0)}×` : `${fixed(p.tirlSpeedup, 2)}×`;
}

function peerOf(result: CaseResult, kind: PeerResult['kind']): PeerResult | undefined {
  return result.peers.find((p) => p.kind === kind);
}

function pad(text: string, width: number, right = false): string {
  return right ? text.padStart(width) : text.padEnd(width);
}

function table(header: string[], rows: string[][], rightAligned: boolean[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
  const line = (cells: string[]) => cells.map((cell, c) => pad(cell, widths[c], rightAligned[c])).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function megabytes(bytes: number): string {
  return bytes >= 1e9 ? `${fixed(bytes / 1e9, 2)} GB` : `${fixed(bytes / 1e6, bytes >= 1e7 ? 0 : 2)} MB`;
}

function machineLines(r: BenchReport): string[] {
  const s = r.stream;
  const stream = s.copyGBps
    ? `STREAM (tirl_stream, ${s.arrayMiB} MiB arrays): copy ${s.copyGBps.map((g) => fixed(g, 1)).join(' / ')} GB/s, ` +
      `triad ${s.triadGBps!.map((g) => fixed(g, 1)).join(' / ')} GB/s with 1${s.copyGBps.length > 1 ? `…${s.copyGBps.length}` : ''} threads`
    : `STREAM: ${s.skipped}`;
  return [
    `${r.date} · ${r.machine.cpu}, ${r.machine.cores} cores, ${r.machine.memoryGiB} GiB · ${r.machine.os} · Node ${r.machine.node}`,
    `tirl ${r.machine.tirl.version}${r.machine.commit ? ` at ${r.machine.commit}` : ''} (${r.machine.tirl.simd}; ${r.machine.tirl.build}) · ${r.settings.threads} threads · ` +
      `sizes ${r.settings.sizes} · up to ${r.settings.reps} interleaved rounds${r.settings.coldReps !== undefined && r.settings.coldReps !== r.settings.reps ? `, ${r.settings.coldReps} for a cold case,` : ''} (at least 3; fewer past ${r.settings.caseBudgetSeconds} s a case) after ${r.settings.warmup} warm-up calls`,
    `PyTorch: ${r.torch}`,
    stream,
  ];
}

function mebibytes(bytes: number): string {
  return bytes >= 2 ** 20 ? `${fixed(bytes / 2 ** 20, 0)} MiB` : `${fixed(bytes / 2 ** 10, 0)} KiB`;
}

/** Which cases are timed from evicted caches, and how (one sentence). */
function cacheSentence(r: BenchReport): string {
  const c = r.settings.cache;
  if (!c) return 'Every case is timed warm, its calls back to back.';
  return (
    `Cases of more than ${mebibytes(c.coldAboveBytes)} (${c.coldAboveFromFlag ? 'set by --cold-above' : 'the L2'}; \`cold\` in the cache column) are timed one call at a time, ` +
    `each call after a sweep that reads ${mebibytes(c.sweepBytes)} (twice the ${mebibytes(c.lastLevelBytes)} last-level cache, ` +
    `one load per cache line) on ${c.sweepThreads} thread${c.sweepThreads > 1 ? 's' : ''}, outside the timed region, for every peer ` +
    `and the copy alike (PyTorch sweeps in its own process); smaller cases (\`warm\`) are timed with their calls back to back ` +
    `(cache sizes: ${c.source}).`
  );
}

/**
 * bf16 against f32 on the same shape and mode (issue 3 asks for at least 1.6×), with what
 * caps the ratio on this machine: f32's time over bf16's bytes at f32's rate (their byte
 * models' ratio), and f32's time over bf16's arithmetic alone (CaseResult.arithmeticMs).
 */
function dtypeLines(r: BenchReport): string[] {
  const lines: string[] = [];
  for (const c of r.cases) {
    if (!c.id.includes('/bf16/')) continue;
    const f32 = r.cases.find((other) => other.id === c.id.replace('/bf16/', '/f32/'));
    if (!f32) continue;
    const f32Ms = f32.peers[0].medianMs;
    const ratio = f32Ms / c.peers[0].medianMs;
    const caps = [`${fixed(f32.bytes / c.bytes, 2)}× by bytes`];
    if (c.arithmeticMs !== undefined) {
      caps.push(
        `${fixed(f32Ms / c.arithmeticMs, 2)}× by arithmetic (f32's ${ms(f32Ms)} ms over bf16's arithmetic alone, ` +
          `${ms(c.arithmeticMs)} ms: its in-cache rate on one thread, ${r.settings.threads} threads scaling perfectly)`,
      );
    }
    lines.push(`${c.id}: bf16 ${fixed(ratio, 2)}× faster than f32 (target 1.6×: ${ratio >= 1.6 ? 'met' : 'MISSED'}; at most ${caps.join(', ')})`);
  }
  return lines;
}

function overheadLines(r: BenchReport): string[] {
  const o = r.bindingOverhead;
  if (!o) return [];
  const c = o.cAbiUs;
  const cpu = (us: number | undefined, minUs: number | undefined) =>
    us === undefined && minUs === undefined
      ? ''
      : ` (${[...(us === undefined ? [] : [`CPU ${fixed(us, 2)} µs`]), ...(minUs === undefined ? [] : [`fastest ${fixed(minUs, 2)} µs`])].join(', ')})`;
  // The fastest sample's cost above the C call: above the C call's own fastest sample where
  // that was sampled in the same rounds, else above its median (tirl_stream gives no other).
  const cMin = o.cAbiFrom === 'same-process' ? o.minUs?.cAbi : undefined;
  const above = (minUs: number | undefined) =>
    minUs === undefined || c === undefined
      ? ''
      : cMin !== undefined
        ? `, fastest ${fixed(minUs - cMin, 2)} µs above the C call's fastest`
        : `, fastest ${fixed(minUs - c, 2)} µs above the C call's median`;
  const form = (name: keyof typeof OVERHEAD_TARGETS_US, us: number | undefined, cpuUs: number | undefined, minUs: number | undefined) => {
    if (us === undefined) return [];
    if (c === undefined) return [`${name} ${fixed(us, 2)} µs${cpu(cpuUs, minUs)}`];
    const target = OVERHEAD_TARGETS_US[name];
    return [`${name} ${fixed(us, 2)} µs${cpu(cpuUs, minUs)} = ${fixed(us - c, 2)} µs above (target < ${target} µs: ${us - c < target ? 'met' : 'MISSED'}${above(minUs)})`];
  };
  const m = o.minUs;
  const forms = [
    ...form('sync', o.syncUs, o.cpuUs?.sync, m?.sync),
    ...form('prepared', o.preparedUs, o.cpuUs?.prepared, m?.prepared),
    ...form('positional', o.positionalUs, o.cpuUs?.positional, m?.positional).map((text) => `prepared ${text}`),
    // An async call of at most 64 KiB of arrays, as this one, runs its kernel when made and
    // settles at the next microtask (bindings/common.h, kRunAtOnceBytes); larger ones take
    // the pool's round trip, the floors below.
    ...form('async', o.asyncUs, o.cpuUs?.async, m?.async).map((text) => `${text} (one call in flight, awaited one by one; run at once, as every async call of at most 64 KiB of arrays)`),
    // Issue 20 sets no target for Python.
    ...(o.pythonUs === undefined
      ? []
      : [`Python (tirl.ppo_loss) ${fixed(o.pythonUs, 2)} µs${cpu(o.cpuUs?.python, m?.python)}${c === undefined ? '' : ` = ${fixed(o.pythonUs - c, 2)} µs above`} (no target)`]),
  ];
  const floors = [
    ...(o.napiHopUs === undefined ? [] : [`Node-API's bare async work (poolRoundTrip, empty body) ${fixed(o.napiHopUs, 2)} µs${cpu(o.cpuUs?.napiHop, m?.napiHop)}`]),
    ...(o.poolHopUs === undefined ? [] : [`libuv's own pool round trip (crypto.pbkdf2, 1 iteration) ${fixed(o.poolHopUs, 2)} µs${cpu(o.cpuUs?.poolHop, m?.poolHop)}`]),
  ];
  const cSource =
    c === undefined
      ? ''
      : o.cAbiFrom === 'same-process'
        ? ` (the same C call on the same arrays, repeated in one native call, sampled in the same rounds as the forms${o.streamCAbiUs === undefined ? '' : `; tirl_stream's, another process: ${fixed(o.streamCAbiUs, 2)} µs`})`
        : ' (tirl_stream, another process)';
  return [
    `Binding overhead, ppoLoss on 1,024 tokens (median wall time a call; CPU time of all threads, and the fastest sample's wall time, in brackets): kernel through the C ABI ${c === undefined ? 'not measured' : `${fixed(c, 2)} µs${cpu(o.cpuUs?.cAbi, cMin)}`}${cSource}; ` +
      forms.join('; ') +
      (floors.length === 0 ? '' : `; what an async call of more than 64 KiB adds, its round trip through the pool, no kernel: ${floors.join(', ')}`),
  ];
}

/**
 * The `% copy` a case's arithmetic alone allows (the copy's median over CaseResult
 * .arithmeticMs), or '–' where it was not measured.
 */
function arithmeticCap(c: CaseResult): string {
  if (c.arithmeticMs === undefined) return '–';
  return percent(c.peers[c.peers.length - 1].medianMs / c.arithmeticMs);
}

/** One row per case: our time, bandwidth share, scaling and speed-ups. */
function summaryRows(r: BenchReport): string[][] {
  return r.cases.map((c) => {
    const ours = c.peers[0];
    const one = peerOf(c, 'tirl-1thread');
    const ts = peerOf(c, 'typescript');
    const torch = peerOf(c, 'torch');
    const alloc = peerOf(c, 'tirl-alloc');
    const cCall = peerOf(c, 'c-abi');
    const target = c.bandwidthTarget;
    return [
      c.id,
      c.cache,
      ms(ours.medianMs),
      fixed(ours.gbPerSecond, 1),
      percent(ours.copyShare),
      target === undefined ? '' : `${percent(target)} ${ours.copyShare >= target ? 'met' : 'MISSED'}`,
      cCall ? percent(cCall.copyShare) : '–',
      arithmeticCap(c),
      alloc ? ms(alloc.medianMs) : '–',
      c.threadsVsOne !== undefined ? `${fixed(c.threadsVsOne, 2)}×` : one ? `${fixed(one.medianMs / ours.medianMs, 2)}×` : '–',
      ts ? speedup(ts) : '–',
      torch ? speedup(torch) : '–',
    ];
  });
}

/** A case's cache state in words. */
function caseCache(c: CaseResult): string {
  const timing = c.cache === 'cold' ? 'timed cold (one call per sample, after a sweep of the caches)' : 'timed warm (calls back to back)';
  return c.arithmeticMs === undefined
    ? timing
    : `${timing}; its arithmetic alone ${ms(c.arithmeticMs)} ms (slices in the caches, one thread, scaled to the case and the threads)`;
}

const PEER_HEADER = ['peer', 'median ms', 'min–max ms', 'CPU ms', 'GB/s', '% copy', 'tirl faster'];
const PEER_RIGHT = [false, true, true, true, true, true, true];

/** One row per peer of a case. CPU ms: process CPU time per call, all threads. */
function peerRows(c: CaseResult): string[][] {
  return c.peers.map((p) => [
    p.name,
    ms(p.medianMs),
    `${ms(p.minMs)}–${ms(p.maxMs)}`,
    ms(p.cpuMs),
    fixed(p.gbPerSecond, 1),
    percent(p.copyShare),
    speedup(p),
  ]);
}

const SUMMARY_HEADER = ['case', 'cache', 'tirl ms', 'GB/s', '% copy', 'target', 'C call % copy', 'arithmetic cap', 'alloc ms', 'threads vs 1', 'vs TS', 'vs PyTorch'];
const SUMMARY_RIGHT = [false, false, true, true, true, true, true, true, true, true, true, true];

export function terminalReport(r: BenchReport): string {
  const out: string[] = [...machineLines(r), cacheSentence(r), ''];
  for (const c of r.cases) {
    out.push(`${c.title} — ${megabytes(c.bytes)} moved (${c.byteModel}); ${c.peers[0].samples} rounds, ${caseCache(c)}`);
    out.push(
      table(PEER_HEADER, peerRows(c), PEER_RIGHT)
        .split('\n')
        .map((l) => `  ${l}`)
        .join('\n'),
    );
    for (const s of c.skipped) out.push(`  ${s.peer}: skipped (${s.reason})`);
    if (c.mismatch) out.push(`  WARNING: the TypeScript peer disagrees with the kernel: ${c.mismatch}`);
    out.push('');
  }
  out.push('Summary (speed-ups: the peer\'s median / ours; "threads vs 1": the median over rounds of our 1-thread time / ours)');
  out.push(table(SUMMARY_HEADER, summaryRows(r), SUMMARY_RIGHT));
  out.push(...dtypeLines(r), ...overheadLines(r), ...caseThreadsLines(r), '');
  if (r.scaling && r.scaling.length > 0) {
    out.push(`Threads vs 1 (${r.settings.threads} threads; verdict: the median over rounds of 1-thread time / ${r.settings.threads}-thread time)`);
    out.push(table(SCALING_HEADER, scalingRows(r), SCALING_RIGHT), ...scalingSummary(r), '');
  }
  return out.join('\n');
}

function markdownTable(header: string[], rows: string[][], right: boolean[]): string {
  const escape = (s: string) => s.replace(/\|/g, '\\|');
  return [
    `| ${header.map(escape).join(' | ')} |`,
    `|${right.map((r) => (r ? '---:' : '---')).join('|')}|`,
    ...rows.map((row) => `| ${row.map(escape).join(' | ')} |`),
  ].join('\n');
}

export function markdownReport(r: BenchReport): string {
  const out: string[] = [`# tirl bench, CPU, ${r.date.slice(0, 10)}`, ''];
  out.push(...machineLines(r).map((l) => `- ${l}`), '');
  out.push('## Summary', '');
  out.push("Speed-ups are the peer's median time divided by ours (out buffers reused); `% copy` is the");
  out.push('time of a memory copy of the same number of bytes, measured in the same process and run,');
  out.push('divided by ours; `C call % copy` is that share for the same C call alone, timed natively (no binding: what');
  out.push('the C ABI reaches, and the difference what calling from JavaScript costs); `threads vs 1` is the median over rounds of our one-thread time divided by ours in the same round; `arithmetic cap` is the');
  out.push('`% copy` our kernel would reach if its bytes cost nothing: the copy\'s time over the case\'s arithmetic');
  out.push('alone (slices of it in the caches, one thread, scaled to the case and the threads; benchmarks/README.md).', cacheSentence(r), '');
  out.push(markdownTable(SUMMARY_HEADER, summaryRows(r), SUMMARY_RIGHT), '');
  const notes = [...dtypeLines(r), ...overheadLines(r), ...caseThreadsLines(r), ...scalingSummary(r)];
  out.push(...notes.map((l) => `- ${l}`));
  if (notes.length > 0) out.push('');
  if (r.scaling && r.scaling.length > 0) {
    out.push(`## ${r.settings.threads} threads vs 1`, '');
    out.push(`Our kernel alone, ${r.settings.threads} threads against 1, at a small, a medium and a large size of every op,`);
    out.push('in interleaved rounds. `median paired`, the verdict, is the median over rounds of the two times\' ratio');
    out.push('within a round (the two sides run back to back, so load on the shared machine hits both or');
    out.push("neither); `best vs best` is the best 1-thread time over the best threads time (each side's one");
    out.push('least disturbed sample). Below 1× a call would lose time by parallelising. Sizes below an op\'s');
    out.push('minimum work per thread run on one thread either way, so their ratio shows the noise of the machine.', '');
    out.push(markdownTable(SCALING_HEADER, scalingRows(r), SCALING_RIGHT), '');
  }
  out.push('## Cases', '');
  for (const c of r.cases) {
    out.push(`### ${c.title}`, '', `${megabytes(c.bytes)} moved: ${c.byteModel}. ${c.peers[0].samples} rounds, ${caseCache(c)}.`, '');
    out.push(markdownTable(PEER_HEADER, peerRows(c), PEER_RIGHT));
    for (const s of c.skipped) out.push('', `${s.peer}: skipped (${s.reason}).`);
    if (c.mismatch) out.push('', `**Warning**: the TypeScript peer disagrees with the kernel: ${c.mismatch}.`);
    out.push('');
  }
  return out.join('\n') + '\n';
}

function xml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/**
 * Two panels, one row per case: speed-up over the TypeScript and PyTorch peers (log scale),
 * and our share of the same-bytes copy bandwidth (linear, with the 60% and 70% targets).
 */
export function svgChart(r: BenchReport): string {
  const rowHeight = 26;
  const top = 76;
  const labelWidth = 300;
  const panelWidth = 330;
  const gap = 50;
  const width = labelWidth + 2 * panelWidth + gap + 30;
  const height = top + rowHeight * Math.max(1, r.cases.length) + 50;
  const left1 = labelWidth;
  const left2 = labelWidth + panelWidth + gap;
  const speedups = r.cases.flatMap((c) =>
    c.peers.filter((p) => p.kind === 'typescript' || p.kind === 'torch').map((p) => p.tirlSpeedup),
  );
  const finite = speedups.filter((x) => Number.isFinite(x) && x > 0);
  const highDecade = Math.ceil(Math.log10(Math.max(10, ...finite)));
  const lowDecade = Math.min(0, Math.floor(Math.log10(Math.min(1, ...finite))));
  const logX = (x: number) => {
    const clamped = Math.min(Math.max(x, 10 ** lowDecade), 10 ** highDecade);
    return left1 + ((Math.log10(clamped) - lowDecade) / (highDecade - lowDecade)) * panelWidth;
  };
  const maxShare = Math.max(1, ...r.cases.map((c) => c.peers[0].copyShare));
  const shareX = (s: number) => left2 + (Math.min(s, maxShare) / maxShare) * panelWidth;
  const parts: string[] = [];
  const text = (x: number, y: number, s: string, extra = '') =>
    parts.push(`<text x="${x.toFixed(1)}" y="${y.toFixed(1)}"${extra}>${xml(s)}</text>`);
  text(10, 22, `tirl bench · ${r.date.slice(0, 10)} · ${r.machine.cpu}, ${r.settings.threads} threads`, ' font-weight="bold"');
  text(left1, 42, 'speed-up of tirl (log scale)');
  text(left1, 58, 'blue: vs TypeScript · orange: vs PyTorch', ' font-size="11"');
  text(left2, 42, 'share of the same-bytes copy bandwidth');
  text(left2, 58, 'dashed: targets 60% and 70%', ' font-size="11"');
  const bottom = top + rowHeight * r.cases.length;
  for (let d = lowDecade; d <= highDecade; d++) {
    const x = logX(10 ** d);
    parts.push(`<line x1="${x.toFixed(1)}" y1="${top - 6}" x2="${x.toFixed(1)}" y2="${bottom}" stroke="#ddd"/>`);
    text(x - 8, bottom + 16, `${d < 0 ? (10 ** d).toFixed(-d) : 10 ** d}×`, ' font-size="11"');
  }
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    const x = shareX(t * maxShare);
    parts.push(`<line x1="${x.toFixed(1)}" y1="${top - 6}" x2="${x.toFixed(1)}" y2="${bottom}" stroke="#ddd"/>`);
    text(x - 10, bottom + 16, `${Math.round(t * maxShare * 100)}%`, ' font-size="11"');
  }
  for (const target of [0.6, 0.7]) {
    if (target > maxShare) continue;
    const x = shareX(target);
    parts.push(`<line x1="${x.toFixed(1)}" y1="${top - 6}" x2="${x.toFixed(1)}" y2="${bottom}" stroke="#c33" stroke-dasharray="4 3"/>`);
  }
  r.cases.forEach((c, i) => {
    const y = top + i * rowHeight;
    text(10, y + 15, c.id, ' font-size="12"');
    const ts = peerOf(c, 'typescript');
    const torch = peerOf(c, 'torch');
    const bars: [PeerResult | undefined, string, number][] = [
      [ts, '#4a7fc1', 2],
      [torch, '#e8883a', 12],
    ];
    for (const [peer, colour, dy] of bars) {
      if (!peer) continue;
      const x = logX(peer.tirlSpeedup);
      const one = logX(1); // bars grow from 1×: left of it the peer is faster
      parts.push(`<rect x="${Math.min(x, one).toFixed(1)}" y="${y + dy}" width="${Math.max(1, Math.abs(x - one)).toFixed(1)}" height="9" fill="${colour}"/>`);
      const label = `${peer.tirlSpeedup >= 10 ? peer.tirlSpeedup.toFixed(0) : peer.tirlSpeedup.toFixed(1)}×`;
      text(x < one ? x - 30 : x + 4, y + dy + 8.5, label, ' font-size="10"');
    }
    if (c.callOverhead) {
      text(left2, y + 15, 'the fixed cost of a call: see the table', ' font-size="11" fill="#777"');
      return;
    }
    const share = c.peers[0].copyShare;
    const colour = share >= 0.6 ? '#3a9a5b' : '#b8b8b8';
    parts.push(`<rect x="${left2}" y="${y + 4}" width="${Math.max(1, shareX(share) - left2).toFixed(1)}" height="14" fill="${colour}"/>`);
    text(shareX(share) + 4, y + 15, percent(share), ' font-size="11"');
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}
