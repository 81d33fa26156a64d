/**
 * A dense size ladder of "2 threads vs 1": every op at 8 to 12 sizes, from a single
 * sequence to past the size where it takes a second thread, our kernel on two threads
 * against itself on one in paired rounds (the median over rounds of the two times' ratio
 * within a round, as in scaling.ts).
 *
 * The bench's sweep (scaling.ts) takes three sizes an op; an op's minimum work per thread
 * (`kMin…PerThread` in native/src/cpu/<op>.cc) is decided between them, and the first size
 * that takes a second thread is where a threshold set too low loses most. This is the tool
 * that sets those thresholds: on the EPYC VM of 2026-12-06 it found 32,768 rewards by
 * random group ids at 0.42-0.97x and GRPO's advantages of 128 × 2048 tokens at 0.53-1.04x
 * (most runs below 0.95x), sizes the sweep does not take.
 *
 *   node dist/benchmarks/ladder.js [--ops REGEX] [--rounds N] [--threads N] [--cold]
 *
 * Prints one row an op: each size with its median paired ratio, `!` below 0.95×. A size
 * that stays on one thread reads about 1.00× either way; how far such sizes stray from 1
 * is the noise of the machine at the time.
 *
 * Calls are timed back to back (2 ms a sample), as a training step makes them; with
 * `--cold`, each sample is one call after a sweep of the caches, as the bench's cold
 * cases: the pool's helper has slept through the sweep, and the call decides whether
 * waking it pays (common/parallel.cc, `kMinWakeWork`). Give it more rounds (61).
 */
import { parseArgs } from 'node:util';
import { ADVANTAGE_ESTIMATORS, POLICY_LOSSES, info, setThreads, type PolicyLoss } from '../lib/index.js';
import { advantagesCase } from './advantages.js';
import { CacheSweeper, cachePlan } from './cache.js';
import { dpoCase } from './dpo_loss.js';
import { feedbackMaskCase } from './feedback_mask.js';
import { groupCase, groupIdsCase } from './group_advantages.js';
import { medianRatio, type BenchCase } from './harness.js';
import { policyLossCase, ppoCase } from './ppo_loss.js';
import { rolloutCorrectionCase } from './rollout_correction.js';
import { pairedTimes } from './scaling.js';
import { sequenceCase } from './sequence_logprobs.js';
import { tokenLogprobsCase } from './token_logprobs.js';

/** Sequences of 2048 tokens: 2,048 to 1M tokens. */
const SEQUENCES = [1, 2, 4, 8, 16, 32, 48, 64, 128, 192, 256, 512];
/** Estimators take groups of 8 sequences. */
const GROUPED_SEQUENCES = [8, 16, 32, 64, 128, 192, 256, 384, 512];
/** Rewards or preference pairs. */
const ITEMS = [4096, 8192, 16384, 32768, 49152, 65536, 98304, 131072, 196608, 262144];
/** Rows of a 32,000-entry vocabulary. */
const ROWS = [1, 2, 4, 6, 8, 12, 16, 32];
/** A sample's least duration: calls are repeated within a sample up to it. */
const SAMPLE_SECONDS = 2e-3;

type Family = [name: string, cases: () => BenchCase[]];

const OTHER_LOSSES = POLICY_LOSSES.filter((l): l is Exclude<PolicyLoss, 'vanilla'> => l !== 'vanilla');

function families(): Family[] {
  const batches = (make: (numSeqs: number) => BenchCase, seqs = SEQUENCES) => () => seqs.map(make);
  return [
    ['ppoLoss', batches((s) => ppoCase(s, 2048, false, ['full']))],
    ...OTHER_LOSSES.map((loss): Family => [`ppoLoss/${loss}`, batches((s) => policyLossCase(loss, s, 2048, ['full']))]),
    ['tokenLogprobs/f32', () => ROWS.map((t) => tokenLogprobsCase(t, 32_000, 'f32', false, ['full']))],
    ['tokenLogprobs/bf16', () => ROWS.map((t) => tokenLogprobsCase(t, 32_000, 'bf16', false, ['full']))],
    ['groupAdvantages', () => ITEMS.map((n) => groupCase(n))],
    ['groupAdvantages/random-ids', () => ITEMS.map((n) => groupIdsCase(n))],
    ...ADVANTAGE_ESTIMATORS.map((e): Family => [`advantages/${e}`, batches((s) => advantagesCase(e, s, 2048, ['full']), GROUPED_SEQUENCES)]),
    ['dpoLoss', () => ITEMS.map((n) => dpoCase(n))],
    ['feedbackMask', batches((s) => feedbackMaskCase(s, 2048, ['full']))],
    ['sequenceLogprobs/fwd', batches((s) => sequenceCase(s, 2048, false, ['full']))],
    ['sequenceLogprobs/bwd', batches((s) => sequenceCase(s, 2048, true, ['full']))],
    ['rolloutCorrection', batches((s) => rolloutCorrectionCase(s, 2048, ['full']))],
  ];
}

/** The size part of a case id: "64x2048", "65536". */
function sizeOf(benchCase: BenchCase): string {
  return benchCase.id.split('/').find((part) => /^\d/.test(part)) ?? benchCase.id;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      ops: { type: 'string' },
      rounds: { type: 'string', default: '21' },
      threads: { type: 'string', default: '2' },
      cold: { type: 'boolean', default: false },
    },
  });
  const rounds = Number(values.rounds);
  const threads = Number(values.threads);
  if (!Number.isInteger(rounds) || rounds < 1) throw new RangeError(`Expected a positive integer for --rounds but received ${values.rounds}`);
  if (!Number.isInteger(threads) || threads < 2) throw new RangeError(`Expected an integer of at least 2 for --threads but received ${values.threads}`);
  const only = values.ops ? new RegExp(values.ops) : undefined;
  const restore = info().threads;
  const plan = cachePlan();
  const sweeper = values.cold ? new CacheSweeper(plan.sweepBytes, plan.sweepThreads) : undefined;
  const timing = sweeper ? `one call a sample after a ${plan.sweepBytes / 2 ** 20} MiB sweep` : 'calls back to back';
  console.log(`${threads} threads vs 1, median of ${rounds} paired rounds a size, ${timing} (! below 0.95x)`);
  try {
    for (const [name, cases] of families()) {
      if (only && !only.test(name)) continue;
      const cells: string[] = [];
      for (const benchCase of cases()) {
        const { one, many } = await pairedTimes(benchCase.setup().peers[0], threads, rounds, SAMPLE_SECONDS, sweeper);
        const ratio = medianRatio(one, many);
        cells.push(`${sizeOf(benchCase)} ${ratio.toFixed(2)}${ratio < 0.95 ? '!' : ''}`);
      }
      console.log(`${name.padEnd(38)} ${cells.join('  ')}`);
    }
  } finally {
    setThreads(restore);
    await sweeper?.close();
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
