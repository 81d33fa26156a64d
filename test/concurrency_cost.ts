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

async function median(run: () => unknown): Promise<number> {
  await run(); // warm: first-touch of outputs and copies
  const times: number[] = [];
  for (let i = 0; i < repetitions; i++) {
    const start = process.hrtime.bigint();
    await run();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return times.sort((a, b) => a - b)[times.length >> 1]!;
}

async function compare(name: string, sync: () => unknown, async: () => Promise<unknown>, asyncShared: () => Promise<unknown>): Promise<void> {
  const s = await median(sync);
  const a = await median(async);
  const sh = await median(asyncShared);
  console.log(`${name}: sync ${s.toFixed(1)} ms, async ${a.toFixed(1)} ms (x${(a / s).toFixed(2)}), async on SharedArrayBuffers ${sh.toFixed(1)} ms (x${(sh / s).toFixed(2)})`);
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
