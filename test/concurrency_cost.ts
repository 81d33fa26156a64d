/**
 * What the async forms' copies cost: median time of the async form over the sync form,
 * for tokenLogprobs (4096 x 32000 f32 logits, 524 MB) and ppoLoss (1M tokens), with inputs
 * on ordinary ArrayBuffers (copied) and on SharedArrayBuffers (used in place). Not a CI test:
 *   node dist/test/concurrency_cost.js [repetitions]
 */
import { ppoLoss, ppoLossAsync, tokenLogprobs, tokenLogprobsAsync } from '../lib/kernels/index.js';
import { Random } from './support.js';

const repetitions = Number(process.argv[2] ?? 5);

function shared<T extends Float32Array | Int32Array | Uint8Array>(a: T): T {
  const copy = new (a.constructor as new (b: SharedArrayBuffer) => T)(new SharedArrayBuffer(a.byteLength));
  copy.set(a);
  return copy;
}

/** Median wall time of `run` (awaited) and of its synchronous part (the main thread blocked). */
async function median(run: () => unknown): Promise<{ total: number; blocked: number }> {
  await run(); // warm: first touch of outputs and of the copies' memory
  const totals: number[] = [];
  const blocked: number[] = [];
  for (let i = 0; i < repetitions; i++) {
    const start = performance.now();
    const pending = run();
    blocked.push(performance.now() - start);
    await pending;
    totals.push(performance.now() - start);
  }
  const middle = (a: number[]) => a.sort((x, y) => x - y)[a.length >> 1]!;
  return { total: middle(totals), blocked: middle(blocked) };
}

async function compare(name: string, sync: () => unknown, async: () => Promise<unknown>, asyncShared: () => Promise<unknown>): Promise<void> {
  const s = (await median(sync)).total;
  const describe = (label: string, t: { total: number; blocked: number }) =>
    `${label} ${t.total.toFixed(1)} ms (x${(t.total / s).toFixed(2)}; event loop blocked ${t.blocked.toFixed(1)} ms)`;
  console.log(`${name}: sync ${s.toFixed(1)} ms, ${describe('async', await median(async))}, ${describe('async on SharedArrayBuffers', await median(asyncShared))}`);
}

const random = new Random(1);
{
  const rows = 4096;
  const vocabSize = 32000;
  const logits = random.normals(rows * vocabSize, 3);
  const labels = new Int32Array(rows).map(() => random.int(0, vocabSize));
  const options = { logits, vocabSize, labels };
  const sharedOptions = { logits: shared(logits), vocabSize, labels: shared(labels) };
  await compare(`tokenLogprobs ${rows} x ${vocabSize} f32`, () => tokenLogprobs(options), () => tokenLogprobsAsync(options), () => tokenLogprobsAsync(sharedOptions));
}
{
  const n = 1 << 20;
  const options = { logp: random.floats(n, -6, 0), oldLogp: random.floats(n, -6, 0), advantages: random.normals(n), mask: random.mask(n, 0.9) };
  const sharedOptions = { logp: shared(options.logp), oldLogp: shared(options.oldLogp), advantages: shared(options.advantages), mask: shared(options.mask) };
  await compare(`ppoLoss ${n} tokens`, () => ppoLoss(options), () => ppoLossAsync(options), () => ppoLossAsync(sharedOptions));
}
