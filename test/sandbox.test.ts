import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { JavaScriptSandbox, PythonSandbox, SandboxUnavailableError, type CodeSandbox } from '../lib/tools/sandbox.js';
import {
  alive, assertWellFormed, descendants, FRESH_STATE, HOSTILE_PROGRAMS, HostileHost, hostileContext, hostileSandbox, ownSandboxCgroups,
  type HostileProgram,
} from './sandbox_hostile.js';

/** Checks that the sandbox still answers and kept no process beyond its workers' own. */
async function assertHealthy(sandbox: CodeSandbox, baseline: number, code: string, expected: string): Promise<void> {
  const response = await sandbox.run(code);
  assert.equal(response.status, 'success', JSON.stringify(response));
  assert.equal(response.result, expected);
  assert.ok(descendants(sandbox.workerPids()).length <= baseline, 'processes were left behind');
}

/** A sandbox of one worker for the hostile programs, and its process count when idle. */
interface HostilePool {
  sandbox: CodeSandbox;
  baseline: number;
}

async function hostilePool(language: 'python' | 'javascript', quick: boolean): Promise<HostilePool> {
  const sandbox = hostileSandbox(language, quick, 1);
  await sandbox.warmUp();
  return { sandbox, baseline: descendants(sandbox.workerPids()).length };
}

/**
 * Runs one program of the hostile table and checks, besides the program's own check, that
 * it ended at its timeout (not at the host's backstop), left its worker alive and no
 * process behind, left the next run a fresh sandbox, and reached nothing on the host.
 */
async function runHostileProgram(
  program: HostileProgram, pools: { normal: HostilePool; quick: HostilePool }, host: HostileHost, testContext: TestContext,
): Promise<void> {
  const quick = program.timesOut === true;
  const { sandbox, baseline } = quick ? pools.quick : pools.normal;
  const context = hostileContext(sandbox, quick, host);
  if (program.needsRunMemoryLimit === true && !context.runMemoryLimited) {
    testContext.skip('no memory cgroup can be made here (needs root and a writable memory hierarchy)');
    return;
  }
  const workers = sandbox.workerPids();
  const started = performance.now();
  const response = await sandbox.run(program[sandbox.language]!(context));
  const elapsed = performance.now() - started;
  assertWellFormed(response, sandbox.language);
  program.check(response, context);
  if (quick) assert.ok(elapsed < context.limits.timeoutMs + 3500, `took ${elapsed} ms`);
  assert.deepEqual(sandbox.workerPids(), workers, 'the worker was replaced');
  assert.ok(descendants(workers).length <= baseline, 'processes were left behind');
  const fresh = await sandbox.run(FRESH_STATE[sandbox.language]!(context));
  FRESH_STATE.check(fresh, context);
  host.assertNoEscape();
}

describe('PythonSandbox', () => {
  // Generous time for ordinary and memory-hungry programs on a loaded machine (runs are
  // niced); a short one for the programs that are meant to time out.
  let host: HostileHost;
  let pools: { normal: HostilePool; quick: HostilePool };
  let sandbox: CodeSandbox;
  let quick: CodeSandbox;
  const healthy = (): Promise<void> => assertHealthy(sandbox, pools.normal.baseline, 'print("ok")', 'ok\n');
  const quickHealthy = (): Promise<void> => assertHealthy(quick, pools.quick.baseline, 'print("ok")', 'ok\n');

  before(async () => {
    host = await HostileHost.start();
    const [normal, quickPool] = await Promise.all([hostilePool('python', false), hostilePool('python', true)]);
    pools = { normal: normal!, quick: quickPool! };
    sandbox = pools.normal.sandbox;
    quick = pools.quick.sandbox;
  });

  after(async () => {
    // After a failed `before` (no bubblewrap) some are unset: close what was made, and the
    // host whatever happened, so that the file ends.
    try {
      await Promise.all([pools?.normal.sandbox.close(), pools?.quick.sandbox.close()]);
    } finally {
      await host?.close();
    }
  });

  for (const program of HOSTILE_PROGRAMS) {
    if (program.python !== undefined) test(program.name, (context) => runHostileProgram(program, pools, host, context));
  }

  test('returns what the program printed', async () => {
    const response = await sandbox.run('for i in range(3):\n    print("line", i)');
    assert.equal(response.status, 'success');
    assert.equal(response.tool, 'python');
    assert.equal(response.result, 'line 0\nline 1\nline 2\n');
    assert.equal(response.error, undefined);
    assert.equal(response.exitCode, 0);
  });

  test('an exception is an error carrying the traceback and the output so far', async () => {
    const response = await sandbox.run('print("before")\nx = {}\nx["missing"]');
    assert.equal(response.status, 'error');
    assert.equal(response.result, 'before\n');
    assert.match(response.error!, /Traceback \(most recent call last\):\n {2}File "<code>", line 3, in <module>\n {4}x\["missing"\]/);
    assert.match(response.error!, /KeyError: 'missing'/);
    assert.doesNotMatch(response.error!, /run_python|child_main/);
    assert.equal(response.exitCode, 1);
  });

  test('a syntax error is an error', async () => {
    const response = await sandbox.run('def f(:\n  pass');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /SyntaxError/);
  });

  test('sys.exit codes and messages are kept', async () => {
    const code3 = await sandbox.run('import sys\nsys.exit(3)');
    assert.equal(code3.status, 'error');
    assert.equal(code3.exitCode, 3);
    assert.equal(code3.error, 'The program exited with code 3');
    const message = await sandbox.run('raise SystemExit("bad input")');
    assert.equal(message.exitCode, 1);
    assert.equal(message.error, 'bad input\n');
    const clean = await sandbox.run('import sys\nprint("done")\nsys.exit(0)');
    assert.equal(clean.status, 'success');
    assert.equal(clean.result, 'done\n');
  });

  test('stderr of a successful program is reported beside its output', async () => {
    const response = await sandbox.run('import sys\nprint("out")\nprint("careful", file=sys.stderr)');
    assert.equal(response.status, 'success');
    assert.equal(response.result, 'out\n');
    assert.equal(response.error, 'careful\n');
  });

  test('has no stdin: input() sees end of file', async () => {
    const response = await sandbox.run('input()');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /EOFError/);
  });

  test('threads and atexit hooks finish before the run ends', async () => {
    const response = await sandbox.run(
      'import atexit, threading, time\natexit.register(lambda: print("atexit"))\n' +
      'threading.Thread(target=lambda: (time.sleep(0.05), print("thread"))).start()',
    );
    assert.equal(response.status, 'success');
    assert.equal(response.result, 'thread\natexit\n');
  });

  test('modules the program writes in its directory are importable', async () => {
    const response = await sandbox.run('open("helper.py", "w").write("ANSWER = 42\\n")\nimport helper\nprint(helper.ANSWER)');
    assert.equal(response.result, '42\n');
  });

  test('runs do not share state: globals, files and processes are fresh', async () => {
    const pidsBefore = sandbox.workerPids();
    const first = await sandbox.run('import builtins, os\nbuiltins.leak = 1\nopen("note.txt", "w").write("x")\n' +
      'os.makedirs("locked/inner")\nos.chmod("locked/inner", 0)\nos.chmod("locked", 0)\nos.chmod("/tmp", 0)');
    const response = await sandbox.run('import os\nprint(hasattr(__builtins__, "leak"), os.listdir("."), os.getcwd())');
    assert.equal(first.status, 'success');
    assert.equal(response.result, "False [] /tmp\n");
    assert.deepEqual(sandbox.workerPids(), pidsBefore, 'the worker was replaced');
  });

  const notX64 = process.arch !== 'x64' && 'the system-call numbers here are x86-64\'s';
  test('system calls on the seccomp deny-list are refused', { skip: notX64 }, async () => {
    const syscall = (number: number): string =>
      `import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.syscall(${number}, 0, 0, 0, 0), ctypes.get_errno())`;
    // x86-64 numbers: ptrace (EPERM), bpf (EPERM), io_uring_setup (ENOSYS), x32 getpid (ENOSYS).
    const expectations: Array<[number, string]> = [[101, '-1 1\n'], [321, '-1 1\n'], [425, '-1 38\n'], [0x40000000 + 39, '-1 38\n']];
    for (const [number, expected] of expectations) {
      const response = await sandbox.run(syscall(number));
      assert.equal(response.result, expected, `system call ${number}`);
    }
    const ordinary = await sandbox.run('import subprocess, threading\nthreading.Thread(target=print, args=("thread",)).start()\n' +
      'print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout, end="")');
    assert.equal(ordinary.result, 'thread\nchild\n');
  });

  test('a worker killed from outside is replaced', async () => {
    const [pid] = sandbox.workerPids();
    const running = sandbox.run('import time\ntime.sleep(5)');
    await new Promise((done) => setTimeout(done, 200));
    process.kill(pid!, 'SIGKILL');
    const response = await running;
    assert.equal(response.status, 'error');
    assert.match(response.error!, /worker ended during the run/);
    await healthy();
    assert.notDeepEqual(sandbox.workerPids(), [pid]);
  });

  test('a supervisor that stops answering is replaced after the host\'s backstop', async () => {
    const [pid] = quick.workerPids();
    const [supervisor] = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').map(Number);
    process.kill(supervisor!, 'SIGSTOP');
    const started = performance.now();
    const response = await quick.run('print("never answered")');
    assert.equal(response.status, 'timeout');
    assert.equal(response.error, 'Timed out after 1000 ms; the sandbox worker was stopped');
    assert.ok(performance.now() - started >= 5900, 'the backstop is timeoutMs + 5 s');
    await quickHealthy();
    assert.notDeepEqual(quick.workerPids(), [pid]);
  });

  test('oversized programs and bad arguments are refused', async () => {
    const huge = await sandbox.run(`# ${'x'.repeat(1 << 20)}`);
    assert.equal(huge.status, 'error');
    assert.match(huge.error!, /at most 1048576 bytes/);
    assert.throws(() => sandbox.run(42 as unknown as string), {
      name: 'TypeError', message: 'Expected a string for code but received 42 of type number',
    });
    assert.throws(() => new PythonSandbox({ timeoutMs: 0 }), { name: 'RangeError', message: /options\.timeoutMs/ });
    assert.throws(() => new PythonSandbox({ memoryMb: 1.5 }), { name: 'RangeError', message: /options\.memoryMb/ });
    assert.throws(() => new PythonSandbox({ concurrency: '2' as unknown as number }), { name: 'TypeError', message: /options\.concurrency/ });
    assert.throws(() => new PythonSandbox({ readOnlyPaths: ['relative'] }), { name: 'TypeError', message: /readOnlyPaths\[0\]/ });
  });

  test('readOnlyPaths are readable and not writable; unreadable ones are a clear error', async () => {
    // Not under /tmp: the sandbox has its own /tmp, and refuses binds there.
    const shared = mkdtempSync('/var/tmp/tirl-sandbox-ro-');
    chmodSync(shared, 0o755);
    writeFileSync(join(shared, 'data.txt'), 'shared data');
    chmodSync(join(shared, 'data.txt'), 0o644);
    const reader = new PythonSandbox({ concurrency: 1, readOnlyPaths: [shared] });
    try {
      const read = await reader.run(`print(open(${JSON.stringify(join(shared, 'data.txt'))}).read())`);
      assert.equal(read.result, 'shared data\n');
      const written = await reader.run(`open(${JSON.stringify(join(shared, 'new.txt'))}, "w")`);
      assert.match(written.error!, /Read-only file system/);
    } finally {
      await reader.close();
      rmSync(shared, { recursive: true, force: true });
    }
    assert.throws(() => new PythonSandbox({ readOnlyPaths: ['/tmp/data'] }), { name: 'RangeError', message: /readOnlyPaths\[0\]/ });
    const missing = new PythonSandbox({ concurrency: 1, readOnlyPaths: ['/nonexistent/tirl'] });
    try {
      await assert.rejects(missing.run('print(1)'), (error: unknown) =>
        error instanceof SandboxUnavailableError && /did not start .*Can't find source path \/nonexistent\/tirl/.test(error.message));
    } finally {
      await missing.close();
    }
  });

  test('a missing bubblewrap or interpreter is a clear error, not a hang', () => {
    assert.throws(() => new PythonSandbox({ bwrapPath: '/nonexistent/bwrap' }), (error: unknown) =>
      error instanceof SandboxUnavailableError && /bubblewrap \(bwrap\) not found .*apt-get install bubblewrap/.test(error.message));
    assert.throws(() => new PythonSandbox({ pythonPath: '/nonexistent/python3' }), SandboxUnavailableError);
  });

  test('a warm call takes milliseconds', async (context) => {
    const timings: number[] = [];
    for (let index = 0; index < 25; index += 1) {
      const started = performance.now();
      const response = await sandbox.run('print(6 * 7)');
      timings.push(performance.now() - started);
      assert.equal(response.result, '42\n');
    }
    timings.sort((a, b) => a - b);
    const median = timings[Math.floor(timings.length / 2)]!;
    context.diagnostic(`warm Python call: median ${median.toFixed(1)} ms, min ${timings[0]!.toFixed(1)} ms`);
    assert.ok(median < 250, `median ${median} ms`);
  });
});

describe('PythonSandbox pool', () => {
  test('preloads modules once per worker, and reports a module that fails to load', async () => {
    const sandbox = new PythonSandbox({ concurrency: 1, preloadModules: ['decimal', 'fractions'] });
    try {
      const response = await sandbox.run('import sys\nprint("fractions" in sys.modules)');
      assert.equal(response.result, 'True\n');
    } finally {
      await sandbox.close();
    }
    const broken = new PythonSandbox({ concurrency: 1, preloadModules: ['no_such_module_here'] });
    try {
      await assert.rejects(broken.run('print(1)'), (error: unknown) =>
        error instanceof SandboxUnavailableError && /did not start .*No module named 'no_such_module_here'/s.test(error.message));
    } finally {
      await broken.close();
    }
  });

  test('a real-time signal is named', async () => {
    const sandbox = new PythonSandbox({ concurrency: 1 });
    try {
      const response = await sandbox.run('import os, signal\nos.kill(os.getpid(), signal.SIGRTMIN + 1)');
      assert.equal(response.status, 'error');
      assert.equal(response.signal, 'SIG35');
    } finally {
      await sandbox.close();
    }
  });

  test('runs at most `concurrency` programs at once and queues the rest', async () => {
    const sandbox = new PythonSandbox({ concurrency: 2, timeoutMs: 5000 });
    try {
      const code = 'import time\nstart = time.time()\ntime.sleep(0.3)\nprint(start, time.time())';
      const runs = Array.from({ length: 5 }, () => sandbox.run(code));
      assert.equal(sandbox.queued, 3);
      const spans = (await Promise.all(runs)).map((response) => response.result!.trim().split(' ').map(Number) as [number, number]);
      for (const [start] of spans) {
        const overlapping = spans.filter(([otherStart, otherEnd]) => otherStart <= start && start < otherEnd).length;
        assert.ok(overlapping <= 2, `${overlapping} runs at once`);
      }
      assert.equal(sandbox.workerPids().length, 2);
    } finally {
      await sandbox.close();
    }
  });

  test('close() during a worker\'s start leaves nothing behind', async () => {
    const sandbox = new PythonSandbox({ concurrency: 2 });
    const first = assert.rejects(sandbox.run('print(1)'), /closed/);
    const second = assert.rejects(sandbox.run('print(2)'), /closed/);
    await sandbox.close();
    await first;
    await second;
    assert.deepEqual(sandbox.workerPids(), []);
    assert.deepEqual(descendants([process.pid]).filter((pid) => pid !== process.pid), []);
  });

  test('close() ends every process, rejects queued calls and further calls', async () => {
    const sandbox = new PythonSandbox({ concurrency: 1, timeoutMs: 5000 });
    await sandbox.warmUp();
    const running = sandbox.run('import subprocess, time\nsubprocess.Popen(["sleep", "60"])\ntime.sleep(5)');
    const runningRejects = assert.rejects(running, /closed while the call ran/);
    const waitingRejects = assert.rejects(sandbox.run('print("never")'), /closed before the call ran/);
    await new Promise((done) => setTimeout(done, 300));
    const processes = descendants(sandbox.workerPids());
    assert.ok(processes.length >= 3, `expected bwrap, supervisor, program, sleep: ${processes}`);
    await sandbox.close();
    await runningRejects;
    await waitingRejects;
    await assert.rejects(sandbox.run('print(1)'), /closed/);
    assert.deepEqual(processes.filter(alive), []);
    assert.deepEqual(sandbox.workerPids(), []);
    assert.deepEqual(ownSandboxCgroups(), [], 'the workers\' cgroups are removed before close() resolves');
  });
});

describe('JavaScriptSandbox', () => {
  let host: HostileHost;
  let pools: { normal: HostilePool; quick: HostilePool };
  let sandbox: CodeSandbox;

  before(async () => {
    host = await HostileHost.start();
    const [normal, quick] = await Promise.all([hostilePool('javascript', false), hostilePool('javascript', true)]);
    pools = { normal: normal!, quick: quick! };
    sandbox = pools.normal.sandbox;
  });

  after(async () => {
    // As PythonSandbox's: the file ends after a failed `before` too.
    try {
      await Promise.all([pools?.normal.sandbox.close(), pools?.quick.sandbox.close()]);
    } finally {
      await host?.close();
    }
  });

  for (const program of HOSTILE_PROGRAMS) {
    if (program.javascript !== undefined) test(program.name, (context) => runHostileProgram(program, pools, host, context));
  }

  test('returns what the program printed', async () => {
    const response = await sandbox.run('const xs = [1, 2, 3];\nconsole.log(xs.map((x) => x * 2).join(","));');
    assert.equal(response.status, 'success');
    assert.equal(response.tool, 'javascript');
    assert.equal(response.result, '2,4,6\n');
  });

  test('runs ES modules with top-level await when asked', async () => {
    const modules = new JavaScriptSandbox({ concurrency: 1, moduleType: 'module' });
    try {
      const response = await modules.run('import { setTimeout } from "node:timers/promises";\nconsole.log(await setTimeout(10, "awaited"));');
      assert.equal(response.result, 'awaited\n');
    } finally {
      await modules.close();
    }
    assert.throws(() => new JavaScriptSandbox({ moduleType: 'esm' as never }), { name: 'TypeError', message: /options\.moduleType/ });
  });

  test('an uncaught exception is an error with its stack', async () => {
    const response = await sandbox.run('console.log("before");\nthrow new RangeError("nope");');
    assert.equal(response.status, 'error');
    assert.equal(response.result, 'before\n');
    assert.match(response.error!, /RangeError: nope/);
    assert.equal(response.exitCode, 1);
  });

  test('a warm call takes one Node.js start', async (context) => {
    const timings: number[] = [];
    for (let index = 0; index < 7; index += 1) {
      const started = performance.now();
      await sandbox.run('console.log(1)');
      timings.push(performance.now() - started);
    }
    timings.sort((a, b) => a - b);
    context.diagnostic(`warm JavaScript call: median ${timings[3]!.toFixed(1)} ms`);
  });
});
