/**
 * The hostile programs, in one table shared by test/sandbox.test.ts (each program once, with
 * a health check after it) and test/sandbox_stress.test.ts (the whole table many times at
 * once). Each entry holds the program in each language it applies to and the check that
 * proves the sandbox contained it; `HostileHost` holds what the programs aim at on the host
 * (servers, a canary file, a secret in the environment) and proves afterwards that nothing
 * reached it.
 */
import assert from 'node:assert/strict';
import { createSocket, type Socket as DatagramSocket } from 'node:dgram';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { findOwnMemoryCgroup, OWN_CGROUP_PREFIX } from '../lib/tools/cgroup.js';
import {
  JavaScriptSandbox, PythonSandbox, type CodeSandbox, type SandboxLanguage, type SandboxOptions, type SandboxResponse,
} from '../lib/tools/sandbox.js';

/** The limits every hostile-program pool runs with, spelled out so the checks can use them. */
export type HostileLimits = Required<Pick<SandboxOptions,
  'timeoutMs' | 'memoryMb' | 'runMemoryMb' | 'maxOutputBytes' | 'diskMb' | 'maxProcesses' | 'maxOpenFiles'>>;

/** Per language: generous time for ordinary and memory-hungry programs on a loaded machine
 * (runs are niced), a short one for the programs that are meant to time out. */
const LIMITS: Record<SandboxLanguage, { normal: HostileLimits; quickTimeoutMs: number }> = {
  python: {
    normal: { timeoutMs: 20_000, memoryMb: 128, runMemoryMb: 200, maxOutputBytes: 4096, diskMb: 8, maxProcesses: 16, maxOpenFiles: 256 },
    quickTimeoutMs: 1000,
  },
  javascript: {
    normal: { timeoutMs: 20_000, memoryMb: 128, runMemoryMb: 280, maxOutputBytes: 4096, diskMb: 8, maxProcesses: 32, maxOpenFiles: 256 },
    quickTimeoutMs: 1000,
  },
};

/** What a program and its check know about where they run. */
export interface HostileContext {
  language: SandboxLanguage;
  limits: HostileLimits;
  /** Whether a memory cgroup limits the run as a whole (`runMemoryMb`). */
  runMemoryLimited: boolean;
  host: HostileHost;
}

/** One hostile program. */
export interface HostileProgram {
  /** What the program attempts, and what must happen: the test's name. */
  name: string;
  /** The program runs into the time limit: it goes to the pool with the short timeout. */
  timesOut?: boolean;
  /** Meaningful only where a memory cgroup limits the run as a whole. */
  needsRunMemoryLimit?: boolean;
  python?: (context: HostileContext) => string;
  javascript?: (context: HostileContext) => string;
  /** Throws unless the response proves the program was contained. */
  check: (response: SandboxResponse, context: HostileContext) => void;
}

/** A sandbox for the hostile programs of `language`: `quick` ones get the short timeout. */
export function hostileSandbox(language: SandboxLanguage, quick: boolean, concurrency: number): CodeSandbox {
  const options = { ...LIMITS[language].normal, concurrency };
  if (quick) options.timeoutMs = LIMITS[language].quickTimeoutMs;
  return language === 'python' ? new PythonSandbox(options) : new JavaScriptSandbox(options);
}

/** The context for programs run by `sandbox`, one made by {@link hostileSandbox}. */
export function hostileContext(sandbox: CodeSandbox, quick: boolean, host: HostileHost): HostileContext {
  const limits = { ...LIMITS[sandbox.language].normal };
  if (quick) limits.timeoutMs = LIMITS[sandbox.language].quickTimeoutMs;
  return { language: sandbox.language, limits, runMemoryLimited: sandbox.runMemoryLimited, host };
}

/** Host pids of every process descending from `roots` (the roots included). */
export function descendants(roots: number[]): number[] {
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

/** The cgroups this process made for its sandbox workers that still exist. */
export function ownSandboxCgroups(): string[] {
  const location = findOwnMemoryCgroup();
  if (location === undefined) return [];
  return readdirSync(location.path).filter((name) => name.startsWith(OWN_CGROUP_PREFIX));
}

/** Whether process `pid` exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The PID namespace of process `pid` (e.g. 'pid:[4026532281]'), or undefined once it is gone. */
export function pidNamespaceOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return undefined;
  }
}

const CANARY_TEXT = 'the sandbox must not touch this file\n';

/**
 * What the hostile programs aim at on the host: a loopback TCP server, a UDP socket, an
 * abstract and a path Unix socket (each counting what reaches it), a canary file in a
 * directory of its own, and a secret in this process's environment.
 */
export class HostileHost {
  readonly secret = `tirl-host-secret-${process.pid}`;
  readonly hostPid = process.pid;
  readonly projectFile = resolve('package.json');
  readonly homeFile = join(homedir(), '.bashrc');
  readonly abstractSocketName = `tirl-hostile-${process.pid}`;
  readonly canaryDir = mkdtempSync('/var/tmp/tirl-hostile-canary-');
  readonly canaryPath = join(this.canaryDir, 'canary.txt');
  readonly unixSocketPath = join(this.canaryDir, 'host.sock');
  tcpPort = 0;
  udpPort = 0;
  #reached: string[] = [];
  #servers: Server[] = [];
  #udp: DatagramSocket | undefined;
  #canaryModified = 0;

  private constructor() {}

  static async start(): Promise<HostileHost> {
    const host = new HostileHost();
    process.env.TIRL_TEST_SECRET = host.secret;
    writeFileSync(host.canaryPath, CANARY_TEXT);
    host.#canaryModified = statSync(host.canaryPath).mtimeMs;
    const listen = async (what: string, address: { port: number; host: string } | { path: string }): Promise<Server> => {
      const server = createServer((socket) => {
        host.#reached.push(`a connection to the ${what}`);
        socket.destroy();
      });
      await new Promise<void>((done) => server.listen(address, done));
      host.#servers.push(server);
      return server;
    };
    const tcp = await listen('loopback TCP server', { port: 0, host: '127.0.0.1' });
    host.tcpPort = (tcp.address() as { port: number }).port;
    await listen('abstract Unix socket', { path: `\0${host.abstractSocketName}` });
    await listen('Unix socket file', { path: host.unixSocketPath });
    const udp = createSocket('udp4');
    udp.on('message', () => host.#reached.push('a datagram to the loopback UDP socket'));
    await new Promise<void>((done) => udp.bind(0, '127.0.0.1', done));
    host.udpPort = udp.address().port;
    host.#udp = udp;
    return host;
  }

  /** Throws if any program reached a host socket or touched the canary. */
  assertNoEscape(): void {
    assert.deepEqual(this.#reached, [], 'a sandboxed program reached the host');
    assert.deepEqual(readdirSync(this.canaryDir).sort(), ['canary.txt', 'host.sock'], 'the canary directory changed');
    assert.equal(readFileSync(this.canaryPath, 'utf8'), CANARY_TEXT, 'the canary file changed');
    assert.equal(statSync(this.canaryPath).mtimeMs, this.#canaryModified, 'the canary file was written');
  }

  async close(): Promise<void> {
    await Promise.all(this.#servers.map((server) => new Promise((done) => server.close(done))));
    await new Promise<void>((done) => (this.#udp === undefined ? done() : this.#udp.close(() => done())));
    rmSync(this.canaryDir, { recursive: true, force: true });
    delete process.env.TIRL_TEST_SECRET;
  }
}

/** Throws unless `response` has exactly the shape a SandboxResponse promises. */
export function assertWellFormed(response: SandboxResponse, language: SandboxLanguage): void {
  const allowed = new Set(['tool', 'status', 'result', 'error', 'outOfMemory', 'exitCode', 'signal', 'durationMs']);
  for (const key of Object.keys(response)) assert.ok(allowed.has(key), `unexpected field ${key}`);
  assert.equal(response.tool, language);
  assert.ok(['success', 'error', 'timeout'].includes(response.status), `status ${response.status}`);
  assert.ok(response.result === undefined || typeof response.result === 'string', 'result is not a string');
  assert.ok(response.error === undefined || typeof response.error === 'string', 'error is not a string');
  assert.ok(response.outOfMemory === undefined || typeof response.outOfMemory === 'boolean', 'outOfMemory');
  assert.ok(response.exitCode === null || (Number.isInteger(response.exitCode) && response.exitCode >= 0 && response.exitCode <= 255),
    `exitCode ${response.exitCode}`);
  assert.ok(response.signal === null || /^SIG[A-Z0-9]+$/.test(response.signal), `signal ${response.signal}`);
  assert.ok(Number.isFinite(response.durationMs) && response.durationMs >= 0, `durationMs ${response.durationMs}`);
  if (response.status === 'success') {
    assert.equal(response.exitCode, 0);
    assert.equal(typeof response.result, 'string');
  } else {
    assert.equal(typeof response.error, 'string', 'a failed run says why');
  }
}

function lines(...source: string[]): string {
  return source.join('\n');
}

const quote = JSON.stringify;

/** The run ended at its own timeout, in the sandbox, not at the host's backstop. */
function assertTimedOut(response: SandboxResponse, context: HostileContext): void {
  assert.equal(response.status, 'timeout', JSON.stringify(response));
  assert.match(response.error!, new RegExp(`Timed out after ${context.limits.timeoutMs} ms$`));
  assert.doesNotMatch(response.error!, /worker was stopped/);
  assert.ok(response.durationMs >= context.limits.timeoutMs, `ended after ${response.durationMs} ms`);
}

/** The program ran to its end and printed `expected`. */
function assertPrinted(response: SandboxResponse, expected: string): void {
  assert.equal(response.status, 'success', JSON.stringify(response));
  assert.equal(response.result, expected);
}

/** The program printed one errno name per attempt, each one of `refusals`. */
function assertRefused(response: SandboxResponse, attempts: number, refusals: string[]): void {
  assert.equal(response.status, 'success', JSON.stringify(response));
  const outcomes = response.result!.trimEnd().split('\n');
  assert.equal(outcomes.length, attempts, response.result);
  for (const outcome of outcomes) assert.ok(refusals.includes(outcome.split(' ')[0]!), `not refused: ${outcome}`);
}

/** Python: `attempt(what, call)` prints the errno name when `call` raises OSError or, as
 * a libc function does, returns -1; else `done`. Then one attempt per target, if any. */
function pythonAttempts(targets: string[], body: string[], ...after: string[]): string {
  return lines(
    'import ctypes, errno, os, socket',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'def attempt(what, call):',
    '    try:',
    '        if call() == -1:',
    '            raise OSError(ctypes.get_errno(), what)',
    '        print("done", what)',
    '    except OSError as error:',
    '        print(errno.errorcode.get(error.errno, type(error).__name__), what)',
    ...(targets.length === 0 ? [] : [
      'def act(target):',
      ...body.map((line) => `    ${line}`),
      `for target in ${quote(targets)}:`,
      '    attempt(target, lambda: act(target))',
    ]),
    ...after,
  );
}

/** JavaScript: as {@link pythonAttempts}, printing the error's code. */
function javascriptAttempts(targets: string[], body: string, ...after: string[]): string {
  return lines(
    'const fs = require("fs");',
    'const attempt = (what, call) => {',
    '  try {',
    '    call();',
    '    console.log("done", what);',
    '  } catch (error) {',
    '    console.log(error.code, what);',
    '  }',
    '};',
    ...(targets.length === 0 ? [] : [
      `const act = (target) => { ${body}; };`,
      `for (const target of ${quote(targets)}) attempt(target, () => act(target));`,
    ]),
    ...after,
  );
}

/** JavaScript: connect to each target in turn, printing the error code (or `connected`). */
function javascriptConnects(targets: string): string {
  return lines(
    'const net = require("net");',
    '(async () => {',
    `  for (const target of ${targets}) {`,
    '    console.log(await new Promise((done) => {',
    '      const socket = net.connect(target);',
    '      socket.on("connect", () => { socket.destroy(); done("connected"); });',
    '      socket.on("error", (error) => done(error.code));',
    '    }));',
    '  }',
    '})();',
  );
}

const NETWORK_REFUSALS = ['ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH', 'EADDRNOTAVAIL'];
const FILE_REFUSALS = ['ENOENT', 'EACCES', 'EROFS'];

/** Host paths no program may read. */
function hostFiles(host: HostileHost): string[] {
  return [...new Set(['/etc/shadow', '/etc/passwd', host.projectFile, host.homeFile, '/root/.bashrc', host.canaryPath, '/proc/1/environ'])];
}

/** Places no program may write to, on the host or in the sandbox's read-only parts. */
function forbiddenWrites(host: HostileHost): string[] {
  return ['/usr/x', '/x', '/etc/x', '/dev/x', '/proc/x', '/bin/x', '/sandbox/../x', '/sys/fs/cgroup/cgroup.procs',
    '/proc/sysrq-trigger', '/proc/sys/kernel/printk_ratelimit', host.canaryPath, `${host.projectFile}.x`];
}

/** Paths that symbolic links in the sandbox's /tmp point to, trying to reach the host. */
function linkTargets(host: HostileHost): string[] {
  return [host.projectFile, `/proc/1/root${host.projectFile}`, '/proc/1/cwd/x', `/proc/self/root/../..${host.canaryPath}`];
}

/** Files written until refused: the file-size limit (diskMb) stops each one, the size of
 * /tmp (diskMb) and of /dev/shm (16 MiB) stop the last in each. */
const FILLS = ['/tmp/big', '/tmp/more', '/dev/shm/a', '/dev/shm/b', '/dev/shm/c'];

/** What a program sees at the root of the sandbox: the host's system directories (or their
 * merged-/usr links), and the sandbox's own mounts. */
function rootListing(language: SandboxLanguage): string {
  const system = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'].filter((name) => existsSync(`/${name}`));
  const own = language === 'python' ? ['dev', 'proc', 'tmp', 'usr'] : ['dev', 'proc', 'sandbox', 'tmp', 'usr'];
  return `${[...system, ...own].sort().join(' ')}\n`;
}

/**
 * The probe run after hostile programs: a fresh run sees empty writable directories, no
 * process but itself and the supervisor, and its working directory.
 */
export const FRESH_STATE: HostileProgram = {
  name: 'a fresh run sees empty directories and no other process',
  python: () => lines(
    'import os',
    'print(os.listdir("/tmp"), os.listdir("/dev/shm"), len([p for p in os.listdir("/proc") if p.isdigit()]), os.getcwd())',
  ),
  javascript: () => lines(
    'const fs = require("fs");',
    'const pids = fs.readdirSync("/proc").filter((name) => /^\\d+$/.test(name)).length;',
    'console.log(JSON.stringify([fs.readdirSync("/tmp"), fs.readdirSync("/dev/shm"), fs.readdirSync("/sandbox"), pids, process.cwd()]));',
  ),
  check(response, context) {
    assertPrinted(response, context.language === 'python' ? '[] [] 2 /tmp\n' : '[[],[],["main.cjs"],2,"/tmp"]\n');
  },
};

export const HOSTILE_PROGRAMS: HostileProgram[] = [
  {
    name: 'an infinite loop times out',
    timesOut: true,
    python: () => lines('print("spinning", flush=True)', 'while True:', '    pass'),
    javascript: () => 'while (true) {}',
    check(response, context) {
      assertTimedOut(response, context);
      if (context.language === 'python') assert.equal(response.result, 'spinning\n');
    },
  },
  {
    name: 'a program that sleeps forever times out',
    timesOut: true,
    python: () => lines('import time', 'time.sleep(3600)'),
    javascript: () => 'setInterval(() => {}, 1 << 30);',
    check: assertTimedOut,
  },
  {
    name: 'a program that stops itself times out',
    timesOut: true,
    python: () => lines('import os, signal', 'os.kill(os.getpid(), signal.SIGSTOP)'),
    javascript: () => 'process.kill(process.pid, "SIGSTOP");',
    check: assertTimedOut,
  },
  {
    name: 'a fork bomb is capped by the process limit and times out',
    timesOut: true,
    python: () => lines('import os', 'while True:', '    try:', '        os.fork()', '    except OSError:', '        pass'),
    javascript: () => 'require("child_process").execSync("f() { f | f & }; f; sleep 100", { shell: "/bin/sh", stdio: "ignore" });',
    check(response, context) {
      if (context.language === 'python') assertTimedOut(response, context);
      else assert.notEqual(response.status, 'success');
    },
  },
  {
    name: 'forking stops at the process limit, and the children are ended with the program',
    python: () => lines(
      'import errno, os, time',
      'children = 0',
      'while True:',
      '    try:',
      '        pid = os.fork()',
      '    except OSError as error:',
      '        print(errno.errorcode[error.errno], children)',
      '        break',
      '    if pid == 0:',
      '        time.sleep(3600)',
      '        os._exit(0)',
      '    children += 1',
    ),
    javascript: () => lines(
      'const { spawn } = require("child_process");',
      'let children = 0;',
      'const next = () => {',
      '  const child = spawn("sleep", ["3600"], { stdio: "ignore" });',
      '  child.on("error", (error) => { console.log(error.code, children); process.exit(0); });',
      '  child.on("spawn", () => { children += 1; next(); });',
      '};',
      'next();',
    ),
    check(response, context) {
      assert.equal(response.status, 'success', JSON.stringify(response));
      const [code, children] = response.result!.trim().split(' ');
      assert.equal(code, 'EAGAIN');
      assert.ok(Number(children) >= 1 && Number(children) < context.limits.maxProcesses, `${children} children`);
    },
  },
  {
    name: 'a memory bomb fails with an out-of-memory error',
    python: () => lines('blocks = []', 'while True:', '    blocks.append(bytearray(16 * 1024 * 1024))'),
    javascript: () => 'const a = []; while (true) a.push(new Array(1e6).fill(1.5));',
    check(response, context) {
      assert.equal(response.status, 'error', JSON.stringify(response));
      assert.match(response.error!, context.language === 'python' ? /MemoryError/ : /out of memory|Allocation failed|OOM|exceeded its memory limit/i);
    },
  },
  {
    name: 'a huge allocation outside the heap is refused',
    python: () => lines('import mmap', 'mmap.mmap(-1, 1 << 30)'),
    javascript: () => 'const a = []; while (true) a.push(Buffer.alloc(64 * 1024 * 1024, 1));',
    check(response, context) {
      assert.equal(response.status, 'error', JSON.stringify(response));
      assert.match(response.error!, context.language === 'python'
        ? /Cannot allocate memory|MemoryError/
        : /RangeError|Array buffer allocation failed|out of memory|OOM|exceeded its memory limit/i);
    },
  },
  {
    name: 'many processes that each stay under the memory limit meet the run\'s limit',
    needsRunMemoryLimit: true,
    // Each child takes 100 MiB, says so, and holds it until the program ends; the parent
    // forks the next one only then, so three exceed the run's 200 MiB whatever the timing.
    python: () => lines(
      'import os',
      'hold_read, hold_write = os.pipe()',
      'for _ in range(3):',
      '    ready_read, ready_write = os.pipe()',
      '    if os.fork() == 0:',
      '        os.close(hold_write)',
      '        block = b"x" * (100 << 20)',
      '        os.write(ready_write, b".")',
      '        os.read(hold_read, 1)',
      '        os._exit(0)',
      '    os.close(ready_write)',
      '    os.read(ready_read, 1)  # b"" when the child was killed before it held its block',
      '    os.close(ready_read)',
    ),
    check(response, context) {
      assert.equal(response.status, 'error', JSON.stringify(response));
      assert.equal(response.outOfMemory, true);
      assert.match(response.error!, new RegExp(`exceeded its memory limit of ${context.limits.runMemoryMb} MiB`));
    },
  },
  {
    name: 'cannot raise its own limits',
    python: () => lines('import resource', 'resource.setrlimit(resource.RLIMIT_NPROC, (10000, 10000))'),
    javascript: () => lines(
      'const shell = require("child_process").spawnSync("/bin/sh", ["-c", "ulimit -H -n 100000"], { encoding: "utf8" });',
      'console.log(shell.status, shell.stderr.trim());',
    ),
    check(response, context) {
      if (context.language === 'python') {
        assert.equal(response.status, 'error');
        assert.match(response.error!, /ValueError: not allowed to raise maximum limit/);
      } else {
        assert.equal(response.status, 'success', JSON.stringify(response));
        assert.match(response.result!, /^[1-9]\d* .*(Operation not permitted|not allowed)/);
      }
    },
  },
  {
    name: 'has no network: TCP to the host\'s loopback or any other address fails',
    python: ({ host }) => pythonAttempts([`127.0.0.1:${host.tcpPort}`, '192.0.2.1:80', `[::1]:${host.tcpPort}`], [
      'address, port = target.rsplit(":", 1)',
      'socket.create_connection((address.strip("[]"), int(port)), timeout=5).close()',
    ]),
    javascript: ({ host }) => javascriptConnects(
      quote([{ host: '127.0.0.1', port: host.tcpPort }, { host: '192.0.2.1', port: 80 }, { host: '::1', port: host.tcpPort }])),
    check: (response) => assertRefused(response, 3, NETWORK_REFUSALS),
  },
  {
    name: 'has no network: UDP datagrams do not reach the host',
    python: ({ host }) => lines(
      'import errno, socket',
      'udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
      `udp.sendto(b"escape", ("127.0.0.1", ${host.udpPort}))`,
      'try:',
      '    udp.sendto(b"escape", ("192.0.2.1", 53))',
      '    print("sent")',
      'except OSError as error:',
      '    print(errno.errorcode[error.errno])',
    ),
    javascript: ({ host }) => lines(
      'const udp = require("dgram").createSocket("udp4");',
      `udp.send("escape", ${host.udpPort}, "127.0.0.1", () => udp.send("escape", 53, "192.0.2.1", (error) => {`,
      '  console.log(error ? error.code : "sent");',
      '  udp.close();',
      '}));',
    ),
    check: (response) => assertRefused(response, 1, NETWORK_REFUSALS),
  },
  {
    name: 'has no network interface but its own loopback',
    python: () => lines('import socket', 'print(sorted(name for _, name in socket.if_nameindex()))'),
    javascript: () => 'console.log(Object.keys(require("os").networkInterfaces()).sort().join(","));',
    check: (response, context) => assertPrinted(response, context.language === 'python' ? "['lo']\n" : 'lo\n'),
  },
  {
    name: 'cannot reach the host\'s Unix sockets, abstract or on disk',
    python: ({ host }) => pythonAttempts(
      [`\0${host.abstractSocketName}`, host.unixSocketPath, '/run/dbus/system_bus_socket', '/var/run/docker.sock'],
      ['socket.socket(socket.AF_UNIX).connect(target)']),
    javascript: ({ host }) => javascriptConnects(
      quote([`\0${host.abstractSocketName}`, host.unixSocketPath, '/run/dbus/system_bus_socket', '/var/run/docker.sock'].map((path) => ({ path })))),
    check(response) {
      assert.equal(response.status, 'success', JSON.stringify(response));
      // Abstract sockets belong to the network namespace; socket files are not mounted.
      assert.deepEqual(response.result!.trimEnd().split('\n').map((line) => line.split(' ')[0]), ['ECONNREFUSED', 'ENOENT', 'ENOENT', 'ENOENT']);
    },
  },
  {
    name: 'cannot read the host\'s files: /etc/shadow, the project, the home directory, the canary',
    python: ({ host }) => pythonAttempts(hostFiles(host), ['open(target, "rb").read()']),
    javascript: ({ host }) => javascriptAttempts(hostFiles(host), 'fs.readFileSync(target)'),
    check: (response, context) => assertRefused(response, hostFiles(context.host).length, ['ENOENT', 'EACCES']),
  },
  {
    name: 'sees only /usr and its own /tmp, /dev and /proc',
    python: () => lines('import os', 'print(" ".join(sorted(os.listdir("/"))))'),
    javascript: () => 'console.log(require("fs").readdirSync("/").sort().join(" "));',
    check: (response, context) => assertPrinted(response, rootListing(context.language)),
  },
  {
    name: 'has a clean environment: no host variables, no secrets',
    python: () => lines('import os', 'print(" ".join(sorted(os.environ)))', 'print(open("/proc/self/environ").read())'),
    javascript: () => lines(
      'console.log(Object.keys(process.env).sort().join(" "));',
      'console.log(require("fs").readFileSync("/proc/self/environ", "utf8"));',
    ),
    check(response, context) {
      assert.equal(response.status, 'success', JSON.stringify(response));
      assert.equal(response.result!.split('\n')[0], 'HOME LANG PATH PWD TMPDIR');
      assert.ok(!response.result!.includes(context.host.secret), 'the host\'s secret leaked');
    },
  },
  {
    name: 'cannot write outside its directories',
    // Append mode with nothing appended: harmless even where the open succeeded.
    python: ({ host }) => pythonAttempts(forbiddenWrites(host), ['open(target, "a").close()']),
    javascript: ({ host }) => javascriptAttempts(forbiddenWrites(host), 'fs.appendFileSync(target, "")'),
    check: (response, context) => assertRefused(response, forbiddenWrites(context.host).length, FILE_REFUSALS),
  },
  {
    name: 'cannot delete or rename host files',
    python: ({ host }) => pythonAttempts([host.canaryPath, host.canaryDir, host.projectFile], ['os.rename(target, "/tmp/taken")']),
    javascript: ({ host }) => javascriptAttempts([host.canaryPath, host.canaryDir, host.projectFile], 'fs.rmSync(target, { recursive: true })'),
    check: (response) => assertRefused(response, 3, [...FILE_REFUSALS, 'EXDEV']),
  },
  {
    name: 'symbolic and hard links lead nowhere outside',
    python: ({ host }) => pythonAttempts(linkTargets(host), [
      'link = f"link{len(os.listdir())}"',
      'os.symlink(target, link)',
      'open(link, "rb").read()',
    ], 'attempt("hard link", lambda: os.link("/usr/bin/env", "hard"))'),
    javascript: ({ host }) => javascriptAttempts(linkTargets(host),
      'const link = `link${fs.readdirSync(".").length}`; fs.symlinkSync(target, link); fs.readFileSync(link)',
      'attempt("hard link", () => fs.linkSync("/usr/bin/env", "hard"));'),
    check: (response) => assertRefused(response, 5, ['ENOENT', 'EACCES', 'EXDEV']),
  },
  {
    name: 'sees and signals no process but its own',
    // The host's pid is a number in the sandbox's PID namespace too. A worker's namespace
    // lives across runs, so its pids count up and can reach that number: the program's own
    // pid was the host test's in one CI run (repetition 34). Signalling its own pid says
    // nothing about the host, so the program reports it instead.
    python: ({ host }) => lines(
      'import os',
      'pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]',
      'print(sorted(pids) == sorted({1, os.getpid()}))',
      `if ${host.hostPid} in pids:`,
      '    print("a pid of its own")',
      'else:',
      '    try:',
      `        os.kill(${host.hostPid}, 0)`,
      '        print("signalled")',
      '    except ProcessLookupError:',
      '        print("ESRCH")',
    ),
    javascript: ({ host }) => lines(
      'const pids = require("fs").readdirSync("/proc").filter((name) => /^\\d+$/.test(name)).map(Number);',
      'console.log(pids.length === 2 && pids.includes(1) && pids.includes(process.pid) ? "True" : pids.join(","));',
      `if (pids.includes(${host.hostPid})) console.log("a pid of its own");`,
      `else try { process.kill(${host.hostPid}, 0); console.log("signalled"); } catch (error) { console.log(error.code); }`,
    ),
    check: (response) => {
      assert.equal(response.status, 'success', JSON.stringify(response));
      assert.ok(['True\nESRCH\n', 'True\na pid of its own\n'].includes(response.result!), JSON.stringify(response.result));
    },
  },
  {
    name: 'cannot trace or inspect its supervisor',
    python: () => pythonAttempts(['/proc/1/fd', '/proc/1/root', '/proc/1/cwd'], ['os.listdir(target)'],
      'attempt("/proc/1/mem", lambda: open("/proc/1/mem", "rb"))',
      'attempt("ptrace", lambda: libc.ptrace(16, 1, 0, 0))  # PTRACE_ATTACH'),
    javascript: () => javascriptAttempts(['/proc/1/fd', '/proc/1/root', '/proc/1/cwd'], 'fs.readdirSync(target)',
      'attempt("/proc/1/mem", () => fs.openSync("/proc/1/mem", "r"));'),
    check: (response, context) => assertRefused(response, context.language === 'python' ? 5 : 4, ['EACCES', 'EPERM']),
  },
  {
    name: 'cannot gain privileges: no root, no capabilities, no new namespaces or devices',
    python: () => pythonAttempts([], [],
      'print("root" if os.geteuid() == 0 else "not root")',
      'print(*sorted(line.split(":")[0] for line in open("/proc/self/status") if line.startswith("Cap") and int(line.split()[1], 16) != 0))',
      'print([line.split()[1] for line in open("/proc/self/status") if line.startswith("NoNewPrivs")][0])',
      'attempt("setuid", lambda: os.setuid(0))',
      'attempt("setgid", lambda: os.setgid(0))',
      'attempt("mknod", lambda: os.mknod("device", 0o20666, os.makedev(1, 3)))',
      'attempt("chroot", lambda: os.chroot("/tmp"))',
      'attempt("unshare", lambda: libc.unshare(0x10000000))  # CLONE_NEWUSER',
      'attempt("sethostname", lambda: libc.sethostname(b"x", 1))',
    ),
    javascript: () => lines(
      'const status = require("fs").readFileSync("/proc/self/status", "utf8").split("\\n");',
      'console.log(process.geteuid() === 0 ? "root" : "not root");',
      'console.log(status.filter((line) => line.startsWith("Cap") && BigInt("0x" + line.split(/\\s+/)[1]) !== 0n).map((line) => line.split(":")[0]).join(" "));',
      'console.log(status.find((line) => line.startsWith("NoNewPrivs")).split(/\\s+/)[1]);',
    ) + javascriptAttempts([], '', 'attempt("setuid", () => process.setuid(0));', 'attempt("setgid", () => process.setgid(0));'),
    check(response, context) {
      assert.equal(response.status, 'success', JSON.stringify(response));
      const [root, capabilities, noNewPrivileges, ...attempts] = response.result!.trimEnd().split('\n');
      assert.equal(root, 'not root');
      assert.equal(capabilities, '', 'capabilities left');
      assert.equal(noNewPrivileges, '1', 'setuid programs could gain privileges');
      assert.equal(attempts.length, context.language === 'python' ? 6 : 2);
      // Root is not even mapped in the sandbox's user namespace: setuid(0) is EINVAL there.
      for (const attempt of attempts) assert.match(attempt, /^(EPERM|EINVAL) /);
    },
  },
  {
    name: 'printing gigabytes is stopped at the output cap',
    python: () => lines('import sys', 'line = "x" * 1023 + "\\n"', 'for _ in range(1 << 21):', '    sys.stdout.write(line)'),
    javascript: () => 'const line = "x".repeat(1023) + "\\n"; for (;;) process.stdout.write(line);',
    check(response, context) {
      assert.equal(response.status, 'error', JSON.stringify(response));
      assert.match(response.error!, new RegExp(`Output exceeded ${context.limits.maxOutputBytes} bytes`));
      assert.equal(response.result!.length, context.limits.maxOutputBytes);
    },
  },
  {
    name: 'flooding stderr is stopped at the output cap',
    python: () => lines('import sys', 'while True:', '    sys.stderr.write("e" * 65536)'),
    javascript: () => 'for (;;) process.stderr.write("e".repeat(65536));',
    check(response, context) {
      assert.equal(response.status, 'error', JSON.stringify(response));
      assert.match(response.error!, new RegExp(`^e{${context.limits.maxOutputBytes}}\nOutput exceeded ${context.limits.maxOutputBytes} bytes`));
    },
  },
  {
    name: 'output that is not UTF-8 arrives replaced, not garbled',
    python: () => lines('import sys', 'sys.stdout.buffer.write(b"\\xff\\xfeok\\x00")'),
    javascript: () => 'process.stdout.write(Buffer.from([0xff, 0xfe, 0x6f, 0x6b, 0x00]));',
    check: (response) => assertPrinted(response, '\ufffd\ufffdok\u0000'),
  },
  {
    name: 'cannot kill its supervisor: the signals are dropped',
    python: () => lines('import os', 'for s in (9, 15, 2, 19):', '    os.kill(os.getppid(), s)', 'print("parent", os.getppid())'),
    javascript: () => 'for (const s of ["SIGKILL", "SIGTERM", "SIGINT", "SIGSTOP"]) process.kill(process.ppid, s); console.log("parent", process.ppid);',
    check: (response) => assertPrinted(response, 'parent 1\n'),
  },
  {
    name: 'kill -9 -1 ends every process of the run but the supervisor',
    python: () => lines('import os, subprocess', 'subprocess.Popen(["sleep", "60"])', 'os.kill(-1, 9)', 'print("survived")'),
    javascript: () => 'require("child_process").spawn("sleep", ["60"]); process.kill(-1, "SIGKILL"); console.log("survived");',
    check: (response) => assertPrinted(response, 'survived\n'),
  },
  {
    name: 'kill -9 -1 from a shell ends the program itself',
    python: () => lines('import os', 'os.system("kill -9 -1")', 'print("unreachable")'),
    javascript: () => 'require("child_process").execSync("kill -9 -1", { shell: "/bin/sh" }); console.log("unreachable");',
    check(response) {
      assert.equal(response.status, 'error', JSON.stringify(response));
      assert.equal(response.signal, 'SIGKILL');
      assert.match(response.error!, /killed by SIGKILL/);
    },
  },
  {
    name: 'background and daemonised processes are ended when the program exits',
    python: () => lines(
      'import os, signal, subprocess, time',
      'subprocess.Popen(["sleep", "60"], start_new_session=True)',
      'subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"])',
      // The classic daemon: fork, setsid, fork again, ignore the polite signals, keep writing.
      'if os.fork() == 0:',
      '    os.setsid()',
      '    if os.fork() == 0:',
      '        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):',
      '            signal.signal(s, signal.SIG_IGN)',
      '        while True:',
      '            with open("/tmp/daemon.log", "a") as log:',
      '                log.write("still here\\n")',
      '            time.sleep(0.01)',
      '    os._exit(0)',
      'print("started")',
    ),
    javascript: () => lines(
      'const { spawn } = require("child_process");',
      'spawn("sleep", ["60"], { detached: true, stdio: "ignore" }).unref();',
      'spawn("setsid", ["-f", "sh", "-c", "trap \\"\\" TERM HUP; while :; do echo still here >> /tmp/daemon.log; sleep 0.01; done"], { stdio: "ignore" });',
      'console.log("started");',
    ),
    check: (response) => assertPrinted(response, 'started\n'),
  },
  {
    name: 'a daemon that keeps changing its pid is ended',
    python: () => lines(
      'import os',
      'if os.fork() == 0:',
      '    os.setsid()',
      '    while True:',
      '        if os.fork() != 0:',
      '            os._exit(0)',
      'print("hopping")',
    ),
    javascript: () => lines(
      'require("child_process").spawn("/bin/sh", ["-c", "while :; do sh -c \\"exit 0\\" & done"], { detached: true, stdio: "ignore" }).unref();',
      'console.log("hopping");',
    ),
    check: (response) => assertPrinted(response, 'hopping\n'),
  },
  {
    name: 'filling /tmp and /dev/shm stops at their size',
    python: () => pythonAttempts(FILLS, [
      'with open(target, "wb", buffering=0) as file:',
      '    while True:',
      '        file.write(b"x" * 1048576)',
    ]),
    javascript: () => javascriptAttempts(FILLS,
      'const fd = fs.openSync(target, "w"); const block = Buffer.alloc(1048576, 120); for (;;) fs.writeSync(fd, block)'),
    check(response) {
      assertRefused(response, FILLS.length, ['ENOSPC', 'EFBIG']);
      // The file-size limit stops one file; the directory's size stops the last one.
      const outcomes = response.result!.trimEnd().split('\n');
      assert.match(outcomes[1]!, /^ENOSPC \/tmp\//);
      assert.match(outcomes.at(-1)!, /^ENOSPC \/dev\/shm\//);
    },
  },
  {
    name: 'many files, a deep locked directory tree and odd files are wiped after the run',
    python: () => lines(
      'import os',
      'for i in range(2000):',
      '    open(f"file{i}", "w").close()',
      'os.mkfifo("fifo")',
      'os.symlink("loop", "loop")',
      'os.symlink("/tmp", "/dev/shm/to-tmp")',
      'os.makedirs("locked/inner")',
      'os.chmod("locked/inner", 0)',
      'os.chmod("locked", 0)',
      'for _ in range(3000):',
      '    os.mkdir("d")',
      '    os.chdir("d")',
      'os.chmod(".", 0)',
      'os.chmod("/tmp", 0)',
      'print("made")',
    ),
    javascript: () => lines(
      'const fs = require("fs");',
      'for (let i = 0; i < 2000; i += 1) fs.writeFileSync(`file${i}`, "");',
      'fs.symlinkSync("loop", "loop");',
      'fs.symlinkSync("/tmp", "/dev/shm/to-tmp");',
      'fs.mkdirSync("locked/inner", { recursive: true });',
      'fs.chmodSync("locked/inner", 0);',
      'fs.chmodSync("locked", 0);',
      'for (let i = 0; i < 3000; i += 1) { fs.mkdirSync("d"); process.chdir("d"); }',
      'fs.chmodSync(".", 0);',
      'fs.chmodSync("/tmp", 0);',
      'fs.writeFileSync("/sandbox/main.cjs", "overwritten");',
      'console.log("made");',
    ),
    check: (response) => assertPrinted(response, 'made\n'),
  },
  {
    name: 'opening files stops at the descriptor limit',
    python: () => lines(
      'import errno',
      'files = []',
      'try:',
      '    while True:',
      '        files.append(open("/dev/null"))',
      'except OSError as error:',
      '    print(errno.errorcode[error.errno], len(files))',
    ),
    javascript: () => lines(
      'const fs = require("fs");',
      'let opened = 0;',
      'try { for (;;) { fs.openSync("/dev/null", "r"); opened += 1; } } catch (error) { console.log(error.code, opened); }',
    ),
    check(response, context) {
      assert.equal(response.status, 'success', JSON.stringify(response));
      const [code, opened] = response.result!.trim().split(' ');
      assert.equal(code, 'EMFILE');
      assert.ok(Number(opened) < context.limits.maxOpenFiles, `${opened} files open`);
    },
  },
  FRESH_STATE,
];
