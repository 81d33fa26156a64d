/**
 * Concurrency: worker threads and async calls using the native core at once, JavaScript
 * changing or transferring what an async call uses while its kernel runs, and worker
 * threads that go away mid-call. Every op, on seeded inputs (test/concurrency_worker.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Worker } from 'node:worker_threads';

import { info, setThreads } from '../lib/info.js';
import { ppoLoss, ppoLossAsync, tokenLogprobs, tokenLogprobsAsync } from '../lib/kernels/index.js';
import { native } from '../lib/native.js';
import { compareRounds, isHostArray, mismatches, opCalls, resultBytes, type HostArray, type Job, type OpCall } from './concurrency_worker.js';

const SEED = 9;
const calls = opCalls(SEED);

function startWorker(job: Job): Worker {
  return new Worker(new URL('./concurrency_worker.js', import.meta.url), { workerData: { job } });
}

function firstMessage<T>(worker: Worker): Promise<T> {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`worker exited (${code}) before reporting`)));
  });
}

/** Every op's result, single-threaded: what every other run must match bitwise. */
function singleThreadedReference(): Uint8Array[][] {
  const threads = info().threads;
  setThreads(1);
  try {
    return calls.map((c) => resultBytes(c.sync(c.options)));
  } finally {
    setThreads(threads);
  }
}
const reference = singleThreadedReference();

/** The options of `call` with a private copy of each array, and those copies. */
function ownCopy(call: OpCall): { options: Record<string, unknown>; arrays: HostArray[] } {
  const options: Record<string, unknown> = {};
  const arrays: HostArray[] = [];
  for (const [key, value] of Object.entries(call.options)) {
    options[key] = isHostArray(value) ? value.slice() : value;
    if (isHostArray(options[key])) arrays.push(options[key] as HostArray);
  }
  return { options, arrays };
}

function scribble(array: HostArray): void {
  new Uint8Array(array.buffer, array.byteOffset, array.byteLength).fill(0xff);
}

/** Zeroed arrays shaped like `result`'s arrays: an `out` for the op. */
function outLike(result: unknown): unknown {
  const fresh = (a: HostArray) => new (a.constructor as new (n: number) => HostArray)(a.length);
  if (isHostArray(result)) return fresh(result);
  return Object.fromEntries(Object.entries(result as object).filter(([, v]) => isHostArray(v)).map(([k, v]) => [k, fresh(v)]));
}
const outArrays = (out: unknown): HostArray[] => (isHostArray(out) ? [out] : (Object.values(out as object) as HostArray[]));

describe('concurrency', () => {
  it('8 worker threads calling every op at once, sync and async, match a single-threaded run bitwise', async () => {
    const workers = Array.from({ length: 8 }, () => startWorker({ kind: 'compare', seed: SEED, rounds: 2, reference }));
    const reports = await Promise.all([compareRounds(SEED, 2, reference), ...workers.map((w) => firstMessage<string[]>(w))]);
    assert.deepEqual(reports.flat(), []);
  });

  it('changing the thread count while calls run changes no result', async () => {
    const threads = info().threads;
    let running = true;
    const toggling = (async () => {
      for (let i = 0; running; i++) {
        setThreads([1, 2, 3, 5, 8][i % 5]!);
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    })();
    try {
      const workers = Array.from({ length: 4 }, () => startWorker({ kind: 'compare', seed: SEED, rounds: 2, reference }));
      const reports = await Promise.all([compareRounds(SEED, 2, reference), ...workers.map((w) => firstMessage<string[]>(w))]);
      assert.deepEqual(reports.flat(), []);
    } finally {
      running = false;
      await toggling;
      setThreads(threads);
    }
  });

  it('an async call computes from its inputs as they were when it was made, whatever JavaScript does to them meanwhile', async () => {
    const sink = startWorker({ kind: 'sink' });
    const disturbances: Record<string, (arrays: HostArray[]) => void> = {
      overwritten: (arrays) => arrays.forEach(scribble),
      'transferred by structuredClone': (arrays) => {
        const buffers = [...new Set(arrays.map((a) => a.buffer as ArrayBuffer))];
        structuredClone(buffers, { transfer: buffers });
      },
      'transferred to a worker that drops them': (arrays) => {
        const buffers = [...new Set(arrays.map((a) => a.buffer as ArrayBuffer))];
        sink.postMessage(buffers, buffers);
      },
    };
    type Transferable = ArrayBuffer & { transfer?: () => ArrayBuffer };
    if (typeof (ArrayBuffer.prototype as Transferable).transfer === 'function') {
      // ES2024 (Node 22+): the memory moves to a new buffer, dropped at once.
      disturbances['transferred by ArrayBuffer.prototype.transfer'] = (arrays) => {
        new Set(arrays.map((a) => a.buffer as Transferable)).forEach((b) => b.transfer!());
      };
    }
    try {
      for (const [how, disturb] of Object.entries(disturbances)) {
        for (const [i, call] of calls.entries()) {
          const { options, arrays } = ownCopy(call);
          const pending = call.async(options);
          disturb(arrays);
          assert.ok(arrays.every((a) => how === 'overwritten' || a.byteLength === 0), `${call.name}: inputs ${how}`);
          assert.deepEqual(mismatches([call], [await pending], [reference[i]!]), [], `${call.name}, inputs ${how}`);
        }
      }
    } finally {
      await sink.terminate();
    }
  });

  it("an async call writes a caller's out when it settles, and rejects if out was detached meanwhile", async () => {
    for (const [i, call] of calls.entries()) {
      const out = outLike(call.sync(call.options));
      const pending = call.async({ ...call.options, out });
      outArrays(out).forEach(scribble); // the result is copied in when the call settles
      const result = await pending;
      assert.deepEqual(mismatches([call], [result], [reference[i]!]), [], call.name);
      if (isHostArray(out)) assert.equal(result, out, `${call.name}: the result is out`);
      else for (const [k, a] of Object.entries(out as object)) assert.equal((result as Record<string, unknown>)[k], a, `${call.name}: out.${k}`);

      const detachedOut = outLike(result);
      const rejected = call.async({ ...call.options, out: detachedOut });
      const first = outArrays(detachedOut)[0]!;
      structuredClone(first.buffer, { transfer: [first.buffer as ArrayBuffer] });
      await assert.rejects(rejected, (e: Error) => e instanceof TypeError && /for out\b|for out\./.test(e.message) && /detached/.test(e.message), call.name);
    }
  });

  it('index arrays another thread keeps changing (SharedArrayBuffer) never make a kernel read out of bounds, sync or async', async () => {
    const shared = <T extends Int32Array | Uint8Array>(a: T): T => {
      const copy = new (a.constructor as new (b: SharedArrayBuffer) => T)(new SharedArrayBuffer(a.byteLength));
      copy.set(a);
      return copy;
    };
    const indexNames = ['seqOffsets', 'groupIds', 'labels', 'roles'];
    const racing = calls
      .filter((c) => indexNames.some((k) => k in c.options))
      .map((c) => ({ ...c, options: Object.fromEntries(Object.entries(c.options).map(([k, v]) => [k, indexNames.includes(k) ? shared(v as Int32Array) : v])) }));
    const arrays = new Set<Int32Array>();
    const bytes = new Set<Uint8Array>();
    for (const c of racing) {
      for (const k of indexNames) {
        const v = c.options[k];
        if (v instanceof Int32Array) arrays.add(v);
        else if (v instanceof Uint8Array) bytes.add(v);
      }
    }
    const stop = new Int32Array(new SharedArrayBuffer(4));
    const scribbler = startWorker({ kind: 'scribble', arrays: [...arrays], bytes: [...bytes], stop });
    assert.equal(await firstMessage(scribbler), 'running');
    const outcomes = { ok: 0, rangeError: 0 };
    const count = (e: unknown): void => {
      assert.ok(e instanceof RangeError, `only a RangeError may come of a racing index: ${String(e)}`);
      outcomes.rangeError++;
    };
    try {
      for (let round = 0; round < 40; round++) {
        for (const c of racing) {
          try {
            c.sync(c.options);
            outcomes.ok++;
          } catch (e) {
            count(e);
          }
        }
        await Promise.all(racing.map((c) => c.async(c.options).then(() => void outcomes.ok++, count)));
      }
    } finally {
      Atomics.store(stop, 0, 1);
      await firstMessage(scribbler);
    }
    assert.equal(outcomes.ok + outcomes.rangeError, 40 * 2 * racing.length);
  });

  it('a small async call, run at once, keeps every async guarantee', async () => {
    // 1,000 ppoLoss tokens (13 KB) and 4 x 512 logits (8 KB), each checked against the sync
    // call, bitwise.
    const n = 1000;
    const logp = new Float32Array(n).map((_, i) => -1 - (i % 13) * 0.2);
    const small = {
      logp,
      oldLogp: logp.map((x, i) => x + ((i % 7) - 3) * 0.05),
      advantages: new Float32Array(n).map((_, i) => ((i % 9) - 4) / 4),
      mask: new Uint8Array(n).map((_, i) => (i % 5 === 0 ? 0 : 1)),
      clipLow: 0.2,
    };
    const want = ppoLoss(small);
    const inputs = { ...small, logp: Float32Array.from(logp) };
    const grad = new Float32Array(n);
    const pending = ppoLossAsync({ ...inputs, out: { grad } });
    assert.ok(grad.every((g) => g === 0), 'out is untouched until the call settles');
    inputs.logp.fill(0); // the call computes from its inputs as they were
    grad.fill(7); // and the result is copied into out when it settles
    const got = await pending;
    assert.equal(got.grad, grad);
    assert.deepEqual({ ...got, grad: [...got.grad] }, { ...want, grad: [...want.grad] });

    const detachedGrad = new Float32Array(n);
    const rejected = ppoLossAsync({ ...small, out: { grad: detachedGrad } });
    structuredClone(detachedGrad.buffer, { transfer: [detachedGrad.buffer] });
    await assert.rejects(rejected, /^TypeError: ppoLoss: Expected a Float32Array of length 1000 for out\.grad but received one whose buffer was detached before the call settled$/);
    await assert.rejects(ppoLossAsync({ ...small, clipLow: 2 }), /^RangeError: ppoLoss: Expected a number in \[0, 1\) for clipLow but received 2$/);

    // 13 KB of arrays: the kernel runs when the call is made and the Promise settles at the
    // next microtasks, before the event loop turns; a call of more than 64 KiB (20,000
    // tokens: 340 KB) goes through the thread pool, which only a turn of the loop settles.
    const settledWithinMicrotasks = async (call: Promise<unknown>): Promise<boolean> => {
      let settled = false;
      const done = call.then(() => void (settled = true));
      for (let i = 0; i < 5 && !settled; i++) await null;
      const within = settled;
      await done;
      return within;
    };
    assert.equal(await settledWithinMicrotasks(ppoLossAsync(small)), true, 'a small call runs at once');
    const many = 20_000;
    const large = {
      logp: new Float32Array(many).fill(-1),
      oldLogp: new Float32Array(many).fill(-1.1),
      advantages: new Float32Array(many).fill(0.5),
      mask: new Uint8Array(many).fill(1),
    };
    assert.equal(await settledWithinMicrotasks(ppoLossAsync(large)), false, 'a large call goes through the pool');

    const logits = new Float32Array(4 * 512).map((_, i) => Math.sin(i));
    const labels = Int32Array.from([0, 511, 7, 300]);
    const transferred = Float32Array.from(logits);
    const tokens = tokenLogprobsAsync({ logits: transferred, vocabSize: 512, labels, withEntropy: true });
    structuredClone(transferred.buffer, { transfer: [transferred.buffer] });
    const sync = tokenLogprobs({ logits, vocabSize: 512, labels, withEntropy: true });
    const async = await tokens;
    assert.deepEqual([...async.logp], [...sync.logp]);
    assert.deepEqual([...async.entropy!], [...sync.entropy!]);
  });

  it('an async form reports bad arguments as a rejected Promise, never a throw, and keeps what it uses in place alive', async () => {
    const bad: [string, () => Promise<unknown>, RegExp][] = [
      ['no options', () => ppoLossAsync(null as never), /^TypeError: ppoLoss: Expected an options object for the first argument but received null$/],
      ['a missing array', () => ppoLossAsync({ logp: new Float32Array(2) } as never), /^TypeError: ppoLoss: .*oldLogp/],
      ['a wrong length', () => tokenLogprobsAsync({ logits: new Float32Array(6), vocabSize: 4, labels: Int32Array.from([0]) }), /^RangeError: tokenLogprobs: /],
    ];
    for (const [label, call, message] of bad) {
      let pending: Promise<unknown> | undefined;
      assert.doesNotThrow(() => void (pending = call()), label);
      await assert.rejects(pending!, message, label);
    }

    // Arrays on a SharedArrayBuffer and a grad the call allocates are used in place, not
    // copied: only the pending call references them while a collection runs.
    const n = 4096;
    const onShared = (values: ArrayLike<number>) => {
      const array = new Float32Array(new SharedArrayBuffer(4 * n));
      array.set(values);
      return array;
    };
    const logp = new Float32Array(n).map((_, i) => -1 - (i % 11) * 0.1);
    const options = {
      logp,
      oldLogp: logp.map((x, i) => x + ((i % 5) - 2) * 0.04),
      advantages: new Float32Array(n).map((_, i) => ((i % 7) - 3) / 3),
      mask: new Uint8Array(n).fill(1),
    };
    const want = ppoLoss(options);
    const pending = Array.from({ length: 8 }, () =>
      ppoLossAsync({ ...options, logp: onShared(options.logp), oldLogp: onShared(options.oldLogp), advantages: onShared(options.advantages) }),
    );
    globalThis.gc?.();
    for (const got of await Promise.all(pending)) {
      assert.deepEqual({ ...got, grad: [...got.grad] }, { ...want, grad: [...want.grad] });
    }
    assert.equal(await native.poolRoundTrip(), undefined, "the bench's floor: an empty round trip");
  });

  it('a worker thread that exits or is terminated with kernels in flight leaves the process intact', async () => {
    for (let i = 0; i < 6; i++) {
      const exit = i % 2 === 0;
      const worker = startWorker({ kind: 'abandon', seed: SEED, exit, scale: 8 });
      const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
      if (!exit) {
        assert.equal(await firstMessage(worker), 'started');
        await worker.terminate();
      }
      assert.equal(await exited, exit ? 0 : 1);
    }
    assert.deepEqual(mismatches(calls, calls.map((c) => c.sync(c.options)), reference), []);
  });
});
