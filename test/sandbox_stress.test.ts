/**
 * The hostile-program table (test/sandbox_hostile.ts) run many times at once: Python and
 * JavaScript, each with a pool for ordinary programs and one with a short timeout for the
 * programs meant to time out, all busy together. Every response must be well-formed and
 * contained; afterwards nothing may be left: no process (of this process's tree, in a
 * sandbox's PID namespace or in a sandbox's cgroup), no cgroup, no temporary file, no open
 * descriptor; the host's canaries are untouched and the heap has not grown with the runs.
 *
 * TIRL_SANDBOX_STRESS_REPEAT sets how many times the table runs (default 100).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { OWN_CGROUP_PREFIX } from '../lib/tools/cgroup.js';
import type { CodeSandbox } from '../lib/tools/sandbox.js';
import { Random } from './support.js';
import {
  assertWellFormed, descendants, HOSTILE_PROGRAMS, ownSandboxCgroups, HostileHost, hostileContext, hostileSandbox, pidNamespaceOf,
  type HostileContext, type HostileProgram,
} from './sandbox_hostile.js';

const REPEAT = Number(process.env.TIRL_SANDBOX_STRESS_REPEAT ?? 100);
/** Workers per pool for ordinary programs and for those meant to time out (which mostly
 * wait: four of them let a repetition's timeouts run side by side). */
const CONCURRENCY = { normal: 3, quick: 4 };
/** Most heap growth allowed over the whole run (after garbage collection), in bytes. */
const HEAP_GROWTH_LIMIT = 16 << 20;

setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

function openDescriptors(): number {
  return readdirSync('/proc/self/fd').length;
}

/** Host pids of processes in any of `namespaces`, or in one of this process's cgroups. */
function sandboxedProcesses(namespaces: Set<string>): string[] {
  const found: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const namespace = pidNamespaceOf(Number(entry));
    try {
      const cgroups = readFileSync(`/proc/${entry}/cgroup`, 'utf8');
      if ((namespace !== undefined && namespaces.has(namespace)) || cgroups.includes(`/${OWN_CGROUP_PREFIX}`)) {
        found.push(`${entry} (${readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ').trim()})`);
      }
    } catch {
      // exited while we looked
    }
  }
  return found;
}

interface Pool {
  sandbox: CodeSandbox;
  quick: boolean;
  context?: HostileContext;
}

interface Job {
  program: HostileProgram;
  pool: Pool;
  repetition: number;
}

/** What the host saw while the table ran. */
interface Observations {
  /** PID namespaces of the sandboxes' processes. */
  namespaces: Set<string>;
  /** After each repetition: heap after garbage collection, resident size, open descriptors. */
  heapBytes: number[];
  residentBytes: number[];
  descriptors: number[];
}

/** Every program of the table, in each language and in a seeded order, `REPEAT` times. */
function tableJobs(pools: Pool[]): Job[] {
  const random = new Random(9);
  const jobs: Job[] = [];
  for (let repetition = 0; repetition < REPEAT; repetition += 1) {
    for (const program of random.shuffled(HOSTILE_PROGRAMS)) {
      for (const pool of pools) {
        if (program[pool.sandbox.language] === undefined || Boolean(program.timesOut) !== pool.quick) continue;
        if (program.needsRunMemoryLimit === true && !pool.context!.runMemoryLimited) continue;
        jobs.push({ program, pool, repetition });
      }
    }
  }
  return jobs;
}

/** Runs `jobs` with every pool's queue fed, checking each response; returns the failures. */
async function runJobs(jobs: Job[], pools: Pool[], observations: Observations, context: TestContext): Promise<string[]> {
  const failures: string[] = [];
  const outcomes = new Map<string, number>();
  const ownNamespace = pidNamespaceOf(process.pid);
  const observe = (): void => {
    for (const pid of descendants(pools.flatMap((pool) => pool.sandbox.workerPids()))) {
      const namespace = pidNamespaceOf(pid);
      if (namespace !== undefined && namespace !== ownNamespace) observations.namespaces.add(namespace);
    }
    collectGarbage();
    observations.heapBytes.push(process.memoryUsage().heapUsed);
    observations.residentBytes.push(process.memoryUsage().rss);
    observations.descriptors.push(openDescriptors());
  };
  const jobsPerRepetition = jobs.length / REPEAT;
  let next = 0;
  let completed = 0;
  const runJob = async ({ program, pool, repetition }: Job): Promise<void> => {
    const language = pool.sandbox.language;
    const response = await pool.sandbox.run(program[language]!(pool.context!));
    const outcome = `${language} | ${program.name} | ${response.status}${response.outOfMemory === true ? ' (out of memory)' : ''}`;
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    try {
      assertWellFormed(response, language);
      program.check(response, pool.context!);
    } catch (error) {
      failures.push(`repetition ${repetition}, ${language}: ${program.name}: ${(error as Error).message}`);
    }
    completed += 1;
    if (completed % jobsPerRepetition === 0) observe();
  };
  // Two programs waiting per worker keep every pool busy without queueing the whole run.
  const lanes = Array.from({ length: 3 * 2 * (CONCURRENCY.normal + CONCURRENCY.quick) }, async () => {
    while (next < jobs.length) await runJob(jobs[next++]!);
  });
  await Promise.all(lanes);
  for (const [outcome, count] of [...outcomes].sort()) context.diagnostic(`${count} × ${outcome}`);
  return failures;
}

describe('sandbox stress', () => {
  test(`the hostile programs, ${REPEAT} times over, ${2 * (CONCURRENCY.normal + CONCURRENCY.quick)} runs at once: contained, and nothing left`, async (context) => {
    assert.ok(Number.isInteger(REPEAT) && REPEAT > 0, 'TIRL_SANDBOX_STRESS_REPEAT must be a positive integer');
    // A private temporary directory: on a shared machine other processes write to the
    // system's, and whatever this process leaves must show up here.
    const privateTmp = mkdtempSync(join(tmpdir(), 'tirl-sandbox-stress-'));
    const systemTmp = process.env.TMPDIR;
    process.env.TMPDIR = privateTmp;
    const host = await HostileHost.start();
    try {
      // libuv opens its child-watching descriptors with the first child process.
      await promisify(execFile)('true');
      const descriptorsBefore = openDescriptors();
      assert.deepEqual(ownSandboxCgroups(), []);

      const pools: Pool[] = [];
      for (const language of ['python', 'javascript'] as const) {
        for (const quick of [false, true]) {
          pools.push({ sandbox: hostileSandbox(language, quick, quick ? CONCURRENCY.quick : CONCURRENCY.normal), quick });
        }
      }
      const observations: Observations = { namespaces: new Set(), heapBytes: [], residentBytes: [], descriptors: [] };
      let failures: string[];
      try {
        await Promise.all(pools.map((pool) => pool.sandbox.warmUp()));
        for (const pool of pools) pool.context = hostileContext(pool.sandbox, pool.quick, host);
        const cgroupsWhileRunning = ownSandboxCgroups().length;
        const jobs = tableJobs(pools);
        const started = performance.now();
        failures = await runJobs(jobs, pools, observations, context);
        const seconds = (performance.now() - started) / 1000;
        const { heapBytes, residentBytes, descriptors } = observations;
        const mebibytes = (bytes: number): string => `${(bytes / 1048576).toFixed(1)} MiB`;
        context.diagnostic(`${jobs.length} runs (${jobs.length / REPEAT} per repetition) in ${seconds.toFixed(1)} s; ` +
          `memory cgroups: ${cgroupsWhileRunning > 0 ? 'yes' : 'no'}; PID namespaces: ${observations.namespaces.size}`);
        context.diagnostic(`after the first and the last repetition: heap ${mebibytes(heapBytes[0]!)} -> ` +
          `${mebibytes(heapBytes.at(-1)!)}, resident ${mebibytes(residentBytes[0]!)} -> ${mebibytes(residentBytes.at(-1)!)}, ` +
          `descriptors ${descriptors[0]} -> ${descriptors.at(-1)} (max ${Math.max(...descriptors)}; ${descriptorsBefore} before)`);
      } finally {
        await Promise.all(pools.map((pool) => pool.sandbox.close()));
      }

      assert.deepEqual(failures.slice(0, 20), [], `${failures.length} runs were not contained`);
      host.assertNoEscape();
      assert.deepEqual(descendants([process.pid]).filter((pid) => pid !== process.pid), [], 'child processes were left');
      assert.deepEqual(sandboxedProcesses(observations.namespaces), [], 'sandboxed processes were left');
      assert.deepEqual(ownSandboxCgroups(), [], 'cgroups were left');
      assert.equal(openDescriptors(), descriptorsBefore, 'file descriptors were leaked');
      assert.deepEqual(readdirSync(privateTmp), [], 'temporary files were left');
      // A worker holds three pipes; one being replaced may briefly hold its successor's too.
      assert.ok(Math.max(...observations.descriptors) <= observations.descriptors[0]! + 3 * pools.length,
        `descriptors grew while running: ${observations.descriptors.join(' ')}`);
      const heapGrowth = observations.heapBytes.at(-1)! - observations.heapBytes[0]!;
      assert.ok(heapGrowth < HEAP_GROWTH_LIMIT, `the heap grew by ${heapGrowth} bytes`);
    } finally {
      await host.close();
      rmSync(privateTmp, { recursive: true, force: true });
      if (systemTmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = systemTmp;
    }
  });
});
