import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { JavaScriptSandbox, PythonSandbox, SandboxUnavailableError, type CodeSandbox } from '../lib/tools/sandbox.js';

const PROJECT_FILE = resolve('package.json');

/** Host pids of every process descending from `roots` (the roots included). */
function descendants(roots: number[]): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = children.get(parent) ?? [];
    list.push(Number(entry));
    children.set(parent, list);
  }
  const found: number[] = [];
  const stack = [...roots];
  while (stack.length > 0) {
    const pid = stack.pop()!;
    found.push(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  return found;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A loopback TCP server that counts the connections it gets. */
async function countingServer(): Promise<{ server: Server; port: number; connections: () => number }> {
  let count = 0;
  const server = createServer((socket) => {
    count += 1;
    socket.destroy();
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const address = server.address();
  assert.ok(address !== null && typeof address === 'object');
  return { server, port: address.port, connections: () => count };
}

/** Checks that the sandbox still answers and kept no process beyond its workers' own. */
async function assertHealthy(sandbox: CodeSandbox, baseline: number, code: string, expected: string): Promise<void> {
  const response = await sandbox.run(code);
  assert.equal(response.status, 'success', JSON.stringify(response));
  assert.equal(response.result, expected);
  assert.ok(descendants(sandbox.workerPids()).length <= baseline, 'processes were left behind');
}

describe('PythonSandbox', () => {
  // Generous time for ordinary and memory-hungry programs on a loaded machine (runs are
  // niced); a short one for the programs that are meant to time out.
  let sandbox: PythonSandbox;
  let quick: PythonSandbox;
  let baseline = 0;
  let quickBaseline = 0;
  let server: Awaited<ReturnType<typeof countingServer>>;
  const healthy = (): Promise<void> => assertHealthy(sandbox, baseline, 'print("ok")', 'ok\n');
  const quickHealthy = (): Promise<void> => assertHealthy(quick, quickBaseline, 'print("ok")', 'ok\n');

  before(async () => {
    process.env.TIRL_TEST_SECRET = 'host-secret-value';
    sandbox = new PythonSandbox({ timeoutMs: 20_000, memoryMb: 256, maxOutputBytes: 4096, concurrency: 1, diskMb: 8 });
    quick = new PythonSandbox({ timeoutMs: 1500, memoryMb: 256, concurrency: 1 });
    await Promise.all([sandbox.warmUp(), quick.warmUp()]);
    baseline = descendants(sandbox.workerPids()).length;
    quickBaseline = descendants(quick.workerPids()).length;
    server = await countingServer();
  });

  after(async () => {
    await Promise.all([sandbox.close(), quick.close()]);
    server.server.close();
    delete process.env.TIRL_TEST_SECRET;
  });

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

  test('an infinite loop times out and the next call is unaffected', async () => {
    const started = performance.now();
    const response = await quick.run('print("spinning", flush=True)\nwhile True:\n    pass');
    const elapsed = performance.now() - started;
    assert.equal(response.status, 'timeout');
    assert.equal(response.result, 'spinning\n');
    assert.match(response.error!, /Timed out after 1500 ms/);
    // Well before the host's backstop (timeout + 5 s) would have stopped the worker.
    assert.ok(elapsed >= 1400 && elapsed < 5000, `took ${elapsed} ms`);
    await quickHealthy();
  });

  test('a program that sleeps forever or stops itself times out', async () => {
    const sleeper = await quick.run('import time\ntime.sleep(3600)');
    assert.equal(sleeper.status, 'timeout');
    const stopped = await quick.run('import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)');
    assert.equal(stopped.status, 'timeout');
    await quickHealthy();
  });

  test('cannot raise its own limits', async () => {
    const response = await sandbox.run('import resource\nresource.setrlimit(resource.RLIMIT_NPROC, (10000, 10000))');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /ValueError: not allowed to raise maximum limit/);
  });

  test('a fork bomb is capped by the process limit, times out, and leaves nothing', async () => {
    const response = await quick.run('import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass');
    assert.equal(response.status, 'timeout');
    await quickHealthy();
  });

  test('a memory bomb fails with MemoryError', async () => {
    const response = await sandbox.run('blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 1024 * 1024))');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /MemoryError/);
    const mapped = await sandbox.run('import mmap\nmmap.mmap(-1, 1 << 30)');
    assert.equal(mapped.status, 'error');
    assert.match(mapped.error!, /Cannot allocate memory|MemoryError/);
    await healthy();
  });

  test('many processes that each stay under the memory limit meet the run\'s limit', async (context) => {
    if (!sandbox.runMemoryLimited) {
      context.skip('no memory cgroup can be made here (needs root and a writable memory hierarchy)');
      return;
    }
    const response = await sandbox.run(
      'import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n        block = b"x" * (200 << 20)\n        time.sleep(2)\n' +
      '        os._exit(0)\nfor _ in range(6):\n    os.wait()',
    );
    assert.equal(response.status, 'error');
    assert.match(response.error!, /exceeded its memory limit of 408 MiB/);
    await healthy();
  });

  test('has no network: the host\'s loopback server is unreachable', async () => {
    const response = await sandbox.run(
      `import socket\ns = socket.create_connection(("127.0.0.1", ${server.port}), timeout=1)\nprint("connected")`,
    );
    assert.equal(response.status, 'error');
    assert.match(response.error!, /ConnectionRefusedError|Network is unreachable|OSError/);
    assert.equal(server.connections(), 0);
    const interfaces = await sandbox.run('import socket\nprint(sorted(name for _, name in socket.if_nameindex()))');
    assert.equal(interfaces.result, "['lo']\n");
  });

  test('cannot reach the host\'s abstract Unix sockets', async () => {
    let accepted = 0;
    const abstract = createServer((socket) => {
      accepted += 1;
      socket.destroy();
    });
    const name = `tirl-sandbox-test-${process.pid}`;
    await new Promise<void>((done) => abstract.listen(`\0${name}`, done));
    try {
      const response = await sandbox.run(
        `import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect("\\0${name}")\nprint("connected")`,
      );
      assert.equal(response.status, 'error');
      assert.match(response.error!, /ConnectionRefusedError/);
      assert.equal(accepted, 0);
    } finally {
      abstract.close();
    }
  });

  test('cannot read /etc/shadow, the project\'s files, /root, /work or the host environment', async () => {
    for (const path of ['/etc/shadow', '/etc/passwd', PROJECT_FILE, '/root/.bashrc', '/proc/1/environ']) {
      const response = await sandbox.run(`print(open(${JSON.stringify(path)}).read())`);
      assert.equal(response.status, 'error', `${path} was readable`);
      assert.match(response.error!, /FileNotFoundError|PermissionError/);
    }
    const listing = await sandbox.run('import os\nprint(sorted(os.listdir("/")))');
    assert.equal(listing.result, "['bin', 'dev', 'lib', 'lib64', 'proc', 'sbin', 'tmp', 'usr']\n");
    const environment = await sandbox.run('import os\nprint(sorted(os.environ))');
    assert.equal(environment.result, "['HOME', 'LANG', 'PATH', 'PWD', 'TMPDIR']\n");
    assert.ok(!environment.result!.includes('host-secret-value'));
  });

  test('cannot write outside its directory; its directory is capped and wiped', async () => {
    for (const path of ['/usr/x', '/x', '/etc/x', '/dev/x', '/proc/x', '/bin/x']) {
      const response = await sandbox.run(`open(${JSON.stringify(path)}, "w").write("x")`);
      assert.equal(response.status, 'error', `${path} was writable`);
      assert.match(response.error!, /Read-only file system|PermissionError|FileNotFoundError/);
    }
    const fill = await sandbox.run('with open("big", "wb") as f:\n    while True:\n        f.write(b"x" * 1048576)');
    assert.equal(fill.status, 'error');
    assert.match(fill.error!, /No space left on device|File too large/);
    await assertHealthy(sandbox, baseline, 'import os\nprint(os.listdir("/tmp"), os.listdir("/dev/shm"))', '[] []\n');
  });

  test('printing gigabytes is stopped at the output cap', async () => {
    const response = await sandbox.run('import sys\nline = "x" * 1023 + "\\n"\nfor _ in range(1 << 21):\n    sys.stdout.write(line)');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /Output exceeded 4096 bytes/);
    assert.equal(response.result!.length, 4096);
    const errors = await sandbox.run('import sys\nwhile True:\n    sys.stderr.write("e" * 65536)');
    assert.equal(errors.status, 'error');
    assert.match(errors.error!, /^e{4096}\nOutput exceeded 4096 bytes/);
    await healthy();
  });

  test('cannot kill its supervisor: the signals are dropped', async () => {
    const pidsBefore = sandbox.workerPids();
    const response = await sandbox.run('import os, signal\nfor s in (9, 15, 2, 19):\n    os.kill(os.getppid(), s)\nprint("parent", os.getppid())');
    assert.equal(response.status, 'success');
    assert.equal(response.result, 'parent 1\n');
    await healthy();
    assert.deepEqual(sandbox.workerPids(), pidsBefore);
  });

  test('kill -9 -1 ends only the program itself', async () => {
    const direct = await sandbox.run('import os, subprocess\nsubprocess.Popen(["sleep", "60"])\nos.kill(-1, 9)\nprint("survived")');
    assert.equal(direct.status, 'success');
    assert.equal(direct.result, 'survived\n');
    const shell = await sandbox.run('import os\nos.system("kill -9 -1")\nprint("unreachable")');
    assert.equal(shell.status, 'error');
    assert.equal(shell.signal, 'SIGKILL');
    assert.match(shell.error!, /killed by SIGKILL/);
    await healthy();
  });

  test('cannot trace or inspect its supervisor', async () => {
    const response = await sandbox.run('import os\nprint(os.listdir("/proc/1/fd"))');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /PermissionError/);
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

  test('background processes are ended when the program exits', async () => {
    const response = await sandbox.run(
      'import subprocess\nsubprocess.Popen(["sleep", "60"], start_new_session=True)\n' +
      'subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"])\nprint("started")',
    );
    assert.equal(response.status, 'success');
    assert.equal(descendants(sandbox.workerPids()).length, baseline);
    await healthy();
  });

  test('a worker killed from outside is replaced', async () => {
    const [pid] = sandbox.workerPids();
    const running = sandbox.run('import time\ntime.sleep(5)');
    await new Promise((done) => setTimeout(done, 200));
    process.kill(pid!, 'SIGKILL');
    const response = await running;
    assert.equal(response.status, 'error');
    assert.match(response.error!, /worker ended during the run/);
    await assertHealthy(sandbox, baseline, 'print("ok")', 'ok\n');
    assert.notDeepEqual(sandbox.workerPids(), [pid]);
  });

  test('a supervisor that stops answering is replaced after the host\'s backstop', async () => {
    const [pid] = quick.workerPids();
    const [supervisor] = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').map(Number);
    process.kill(supervisor!, 'SIGSTOP');
    const started = performance.now();
    const response = await quick.run('print("never answered")');
    assert.equal(response.status, 'timeout');
    assert.equal(response.error, 'Timed out after 1500 ms; the sandbox worker was stopped');
    assert.ok(performance.now() - started >= 6400, 'the backstop is timeoutMs + 5 s');
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
  });
});

describe('JavaScriptSandbox', () => {
  let sandbox: JavaScriptSandbox;
  let quick: JavaScriptSandbox;
  let baseline = 0;
  let quickBaseline = 0;
  let server: Awaited<ReturnType<typeof countingServer>>;
  const healthy = (): Promise<void> => assertHealthy(sandbox, baseline, 'console.log("ok")', 'ok\n');
  const quickHealthy = (): Promise<void> => assertHealthy(quick, quickBaseline, 'console.log("ok")', 'ok\n');

  before(async () => {
    sandbox = new JavaScriptSandbox({ timeoutMs: 20_000, memoryMb: 128, maxOutputBytes: 4096, concurrency: 1, diskMb: 8 });
    quick = new JavaScriptSandbox({ timeoutMs: 2000, memoryMb: 128, concurrency: 1 });
    await Promise.all([sandbox.warmUp(), quick.warmUp()]);
    baseline = descendants(sandbox.workerPids()).length;
    quickBaseline = descendants(quick.workerPids()).length;
    server = await countingServer();
  });

  after(async () => {
    await Promise.all([sandbox.close(), quick.close()]);
    server.server.close();
  });

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

  test('an infinite loop times out', async () => {
    const response = await quick.run('while (true) {}');
    assert.equal(response.status, 'timeout');
    await quickHealthy();
  });

  test('a memory bomb ends with an out-of-memory error', async () => {
    const heap = await sandbox.run('const a = []; while (true) a.push(new Array(1e6).fill(1.5));');
    assert.equal(heap.status, 'error');
    assert.match(heap.error!, /out of memory|Allocation failed|OOM|exceeded its memory limit/i);
    const buffers = await sandbox.run('const a = []; while (true) a.push(Buffer.alloc(64 * 1024 * 1024, 1));');
    assert.equal(buffers.status, 'error');
    assert.match(buffers.error!, /RangeError|Array buffer allocation failed|out of memory|OOM|exceeded its memory limit/i);
    await healthy();
  });

  test('a fork bomb is capped and leaves nothing', async () => {
    const response = await quick.run(
      'require("child_process").execSync("f() { f | f & }; f; sleep 100", { shell: "/bin/sh", stdio: "ignore" });',
    );
    assert.notEqual(response.status, 'success');
    await quickHealthy();
  });

  test('has no network', async () => {
    const response = await sandbox.run(
      `const s = require("net").connect(${server.port}, "127.0.0.1");\ns.on("connect", () => console.log("connected"));`,
    );
    assert.equal(response.status, 'error');
    assert.match(response.error!, /ECONNREFUSED|ENETUNREACH/);
    assert.equal(server.connections(), 0);
  });

  test('cannot read /etc/shadow or the project\'s files, nor write outside its directory', async () => {
    for (const path of ['/etc/shadow', PROJECT_FILE, '/root/.bashrc']) {
      const response = await sandbox.run(`console.log(require("fs").readFileSync(${JSON.stringify(path)}, "utf8"))`);
      assert.equal(response.status, 'error', `${path} was readable`);
      assert.match(response.error!, /ENOENT|EACCES/);
    }
    for (const path of ['/usr/x', '/x', '/sandbox/../x']) {
      const response = await sandbox.run(`require("fs").writeFileSync(${JSON.stringify(path)}, "x")`);
      assert.equal(response.status, 'error', `${path} was writable`);
      assert.match(response.error!, /EROFS|EACCES|ENOENT/);
    }
    const environment = await sandbox.run('console.log(Object.keys(process.env).sort().join(","))');
    assert.equal(environment.result, 'HOME,LANG,PATH,PWD,TMPDIR\n');
  });

  test('printing gigabytes is stopped at the output cap', async () => {
    const response = await sandbox.run('const line = "x".repeat(1023) + "\\n"; for (;;) process.stdout.write(line);');
    assert.equal(response.status, 'error');
    assert.match(response.error!, /Output exceeded 4096 bytes/);
    await healthy();
  });

  test('cannot kill its supervisor', async () => {
    const response = await sandbox.run('process.kill(process.ppid, "SIGKILL"); console.log("ppid", process.ppid);');
    assert.equal(response.status, 'success');
    assert.equal(response.result, 'ppid 1\n');
    const everything = await sandbox.run(
      'require("child_process").spawn("sleep", ["60"]); process.kill(-1, "SIGKILL"); console.log("survived");',
    );
    assert.equal(everything.result, 'survived\n');
    await healthy();
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
