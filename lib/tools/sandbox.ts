import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, lstatSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { delimiter, join } from 'node:path';
import type { Writable } from 'node:stream';
import { MemoryCgroup, OWN_CGROUP_PREFIX } from './cgroup.js';
import { seccompFilter } from './seccomp.js';
import { SUPERVISOR_SOURCE } from './supervisor_source.js';
import type { ToolResponse } from './types.js';
import { checkInteger, checkNonEmptyString, checkOptions, checkString, checkStringArray, rangeError, typeError } from '../check.js';

/**
 * Options shared by {@link PythonSandbox} and {@link JavaScriptSandbox}. Every limit
 * applies to each run separately.
 */
export interface SandboxOptions {
  /** Wall-clock limit of one run, in milliseconds (default 10000). CPU time is limited to
   * the same number of seconds, rounded up, per process. */
  timeoutMs?: number;
  /** Memory limit of each process of a run, in MiB (default 512): its data segment and
   * private writable mappings (RLIMIT_DATA); for Python also its whole address space. */
  memoryMb?: number;
  /** Memory limit of a whole run in MiB: all its processes, plus its files in `/tmp` and
   * `/dev/shm`, which live in memory. Enforced with a memory cgroup where one can be made
   * (root, with the cgroup v1 memory hierarchy or a delegated cgroup v2 memory controller;
   * see {@link CodeSandbox.runMemoryLimited}); elsewhere only the per-process limits hold.
   * Default: memoryMb + diskMb + 144 (16 for /dev/shm, 128 for the supervisor and runtime). */
  runMemoryMb?: number;
  /** Most bytes a run may print, stdout and stderr together (default 65536); a run that
   * prints more is stopped and answered with status 'error' and the output up to the cap. */
  maxOutputBytes?: number;
  /** Runs at once; further calls wait in a FIFO queue (default: the number of CPUs). */
  concurrency?: number;
  /** Size of the private writable directory `/tmp`, in MiB (default 64); also the largest
   * file a run may write. */
  diskMb?: number;
  /** Most processes and threads a run may have at once (default 16 for Python, 32 for
   * JavaScript, whose runtime starts about ten threads). */
  maxProcesses?: number;
  /** Most open file descriptors per process (default 256). */
  maxOpenFiles?: number;
  /** Extra host paths bound read-only at the same place in the sandbox, e.g. the prefix of
   * an interpreter installed outside /usr, or data the programs may read (default none).
   * Not under /tmp, /dev, /proc or /sandbox, which the sandbox mounts itself; when the host
   * process is root they must be readable by uid 65534. */
  readOnlyPaths?: string[];
  /** Path of the bubblewrap executable (default: `bwrap` found on PATH). */
  bwrapPath?: string;
  /** Milliseconds to wait for a new worker to report ready (default 20000). */
  startTimeoutMs?: number;
}

/** Options of {@link PythonSandbox}. */
export interface PythonSandboxOptions extends SandboxOptions {
  /** Python interpreter (default `/usr/bin/python3`, Debian's). It also runs the
   * supervisor, so its prefix must be visible: under /usr, or listed in `readOnlyPaths`. */
  pythonPath?: string;
  /** Modules imported once per worker before any run, so runs that use them start fast
   * (default none), e.g. `['numpy', 'sympy']`. */
  preloadModules?: string[];
}

/** Options of {@link JavaScriptSandbox}. */
export interface JavaScriptSandboxOptions extends SandboxOptions {
  /** Node.js executable that runs the programs (default: the one running this code). */
  nodePath?: string;
  /** Python interpreter that runs the supervisor inside the sandbox (default
   * `/usr/bin/python3`). */
  pythonPath?: string;
  /** How programs are loaded: 'commonjs' (default; `require`, no top-level await) or
   * 'module' (ES module: `import`, top-level await). */
  moduleType?: 'commonjs' | 'module';
}

/** A {@link ToolResponse} with how the sandboxed program ended. */
export interface SandboxResponse extends ToolResponse {
  /** Whether the kernel killed a process of the run for exceeding `runMemoryMb`. */
  outOfMemory?: boolean;
  /** Exit code when the program exited by itself, else null. */
  exitCode: number | null;
  /** Name of the signal that ended the program (e.g. 'SIGKILL'), else null. */
  signal: string | null;
  /** Wall-clock time of the run inside the sandbox, in milliseconds. */
  durationMs: number;
}

/** The sandbox could not be started (bubblewrap or the interpreter is missing, namespaces
 * are refused, …); the message says what to do. */
export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError';
}

/** Largest program accepted, in bytes of UTF-8; larger ones are answered with an error. */
export const MAX_CODE_BYTES = 1 << 20;

const SANDBOX_WORKDIR = '/tmp';
const SANDBOX_SHM = '/dev/shm';
const SANDBOX_CODE_DIR = '/sandbox';
const SANDBOX_MOUNTS = [SANDBOX_WORKDIR, '/dev', '/proc', SANDBOX_CODE_DIR];
const SHM_BYTES = 16 << 20;
const CODE_DIR_BYTES = 2 * MAX_CODE_BYTES + (1 << 20);
/** V8 reserves about 700 MiB of address space before running anything. */
const NODE_ADDRESS_SPACE_SLACK_BYTES = 1024 << 20;
/** Uid the sandbox runs as on the host when this process is root: RLIMIT_NPROC is not
 * enforced for uid 0, and nobody can read root's files even if they were mounted. */
const UNPRIVILEGED_ID = 65534;
/** Extra time the host allows the supervisor beyond the run's own timeout. */
const SUPERVISOR_GRACE_MS = 5000;
const STDERR_KEEP_BYTES = 8192;
/** Descriptor on which bubblewrap reads the seccomp filter. */
const SECCOMP_FD = 3;
/** How long to wait for bubblewrap to exit after its supervisor was killed. */
const KILL_FALLBACK_MS = 2000;

/** Language of the programs a sandbox runs. */
export type SandboxLanguage = 'python' | 'javascript';

interface QueuedRun {
  code: string;
  resolve: (response: SandboxResponse) => void;
  reject: (error: Error) => void;
}

interface SupervisorConfig {
  language: SandboxLanguage;
  command: string[];
  codePath: string;
  workdir: string;
  writableDirs: string[];
  timeoutMs: number;
  cpuSeconds: number;
  memoryBytes: number;
  addressSpaceSlackBytes: number;
  maxOutputBytes: number;
  maxProcesses: number;
  maxFileBytes: number;
  maxOpenFiles: number;
  niceness: number;
  preloadModules: string[];
}

interface SupervisorReply {
  outcome: 'exited' | 'signaled' | 'timeout' | 'output-limit';
  /** Set on the host: the run's memory cgroup saw an OOM kill. */
  outOfMemory?: boolean;
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  durationMs: number;
}

interface ResolvedOptions {
  timeoutMs: number;
  runMemoryMb: number;
  cpuSeconds: number;
  maxOutputBytes: number;
  concurrency: number;
  startTimeoutMs: number;
  bwrapPath: string;
  bwrapArgs: string[];
  /** Compiled seccomp filter handed to bubblewrap on fd 3; undefined on architectures
   * without a system-call table. */
  seccomp: Buffer | undefined;
  spawnIds: { uid: number; gid: number } | undefined;
}

function findOnPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(delimiter)) {
    const candidate = join(dir, command);
    try {
      accessSync(candidate, fsConstants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

function requireExecutable(path: string, what: string, hint: string): string {
  try {
    accessSync(path, fsConstants.X_OK);
  } catch {
    throw new SandboxUnavailableError(`${what} not found or not executable at ${path}; ${hint}`);
  }
  return realpathSync(path);
}

/** The top-level directories of the host's root that an interpreter may need: /usr and the
 * merged-/usr links (/bin -> usr/bin, …), or the directories themselves on older layouts. */
function systemDirectoryArgs(): string[] {
  const args = ['--ro-bind', '/usr', '/usr'];
  for (const dir of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let stats;
    try {
      stats = lstatSync(dir);
    } catch {
      continue;
    }
    if (stats.isSymbolicLink()) args.push('--symlink', readlinkSync(dir), dir);
    else if (stats.isDirectory()) args.push('--ro-bind', dir, dir);
  }
  return args;
}

/** Host pids of the children of `pid` (empty when /proc has no children list). */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function isUnder(path: string, dir: string): boolean {
  return path === dir || path.startsWith(`${dir}/`);
}

/**
 * Pool of sandboxed workers running programs of one language. Use {@link PythonSandbox}
 * or {@link JavaScriptSandbox}.
 *
 * Isolation is done by the operating system through bubblewrap: each worker lives in its
 * own user, PID, network, IPC, UTS and cgroup namespaces, sees only /usr (read-only), a
 * fresh /proc and a minimal /dev, and can write only to size-limited in-memory `/tmp` and
 * `/dev/shm`; the environment is emptied. When the host process is root the worker runs as
 * uid 65534 (nobody). Inside, a supervisor forks one child per run with rlimits on CPU
 * seconds, memory, processes, file size and open files, enforces the wall-clock timeout and
 * the output cap, then kills every process left in the sandbox and empties `/tmp`, so runs
 * do not see each other.
 *
 * A seccomp filter (x86-64 and arm64) refuses ptrace, bpf, perf, userfaultfd, keyrings,
 * io_uring, module loading, mounts and namespace calls.
 *
 * It does NOT protect against: kernel vulnerabilities reachable through the system calls
 * that remain allowed;
 * side channels and timing; reading what any process may read from /proc (kernel version,
 * CPU and memory information, load); CPU contention (a run may keep up to `maxProcesses`
 * processes busy until its timeout, at niceness 10, which orders only the run's own
 * processes where the kernel schedules sessions as groups: autogroup); the memory of a run as a whole where
 * no memory cgroup can be made ({@link CodeSandbox.runMemoryLimited} false: the limit is
 * then per process, so the worst case is `maxProcesses` × `memoryMb` plus the `/tmp` and
 * `/dev/shm` sizes and kernel memory); reading anything under /usr and the
 * `readOnlyPaths` given; and programs that deliberately print misleading output.
 */
export class CodeSandbox {
  readonly #language: SandboxLanguage;
  readonly #toolName: string;
  readonly #options: ResolvedOptions;
  readonly #idle: SandboxWorker[] = [];
  readonly #all = new Set<SandboxWorker>();
  readonly #queue: QueuedRun[] = [];
  readonly #starting = new Set<Promise<SandboxWorker>>();
  #closed = false;

  /** @internal Use {@link PythonSandbox} or {@link JavaScriptSandbox}. */
  protected constructor(language: SandboxLanguage, toolName: string, options: ResolvedOptions) {
    this.#language = language;
    this.#toolName = toolName;
    this.#options = options;
  }

  /** Language of the programs this sandbox runs. */
  get language(): SandboxLanguage {
    return this.#language;
  }

  /** Runs at most this many programs at once. */
  get concurrency(): number {
    return this.#options.concurrency;
  }

  /** Whether a memory cgroup enforces `runMemoryMb` on the running workers (false before
   * any worker has started). */
  get runMemoryLimited(): boolean {
    return [...this.#all].some((worker) => worker.hasMemoryCgroup);
  }

  /** Number of calls waiting for a free worker. */
  get queued(): number {
    return this.#queue.length;
  }

  /**
   * Runs `code` in the sandbox and resolves with how it ended: status 'success' when it
   * exited with code 0 (`result` = its stdout, `error` = its stderr if it wrote any);
   * 'timeout' when it ran past `timeoutMs` or its CPU-time limit; 'error' otherwise
   * (a non-zero exit, an uncaught exception with its traceback in `error`, a signal, too
   * much output). Throws a TypeError when `code` is not a string. Never rejects for the
   * program's behaviour; rejects with
   * {@link SandboxUnavailableError} when a worker cannot be started, and with an Error
   * after {@link close}.
   */
  run(code: string): Promise<SandboxResponse> {
    checkString('code', code);
    if (this.#closed) return Promise.reject(new Error('This sandbox is closed'));
    const codeBytes = Buffer.byteLength(code, 'utf8');
    if (codeBytes > MAX_CODE_BYTES) {
      return Promise.resolve({
        tool: this.#toolName, status: 'error', exitCode: null, signal: null, durationMs: 0,
        error: `The program is ${codeBytes} bytes long; at most ${MAX_CODE_BYTES} bytes are accepted`,
      });
    }
    return new Promise((resolve, reject) => {
      this.#queue.push({ code, resolve, reject });
      this.#dispatch();
    });
  }

  /**
   * Starts workers until `count` (default `concurrency`) are ready, so the first calls do
   * not pay the start-up (about 50 ms per worker). Rejects like {@link run} when a worker
   * cannot be started.
   */
  async warmUp(count: number = this.#options.concurrency): Promise<void> {
    checkInteger('count', count, this.#options.concurrency, 0, this.#options.concurrency);
    const starts: Array<Promise<SandboxWorker>> = [];
    for (let index = this.#all.size + this.#starting.size; index < count; index += 1) starts.push(this.#startWorker());
    const workers = await Promise.all(starts);
    for (const worker of workers) this.#release(worker);
  }

  /**
   * Stops every worker and every process in the sandbox and rejects queued and running
   * calls. Resolves once all worker processes have exited. Idempotent.
   */
  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.reject(new Error('This sandbox was closed before the call ran'));
    // A worker still starting kills itself when it sees the sandbox closed.
    await Promise.allSettled([...this.#starting]);
    await Promise.all([...this.#all].map((worker) => worker.kill()));
    this.#idle.length = 0;
  }

  /** Host pids of the running worker processes (bubblewrap), for monitoring and tests. */
  workerPids(): number[] {
    return [...this.#all].map((worker) => worker.pid).filter((pid): pid is number => pid !== undefined);
  }

  #dispatch(): void {
    while (this.#queue.length > 0) {
      const worker = this.#idle.pop();
      if (worker !== undefined) {
        this.#execute(worker, this.#queue.shift()!);
        continue;
      }
      if (this.#all.size + this.#starting.size >= this.#options.concurrency) return;
      const job = this.#queue.shift()!;
      this.#startWorker().then(
        (started) => this.#execute(started, job),
        (error: Error) => {
          job.reject(error);
          this.#dispatch();
        },
      );
    }
  }

  #startWorker(): Promise<SandboxWorker> {
    const starting = (async () => {
      const worker = await SandboxWorker.start(this.#options);
      if (this.#closed) {
        await worker.kill();
        throw new Error('This sandbox was closed while a worker was starting');
      }
      this.#all.add(worker);
      worker.onExit(() => {
        this.#all.delete(worker);
        const index = this.#idle.indexOf(worker);
        if (index >= 0) this.#idle.splice(index, 1);
        if (!this.#closed) this.#dispatch();
      });
      return worker;
    })();
    this.#starting.add(starting);
    const forget = (): void => {
      this.#starting.delete(starting);
    };
    starting.then(forget, forget);
    return starting;
  }

  #execute(worker: SandboxWorker, job: QueuedRun): void {
    worker.run(job.code, this.#options.timeoutMs + SUPERVISOR_GRACE_MS).then(
      (reply) => {
        job.resolve(this.#toResponse(reply));
        this.#release(worker);
      },
      (failure: Error) => {
        if (this.#closed) job.reject(new Error('This sandbox was closed while the call ran'));
        else job.resolve(this.#workerFailure(failure));
        void worker.kill();
        this.#dispatch();
      },
    );
  }

  #release(worker: SandboxWorker): void {
    if (this.#closed || !worker.alive) {
      void worker.kill();
      return;
    }
    this.#idle.push(worker);
    this.#dispatch();
  }

  #workerFailure(failure: Error): SandboxResponse {
    const timedOut = failure instanceof WorkerTimeoutError;
    return {
      tool: this.#toolName,
      status: timedOut ? 'timeout' : 'error',
      error: timedOut
        ? `Timed out after ${this.#options.timeoutMs} ms; the sandbox worker was stopped`
        : `The sandbox worker ended during the run (${failure.message}); it has been replaced`,
      exitCode: null,
      signal: null,
      durationMs: 0,
    };
  }

  #toResponse(reply: SupervisorReply): SandboxResponse {
    const base = { tool: this.#toolName, exitCode: reply.exitCode, signal: reply.signal, durationMs: reply.durationMs };
    const printed = reply.stdout.length > 0 ? { result: reply.stdout } : {};
    const stderr = reply.stderr;
    const withStderr = (message: string): string => (stderr.length > 0 ? `${stderr}${stderr.endsWith('\n') ? '' : '\n'}${message}` : message);
    if (reply.outOfMemory === true) {
      return {
        ...base, status: 'error', ...printed, outOfMemory: true,
        error: withStderr(`The run exceeded its memory limit of ${this.#options.runMemoryMb} MiB; the kernel killed a process`),
      };
    }
    switch (reply.outcome) {
      case 'exited':
        if (reply.exitCode === 0) return { ...base, status: 'success', result: reply.stdout, ...(stderr.length > 0 ? { error: stderr } : {}) };
        return { ...base, status: 'error', ...printed, error: stderr.length > 0 ? stderr : `The program exited with code ${reply.exitCode}` };
      case 'signaled':
        if (reply.signal === 'SIGXCPU') {
          return { ...base, status: 'timeout', ...printed, error: withStderr(`CPU time limit of ${this.#options.cpuSeconds} s exceeded`) };
        }
        return { ...base, status: 'error', ...printed, error: withStderr(`The program was killed by ${reply.signal}`) };
      case 'timeout':
        return { ...base, status: 'timeout', ...printed, error: withStderr(`Timed out after ${this.#options.timeoutMs} ms`) };
      case 'output-limit':
        return {
          ...base, status: 'error', ...printed,
          error: withStderr(`Output exceeded ${this.#options.maxOutputBytes} bytes; the program was stopped`),
        };
    }
  }

  /** @internal Checks and resolves the options shared by both languages. */
  protected static resolveOptions(
    raw: SandboxOptions | undefined,
    language: SandboxLanguage,
    interpreter: { pythonPath: string; nodePath?: string; moduleType?: 'commonjs' | 'module'; preloadModules: string[] },
  ): ResolvedOptions {
    const options = checkOptions('options', raw);
    const timeoutMs = checkInteger('options.timeoutMs', options.timeoutMs, 10_000, 1, 3_600_000);
    const memoryMb = checkInteger('options.memoryMb', options.memoryMb, 512, 16, 1 << 20);
    const maxOutputBytes = checkInteger('options.maxOutputBytes', options.maxOutputBytes, 65_536, 1, 1 << 30);
    const concurrency = checkInteger('options.concurrency', options.concurrency, availableParallelism(), 1, 1024);
    const diskMb = checkInteger('options.diskMb', options.diskMb, 64, 1, 1 << 20);
    const runMemoryMb = checkInteger('options.runMemoryMb', options.runMemoryMb, memoryMb + diskMb + 144, 16, 1 << 20);
    const maxProcesses = checkInteger('options.maxProcesses', options.maxProcesses, language === 'python' ? 16 : 32, 2, 4096);
    const maxOpenFiles = checkInteger('options.maxOpenFiles', options.maxOpenFiles, 256, 16, 65_536);
    const startTimeoutMs = checkInteger('options.startTimeoutMs', options.startTimeoutMs, 20_000, 1, 600_000);
    const readOnlyPaths = checkStringArray('options.readOnlyPaths', options.readOnlyPaths, []);
    for (const [index, path] of readOnlyPaths.entries()) {
      if (!path.startsWith('/')) throw typeError(`options.readOnlyPaths[${index}]`, 'an absolute path', path);
      // The sandbox mounts its own file systems there, which would hide or break the bind.
      if (path === '/' || SANDBOX_MOUNTS.some((mount) => isUnder(path, mount))) {
        throw rangeError(`options.readOnlyPaths[${index}]`, `a path outside / itself and ${SANDBOX_MOUNTS.join(', ')}`, path);
      }
    }
    const bwrapPath = options.bwrapPath === undefined
      ? findOnPath('bwrap')
      : checkNonEmptyString('options.bwrapPath', options.bwrapPath);
    if (bwrapPath === undefined) {
      throw new SandboxUnavailableError('bubblewrap (bwrap) was not found on PATH; install it, e.g. `apt-get install bubblewrap`');
    }
    requireExecutable(bwrapPath, 'bubblewrap (bwrap)', 'install it, e.g. `apt-get install bubblewrap`');
    const python = requireExecutable(interpreter.pythonPath, 'The Python interpreter', 'install Debian\'s python3 or set options.pythonPath');

    const bwrapArgs = [
      '--unshare-all', '--unshare-user', '--disable-userns', '--cap-drop', 'ALL',
      '--die-with-parent', '--new-session', '--as-pid-1', '--hostname', 'sandbox',
      ...systemDirectoryArgs(),
    ];
    for (const path of readOnlyPaths) bwrapArgs.push('--ro-bind', path, path);
    if (!isUnder(python, '/usr') && !readOnlyPaths.some((path) => isUnder(python, path))) {
      throw new SandboxUnavailableError(
        `The Python interpreter ${python} is outside /usr; add its installation prefix to options.readOnlyPaths or use /usr/bin/python3`,
      );
    }
    let command: string[] = [];
    if (language === 'javascript') {
      let node = requireExecutable(interpreter.nodePath!, 'Node.js', 'set options.nodePath');
      if (!isUnder(node, '/usr') && !readOnlyPaths.some((path) => isUnder(node, path))) {
        // A Node.js build is one self-contained executable besides the C libraries in /usr.
        bwrapArgs.push('--ro-bind', node, '/opt/node/bin/node');
        node = '/opt/node/bin/node';
      }
      command = [node, `--max-old-space-size=${memoryMb}`];
    }
    bwrapArgs.push(
      '--proc', '/proc', '--dev', '/dev',
      '--size', String(SHM_BYTES), '--tmpfs', SANDBOX_SHM,
      '--size', String(diskMb * 1048576), '--tmpfs', SANDBOX_WORKDIR,
    );
    const writableDirs = [SANDBOX_WORKDIR, SANDBOX_SHM];
    if (language === 'javascript') {
      bwrapArgs.push('--size', String(CODE_DIR_BYTES), '--tmpfs', SANDBOX_CODE_DIR);
      writableDirs.push(SANDBOX_CODE_DIR);
    }
    bwrapArgs.push(
      '--remount-ro', '/dev',
      '--remount-ro', '/',
      '--chdir', SANDBOX_WORKDIR,
      '--clearenv',
      '--setenv', 'PATH', '/usr/local/bin:/usr/bin:/bin',
      '--setenv', 'HOME', SANDBOX_WORKDIR,
      '--setenv', 'TMPDIR', SANDBOX_WORKDIR,
      '--setenv', 'LANG', 'C.UTF-8',
    );
    // Per process, summed over its threads; above the wall-clock limit so that one busy
    // thread meets the timeout first.
    const cpuSeconds = Math.ceil(timeoutMs / 1000) + 1;
    const config: SupervisorConfig = {
      language,
      command,
      codePath: `${SANDBOX_CODE_DIR}/${interpreter.moduleType === 'module' ? 'main.mjs' : 'main.cjs'}`,
      workdir: SANDBOX_WORKDIR,
      writableDirs,
      timeoutMs,
      cpuSeconds,
      memoryBytes: memoryMb * 1048576,
      addressSpaceSlackBytes: language === 'javascript' ? NODE_ADDRESS_SPACE_SLACK_BYTES : 0,
      maxOutputBytes,
      maxProcesses,
      maxFileBytes: diskMb * 1048576,
      maxOpenFiles,
      niceness: 10,
      preloadModules: interpreter.preloadModules,
    };
    const seccomp = seccompFilter();
    if (seccomp !== undefined) bwrapArgs.push('--seccomp', String(SECCOMP_FD));
    bwrapArgs.push('--', python, '-I', '-c', SUPERVISOR_SOURCE, JSON.stringify(config));
    const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
    return {
      timeoutMs,
      runMemoryMb,
      cpuSeconds,
      maxOutputBytes,
      concurrency,
      startTimeoutMs,
      bwrapPath,
      bwrapArgs,
      seccomp,
      spawnIds: isRoot ? { uid: UNPRIVILEGED_ID, gid: UNPRIVILEGED_ID } : undefined,
    };
  }
}

/** Runs model-written Python 3 programs in a pool of bubblewrap sandboxes; see
 * {@link CodeSandbox} for what is isolated and what is not. A warm run costs a fork of
 * the worker's interpreter: a few milliseconds. */
export class PythonSandbox extends CodeSandbox {
  /**
   * @param options limits and paths; see {@link PythonSandboxOptions}. Throws
   * TypeError/RangeError for bad options and {@link SandboxUnavailableError} when
   * bubblewrap or the interpreter is missing. Workers start on first use (or
   * {@link CodeSandbox.warmUp}).
   */
  constructor(options?: PythonSandboxOptions) {
    const checked = checkOptions('options', options);
    const pythonPath = checked.pythonPath === undefined ? '/usr/bin/python3' : checkNonEmptyString('options.pythonPath', checked.pythonPath);
    const preloadModules = checkStringArray('options.preloadModules', checked.preloadModules, []);
    super('python', 'python', CodeSandbox.resolveOptions(options, 'python', { pythonPath, preloadModules }));
  }
}

/** Runs model-written JavaScript (Node.js; CommonJS or ES modules) in a pool of bubblewrap sandboxes;
 * see {@link CodeSandbox} for what is isolated and what is not. Each run starts a fresh
 * `node` inside an already running sandbox: about 40 ms. */
export class JavaScriptSandbox extends CodeSandbox {
  /**
   * @param options limits and paths; see {@link JavaScriptSandboxOptions}. Throws like
   * {@link PythonSandbox}'s constructor.
   */
  constructor(options?: JavaScriptSandboxOptions) {
    const checked = checkOptions('options', options);
    const pythonPath = checked.pythonPath === undefined ? '/usr/bin/python3' : checkNonEmptyString('options.pythonPath', checked.pythonPath);
    const nodePath = checked.nodePath === undefined ? process.execPath : checkNonEmptyString('options.nodePath', checked.nodePath);
    const moduleType = checked.moduleType ?? 'commonjs';
    if (moduleType !== 'commonjs' && moduleType !== 'module') {
      throw typeError('options.moduleType', "'commonjs' or 'module'", moduleType);
    }
    super('javascript', 'javascript', CodeSandbox.resolveOptions(options, 'javascript', { pythonPath, nodePath, moduleType, preloadModules: [] }));
    this.moduleType = moduleType;
  }

  /** How programs are loaded: 'commonjs' or 'module'. */
  readonly moduleType: 'commonjs' | 'module';
}

class WorkerTimeoutError extends Error {}

/** One bubblewrap process with its supervisor, speaking length-prefixed JSON frames. */
class SandboxWorker {
  static #created = 0;
  readonly #child: ChildProcess;
  #buffer: Buffer = Buffer.alloc(0);
  #stderr = '';
  #pending: { resolve: (message: Record<string, unknown>) => void; reject: (error: Error) => void } | undefined;
  #exited: Promise<void>;
  #exitListeners: Array<() => void> = [];
  #alive = true;
  #exitDescription = '';
  #cgroup: MemoryCgroup | undefined;
  #oomKillsBefore = 0;

  private constructor(options: ResolvedOptions) {
    this.#child = spawn(options.bwrapPath, options.bwrapArgs, {
      cwd: '/',
      env: {},
      stdio: ['pipe', 'pipe', 'pipe', options.seccomp === undefined ? 'ignore' : 'pipe'],
      ...(options.spawnIds ?? {}),
    });
    if (options.seccomp !== undefined) {
      const filterPipe = this.#child.stdio[SECCOMP_FD] as Writable;
      filterPipe.on('error', () => {}); // bubblewrap failed early; 'close' reports it
      filterPipe.end(options.seccomp);
    }
    this.#exited = new Promise((resolve) => {
      this.#child.once('close', (code, signal) => {
        this.#alive = false;
        this.#exitDescription = signal !== null ? `killed by ${signal}` : `exit code ${code}`;
        if (this.#cgroup !== undefined && this.#cgroup.oomKills() > this.#oomKillsBefore) {
          this.#exitDescription += `, out of memory: the run exceeded its memory limit of ${options.runMemoryMb} MiB`;
        }
        const cgroupRemoved = this.#cgroup?.remove();
        const detail = this.#stderr.trim();
        this.#fail(new Error(`${this.#exitDescription}${detail ? `: ${detail}` : ''}`));
        for (const listener of this.#exitListeners) listener();
        // kill() and close() resolve once the cgroup is gone too, so they leave nothing behind.
        void Promise.resolve(cgroupRemoved).then(() => resolve());
      });
    });
    this.#child.once('error', (error: NodeJS.ErrnoException) => {
      this.#alive = false;
      // 'close' follows and tells the pool.
      this.#fail(new SandboxUnavailableError(`Could not start bubblewrap at ${options.bwrapPath}: ${error.message}`));
    });
    this.#child.stdout!.on('data', (chunk: Buffer) => this.#onData(chunk));
    this.#child.stderr!.on('data', (chunk: Buffer) => {
      this.#stderr = (this.#stderr + chunk.toString('utf8')).slice(-STDERR_KEEP_BYTES);
    });
    // A write to a worker that just died raises EPIPE here; the close handler reports it.
    this.#child.stdin!.on('error', () => {});
  }

  /** Starts a worker and waits for its supervisor's ready frame. */
  static async start(options: ResolvedOptions): Promise<SandboxWorker> {
    const worker = new SandboxWorker(options);
    try {
      await worker.#request(undefined, options.startTimeoutMs);
      worker.#joinMemoryCgroup(options.runMemoryMb);
    } catch (error) {
      await worker.kill();
      const reason = error instanceof Error ? error.message : String(error);
      if (error instanceof SandboxUnavailableError) throw error;
      let hint = '';
      if (/namespace|Operation not permitted|No permissions/i.test(reason)) {
        hint = '. bubblewrap needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)';
      } else if (/Can't find source path/.test(reason) && options.spawnIds !== undefined) {
        hint = `. Running as root, the sandbox runs as uid ${options.spawnIds.uid}: every path bound into it must be readable by that user`;
      }
      throw new SandboxUnavailableError(`The sandbox worker did not start (${reason})${hint}`);
    }
    return worker;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get hasMemoryCgroup(): boolean {
    return this.#cgroup !== undefined;
  }

  /** Puts bubblewrap and the supervisor in a fresh memory cgroup, if one can be made; the
   * processes of every run, forked by the supervisor later, are then born in it. */
  #joinMemoryCgroup(runMemoryMb: number): void {
    const pid = this.#child.pid!;
    const cgroup = MemoryCgroup.create(`${OWN_CGROUP_PREFIX}${SandboxWorker.#created += 1}`, runMemoryMb * 1048576);
    if (cgroup === undefined) return;
    try {
      cgroup.addProcess(pid);
      for (const supervisor of childrenOf(pid)) cgroup.addProcess(supervisor);
      this.#cgroup = cgroup;
    } catch {
      void cgroup.remove();
    }
  }

  get alive(): boolean {
    return this.#alive;
  }

  onExit(listener: () => void): void {
    this.#exitListeners.push(listener);
  }

  /** Sends one program; resolves with the supervisor's reply. */
  async run(code: string, timeoutMs: number): Promise<SupervisorReply> {
    this.#oomKillsBefore = this.#cgroup?.oomKills() ?? 0;
    const reply = (await this.#request({ code }, timeoutMs)) as unknown as SupervisorReply;
    if (this.#cgroup !== undefined && this.#cgroup.oomKills() > this.#oomKillsBefore) reply.outOfMemory = true;
    return reply;
  }

  /**
   * Kills the supervisor, the init of the worker's PID namespace, so the kernel kills every
   * process of the namespace and bubblewrap reaps them and exits; bubblewrap itself is
   * killed only if that fails (killing it first would leave the supervisor for the host's
   * init to reap). Resolves when bubblewrap has exited.
   */
  async kill(): Promise<void> {
    const pid = this.#child.pid;
    if (pid === undefined) return;
    if (this.#alive) {
      const supervisors = childrenOf(pid);
      for (const supervisor of supervisors) {
        try {
          process.kill(supervisor, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      const fallback = setTimeout(() => this.#child.kill('SIGKILL'), supervisors.length > 0 ? KILL_FALLBACK_MS : 0);
      await this.#exited;
      clearTimeout(fallback);
    }
    await this.#exited;
  }

  #request(message: Record<string, unknown> | undefined, timeoutMs: number): Promise<Record<string, unknown>> {
    if (this.#pending !== undefined) throw new Error('A sandbox worker runs one program at a time');
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#fail(new WorkerTimeoutError(`no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending = {
        resolve: (reply) => {
          clearTimeout(timer);
          resolve(reply);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      if (!this.#alive) {
        this.#fail(new Error(this.#exitDescription || 'the worker is not running'));
        return;
      }
      if (message !== undefined) {
        const body = Buffer.from(JSON.stringify(message), 'utf8');
        const header = Buffer.alloc(4);
        header.writeUInt32BE(body.length);
        this.#child.stdin!.write(Buffer.concat([header, body]));
      }
    });
  }

  #fail(error: Error): void {
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.reject(error);
  }

  #onData(chunk: Buffer): void {
    this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
    while (this.#buffer.length >= 4) {
      const length = this.#buffer.readUInt32BE(0);
      if (this.#buffer.length < 4 + length) return;
      const body = this.#buffer.subarray(4, 4 + length);
      this.#buffer = this.#buffer.subarray(4 + length);
      const pending = this.#pending;
      this.#pending = undefined;
      if (pending === undefined) {
        // Only the supervisor writes here, and only in answer to a request.
        void this.kill();
        return;
      }
      try {
        pending.resolve(JSON.parse(body.toString('utf8')) as Record<string, unknown>);
      } catch (error) {
        pending.reject(error instanceof Error ? error : new Error(String(error)));
      }
    }
  }
}
