/**
 * Memory does not grow: every op, sync and async, runs 100,000 times (40,000 under
 * AddressSanitizer) on small inputs (and error paths too), in a child `node --expose-gc` so
 * that garbage collection can be forced and nothing else shares the process. The V8 heap,
 * external (ArrayBuffer) memory and resident memory are read after a warm-up and then after
 * each of ten windows of calls, each time after forced collections.
 *
 * A leak is a trend, not a step: lost memory grows in every window, by the same amount,
 * while the allocator's noise comes in steps (an arena or a heap page claimed once, a
 * resident-set jump of megabytes in one window, seen on fresh machines with heap and
 * external memory flat). So a figure leaks when it grows in most windows: when the median
 * of its ten per-window growths exceeds TREND (the sixth largest of ten, so that four
 * windows of noise cannot make a trend, nor hide one), and over the whole run by more than
 * TOTAL. One lost 64-byte allocation per call is 640 KB per window (more with allocator
 * headers), five times TREND. Two controls that do leak show the check catches it: 64 bytes
 * per call of native memory behind ArrayBuffers, seen exactly in the external figure; and
 * 1 KiB per call, seen in the resident one. Resident memory cannot vouch for 64 bytes a call:
 * the allocator first hands out memory the earlier ops freed, which is resident already (one
 * run saw the 64-byte control's resident growth at 0-250 kB in six windows of ten, with the
 * median exactly at TREND), so its control leaks sixteen times as much.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runInNewContext } from 'node:vm';

import {
  advantages,
  advantagesAsync,
  dpoLoss,
  dpoLossAsync,
  feedbackMask,
  feedbackMaskAsync,
  groupAdvantages,
  groupAdvantagesAsync,
  ppoLoss,
  ppoLossAsync,
  preparePpoLoss,
  sequenceLogprobs,
  sequenceLogprobsAsync,
  sequenceLogprobsBackward,
  sequenceLogprobsBackwardAsync,
  rolloutCorrection,
  rolloutCorrectionAsync,
  tokenLogprobs,
  tokenLogprobsAsync,
  tokenLogprobsBackward,
  tokenLogprobsBackwardAsync,
} from '../lib/index.js';
import { Random, sanitizerRun } from './support.js';

const CHILD = 'TIRL_MEMORY_GROWTH_CHILD';
// Under AddressSanitizer every call is several times slower: fewer calls keep the run in its
// time limit, and the 64-byte control (256 kB a window) still stands above TREND.
const CALLS = sanitizerRun() ? 40_000 : 100_000;
const WARM_UP = sanitizerRun() ? 2_000 : 5_000;
// Async calls in flight at once: enough to keep the worker threads busy.
const IN_FLIGHT = 32;
const MiB = 2 ** 20;
const ROUNDS = 10;
// A leak: growth in most windows (the median window) above TREND, and above TOTAL in all.
const TREND = 128 * 1024;
const TOTAL = 1 * MiB;
const KEYS = ['rss', 'heap', 'external'] as const;
/** The controls, by the figure each must be caught in. */
const CONTROLS = { external: 'control: leaks 64 bytes per call', rss: 'control: leaks 1 KiB per call' } as const;

interface Sample {
  rss: number;
  heap: number;
  external: number;
}

/** One op's figures, in bytes: after the warm-up, then after each window of calls. */
interface Figures {
  name: string;
  seconds: number;
  samples: Sample[];
}

/** The growth of each window, and whether it makes a trend (see the top of the file). */
function trend(samples: Sample[], key: (typeof KEYS)[number]): { growths: number[]; leaks: boolean } {
  const growths = samples.slice(1).map((s, i) => s[key] - samples[i][key]);
  const sorted = [...growths].sort((a, b) => a - b);
  const median = sorted[Math.floor((sorted.length - 1) / 2)];
  const total = samples[samples.length - 1][key] - samples[0][key];
  return { growths, leaks: median > TREND && total > TOTAL };
}

/** The calls to run: a name and a function making one call (a Promise when async). */
function calls(): [string, () => unknown][] {
  const rng = new Random(3);
  const n = 64;
  const b = 4;
  const v = 32;
  const seqOffsets = Int32Array.of(0, 10, 30, 31, n);
  const mask = rng.mask(n, 0.7);
  const logp = rng.floats(n, -3, 0);
  const ppo = { logp, oldLogp: rng.floats(n, -3, 0), advantages: rng.normals(n), mask, seqOffsets, refLogp: rng.floats(n, -3, 0), klCoef: 0.1, aggregation: 'seq-mean-token-mean' as const };
  const { klCoef, aggregation, ...ppoArrays } = ppo;
  const prepared = preparePpoLoss({ klCoef, aggregation });
  const group = { rewards: rng.floats(16, 0, 1), groupSize: 4 };
  const pairs = { policyChosen: rng.floats(8, -9, -1), policyRejected: rng.floats(8, -9, -1), refChosen: rng.floats(8, -9, -1), refRejected: rng.floats(8, -9, -1) };
  const roles = Uint8Array.from({ length: n }, () => rng.int(0, 4));
  const feedback = { roles, seqOffsets };
  const sequence = { logp, mask, seqOffsets, average: true };
  const sequenceBackward = { gradSeq: rng.normals(b), mask, seqOffsets, average: true };
  const labels = Int32Array.from({ length: 16 }, () => rng.int(0, v));
  const tokenInputs = { logits: rng.normals(16 * v, 2), vocabSize: v, labels };
  const token = { ...tokenInputs, withEntropy: true };
  const tokenBackward = { ...tokenInputs, gradLogp: rng.normals(16), gradEntropy: rng.normals(16) };
  const advantageInputs = {
    estimator: 'reinforce_plus_plus_baseline' as const, rewards: rng.normals(b), mask, seqOffsets,
    groupIds: Int32Array.from({ length: b }, (_, i) => i % 3), withReturns: true,
  };
  const rollout = { logp, rolloutLogp: rng.floats(n, -3, 0), mask, seqOffsets, rolloutIs: 'token' as const, rolloutRs: 'token_k1,seq_mean_k3', rolloutRsThreshold: [2, 0.5] };
  // Errors raised by the C call after the outputs were allocated (a bad label, a bad role).
  const badLabels = Int32Array.from(labels).fill(v, 15);
  const badRoles = Uint8Array.from(roles).fill(9, n - 1);
  return [
    ['ppoLoss', () => ppoLoss(ppo)],
    ['ppoLossAsync', () => ppoLossAsync(ppo)],
    ['prepared ppoLoss', () => prepared(ppoArrays)],
    ['prepared ppoLoss async', () => prepared.async(ppoArrays)],
    ['groupAdvantages', () => groupAdvantages(group)],
    ['groupAdvantagesAsync', () => groupAdvantagesAsync(group)],
    ['advantages', () => advantages(advantageInputs)],
    ['advantagesAsync', () => advantagesAsync(advantageInputs)],
    ['dpoLoss', () => dpoLoss(pairs)],
    ['dpoLossAsync', () => dpoLossAsync(pairs)],
    ['feedbackMask', () => feedbackMask(feedback)],
    ['feedbackMaskAsync', () => feedbackMaskAsync(feedback)],
    ['sequenceLogprobs', () => sequenceLogprobs(sequence)],
    ['sequenceLogprobsAsync', () => sequenceLogprobsAsync(sequence)],
    ['sequenceLogprobsBackward', () => sequenceLogprobsBackward(sequenceBackward)],
    ['sequenceLogprobsBackwardAsync', () => sequenceLogprobsBackwardAsync(sequenceBackward)],
    ['tokenLogprobs', () => tokenLogprobs(token)],
    ['tokenLogprobsAsync', () => tokenLogprobsAsync(token)],
    ['tokenLogprobsBackward', () => tokenLogprobsBackward(tokenBackward)],
    ['tokenLogprobsBackwardAsync', () => tokenLogprobsBackwardAsync(tokenBackward)],
    ['rolloutCorrection', () => rolloutCorrection(rollout)],
    ['rolloutCorrectionAsync', () => rolloutCorrectionAsync(rollout)],
    ['rolloutCorrection bad option (refused by the core)', () => expectError(() => rolloutCorrection({ ...rollout, rolloutRsThreshold: [2, -1] }))],
    ['tokenLogprobs bad label (throws)', () => expectError(() => tokenLogprobs({ ...token, labels: badLabels }))],
    ['tokenLogprobsAsync bad label (rejects)', () => tokenLogprobsAsync({ ...token, labels: badLabels }).then(unexpected, () => undefined)],
    ['feedbackMask bad role (throws)', () => expectError(() => feedbackMask({ ...feedback, roles: badRoles }))],
    ['ppoLoss bad option (refused by the core)', () => expectError(() => ppoLoss({ ...ppo, clipLow: 2 }))],
  ];
}

function expectError(call: () => unknown): void {
  try {
    call();
  } catch {
    return;
  }
  unexpected();
}

function unexpected(): never {
  throw new Error('the call was expected to fail');
}

/** The child: runs every call and prints one JSON line of figures per call. */
async function child(): Promise<void> {
  const gc = runInNewContext('gc') as () => void;  // --expose-gc
  const collect = async () => {
    // Settled async calls release their references on later turns of the loop.
    for (let k = 0; k < 3; k++) {
      await nextTurn();
      gc();
    }
  };
  const sample = (): Sample => {
    const m = process.memoryUsage();
    return { rss: m.rss, heap: m.heapUsed, external: m.external };
  };
  const leaked: ArrayBuffer[] = [];
  const all: [string, () => unknown][] = [
    ...calls(),
    [CONTROLS.external, () => leaked.push(new ArrayBuffer(64))],
    [CONTROLS.rss, () => leaked.push(new ArrayBuffer(1024))],
  ];
  for (const [name, call] of all) {
    const run = async (count: number) => {
      for (let i = 0; i < count; i += IN_FLIGHT) {
        const results = [];
        for (let k = 0; k < IN_FLIGHT; k++) results.push(call());
        if (results[0] instanceof Promise) await Promise.all(results);
      }
    };
    await run(WARM_UP);
    await collect();
    const samples = [sample()];
    let seconds = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const start = performance.now();
      await run(CALLS / ROUNDS);
      seconds += (performance.now() - start) / 1000;
      await collect();
      samples.push(sample());
    }
    const figures: Figures = { name, seconds, samples };
    process.stdout.write(`${JSON.stringify(figures)}\n`);
  }
}

if (process.env[CHILD]) {
  await child();
} else {
  describe('memory growth', () => {
    it(`stays flat over ${CALLS.toLocaleString('en')} calls of every op, sync and async, and on error paths`, () => {
      const stdout = execFileSync(process.execPath, ['--expose-gc', fileURLToPath(import.meta.url)], {
        env: { ...process.env, [CHILD]: '1' },
        encoding: 'utf8',
        timeout: 600_000,
      });
      const runs = stdout.trim().split('\n').map((line) => JSON.parse(line) as Figures);
      const mb = (bytes: number) => (bytes / 1e6).toFixed(2);
      for (const r of runs) {
        const first = r.samples[0];
        const last = r.samples[r.samples.length - 1];
        console.log(`# ${r.name}: ${r.seconds.toFixed(2)} s; ` +
          KEYS.map((k) => `${k} ${mb(first[k])} -> ${mb(last[k])} MB (windows ${trend(r.samples, k).growths.map((g) => (g / 1e3).toFixed(0)).join(' ')} kB)`).join(', '));
      }
      // Under AddressSanitizer freed memory waits in quarantine (resident) before reuse:
      // there the heap and external checks still hold, resident memory is only reported.
      const measured: readonly (typeof KEYS)[number][] = sanitizerRun() ? ['heap', 'external'] : KEYS;
      const grows = (r: Figures) => measured.filter((k) => trend(r.samples, k).leaks);
      // Each control's leak is caught by the figure it is there for.
      const controls = runs.splice(-2);
      for (const [k, name] of Object.entries(CONTROLS) as [(typeof KEYS)[number], string][]) {
        const control = controls.find((r) => r.name === name)!;
        if (measured.includes(k)) assert.ok(grows(control).includes(k), `the control's leak went unseen in ${k}: ${JSON.stringify(control)}`);
      }
      assert.equal(runs.length, calls().length);
      for (const r of runs) assert.deepEqual(grows(r), [], `${r.name} grew: ${JSON.stringify(r)}`);
    });
  });
}
