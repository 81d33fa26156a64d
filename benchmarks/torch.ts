/**
 * The PyTorch peer: `peers/torch_peers.py` run by Debian's `/usr/bin/python3` as a
 * co-process, so that its samples interleave with ours in the same run. It receives the
 * case list as JSON on its first stdin line, then one JSON command per line (setup, sample,
 * drop) and answers each with one JSON line; it times its calls itself.
 *
 * jemalloc is preloaded when Debian's libjemalloc2 is installed: PyTorch allocates fresh
 * tensors on every call, and with glibc's malloc each large one is a fresh mmap whose pages
 * fault in at ~11 µs per 4 KiB on these virtual machines; jemalloc with decay disabled keeps
 * the pages mapped and reuses them (the caching that PyTorch's CUDA allocator does on GPUs).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { pythonId, type BenchCase, type Sample, type TorchRunner } from './harness.js';

const PYTHON = process.env.TIRL_BENCH_PYTHON ?? '/usr/bin/python3';
const JEMALLOC_DIRS = [
  '/usr/lib/x86_64-linux-gnu',
  '/usr/lib/aarch64-linux-gnu',
  '/usr/lib64',
  '/usr/lib',
];
/** Decay off: freed pages stay mapped and are reused without faulting again. */
const JEMALLOC_CONF = 'dirty_decay_ms:-1,muzzy_decay_ms:-1';

/** The script sits beside this file's source: benchmarks/peers/ in the package root. */
function scriptPath(): string {
  return fileURLToPath(new URL('../../benchmarks/peers/torch_peers.py', import.meta.url));
}

function findJemalloc(): string | undefined {
  for (const dir of JEMALLOC_DIRS) {
    const path = `${dir}/libjemalloc.so.2`;
    if (existsSync(path)) return path;
  }
  return undefined;
}

interface Reply {
  error?: string;
  ready?: boolean;
  torch?: string;
  threads?: number;
  seconds?: number;
  cpuSeconds?: number;
  sweptBytes?: number;
}

class TorchProcess implements TorchRunner {
  version = '';
  allocator: string;
  private readonly replies: ((reply: Reply) => void)[] = [];
  private readonly stderr: string[] = [];
  private exited: string | undefined;

  constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    allocator: string,
  ) {
    this.allocator = allocator;
    createInterface({ input: child.stdout }).on('line', (line) => {
      const resolve = this.replies.shift();
      if (resolve) resolve(JSON.parse(line) as Reply);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderr.push(chunk.toString());
      if (this.stderr.length > 20) this.stderr.shift();
    });
    child.on('exit', (code, signal) => {
      this.exited = `the Python process exited (${signal ?? code}): ${this.stderr.join('').trim().slice(-500)}`;
      for (const resolve of this.replies.splice(0)) resolve({ error: this.exited });
    });
    child.stdin.on('error', () => {}); // a dead co-process is reported through 'exit'
  }

  request(message: object): Promise<Reply> {
    if (this.exited) return Promise.resolve({ error: this.exited });
    return new Promise((resolve) => {
      this.replies.push(resolve);
      this.child.stdin.write(JSON.stringify(message) + '\n');
    });
  }

  async setup(benchCase: BenchCase): Promise<string | undefined> {
    const reply = await this.request({ cmd: 'setup', id: benchCase.id });
    return reply.error;
  }

  async sample(id: string, inner: number, evict = false): Promise<Sample> {
    const reply = await this.request({ cmd: 'sample', id, inner, ...(evict ? { evict: true } : {}) });
    if (reply.error !== undefined || reply.seconds === undefined || reply.cpuSeconds === undefined) {
      throw new Error(`bench: PyTorch failed on ${id}: ${reply.error ?? 'no timing'}`);
    }
    return { wall: reply.seconds, cpu: reply.cpuSeconds, ...(reply.sweptBytes !== undefined ? { sweptBytes: reply.sweptBytes } : {}) };
  }

  async drop(id: string): Promise<void> {
    await this.request({ cmd: 'drop', id });
  }

  close(): void {
    this.child.stdin.end();
  }
}

export interface TorchStart {
  runner?: TorchProcess;
  /** Why PyTorch is not measured, when it is not. */
  reason?: string;
  /** How it was run (interpreter, allocator, threads), for the report. */
  description: string;
}

/**
 * Starts the co-process for `cases` at `threads` threads, or says why it cannot. `sweep`:
 * the bytes and threads of the co-process's own cache sweep (a sample with `evict` reads
 * them before its timed call), the same as this process's (benchmarks/cache.ts).
 */
export async function startTorch(cases: BenchCase[], threads: number, sweep?: { bytes: number; threads: number }): Promise<TorchStart> {
  const withTorch = cases.filter((c) => c.torch !== undefined);
  if (!existsSync(PYTHON)) {
    return { reason: `${PYTHON} not found (apt-get install -y python3-torch libjemalloc2)`, description: 'not run' };
  }
  const jemalloc = findJemalloc();
  const allocator = jemalloc
    ? `jemalloc (${jemalloc}, MALLOC_CONF=${JEMALLOC_CONF})`
    : "glibc malloc (libjemalloc2 not installed: PyTorch's fresh tensors page-fault)";
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    OMP_NUM_THREADS: String(threads),
    MKL_NUM_THREADS: String(threads),
    // Idle OpenMP threads sleep instead of spinning, as our thread pool's do. On a shared
    // machine a spinning thread steals the core its partner needs: PyTorch's ppoLoss went
    // from 41 ms to 1.36 s with the default policy on our loaded 2-core VM.
    OMP_WAIT_POLICY: process.env.OMP_WAIT_POLICY ?? 'PASSIVE',
  };
  if (jemalloc) {
    env.LD_PRELOAD = jemalloc;
    env.MALLOC_CONF = JEMALLOC_CONF;
  }
  const child = spawn(PYTHON, [scriptPath(), '--serve'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const runner = new TorchProcess(child, allocator);
  const hello = await runner.request({
    threads,
    ...(sweep ? { sweep } : {}),
    cases: withTorch.flatMap((c) => [
      { id: c.id, op: c.torch!.op, params: c.torch!.params },
      ...(c.python ? [{ id: pythonId(c), op: c.python.op, params: c.python.params }] : []),
    ]),
  });
  if (!hello.ready) {
    runner.close();
    const reason = hello.error ?? 'the Python peer did not start';
    return { reason, description: 'not run' };
  }
  runner.version = hello.torch ?? '?';
  return {
    runner,
    description: `PyTorch ${runner.version} (${PYTHON}), ${hello.threads} threads, OMP_WAIT_POLICY=${env.OMP_WAIT_POLICY}, ${allocator}`,
  };
}
