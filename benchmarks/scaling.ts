/**
 * The "threads vs 1" sweep of `tirl bench`: every op at a small, a medium and a large size
 * (a reward batch of 64, a 4k-token micro-batch, … up to the full cases' sizes), our kernel
 * with `threads` threads against the same call on one thread, in interleaved rounds. A
 * kernel library must not lose time by parallelising: the sweep is what tunes each op's
 * minimum work per thread (`native/src/cpu/<op>.cc`) and what shows it holds.
 *
 * Unlike the cases past the L2 (harness.ts, cache.ts), this sweep is timed warm, calls back
 * to back, at every size: it compares one kernel with itself, the two sides back to back in
 * the same state, so no cache state favours one side; what it asks is whether a second
 * thread ever costs time (the wake-up, the split of the work), a fixed cost that a cold
 * call's longer memory time would dilute; and cold samples of one call each, over 102 sizes
 * × 31 rounds × 2 sides, would add a sweep per call: minutes to the run.
 */
import { ADVANTAGE_ESTIMATORS, POLICY_LOSSES, setThreads, type PolicyLoss } from '../lib/index.js';
import { advantagesCase } from './advantages.js';
import type { CacheSweeper } from './cache.js';
import { dpoCase } from './dpo_loss.js';
import { feedbackMaskCase } from './feedback_mask.js';
import { groupCase, groupIdsCase } from './group_advantages.js';
import { medianRatio, medianRatioInterval, type BenchCase, type MedianInterval, type Peer, type Progress } from './harness.js';
import { policyLossCase, ppoCase } from './ppo_loss.js';
import { rolloutCorrectionCase } from './rollout_correction.js';
import { sequenceCase } from './sequence_logprobs.js';
import { tokenLogprobsCase } from './token_logprobs.js';

export type ScalingSize = 'small' | 'medium' | 'large';

export interface ScalingEntry {
  size: ScalingSize;
  benchCase: BenchCase;
}

const tokens = (small: number, medium: number, large: number) => [small, medium, large] as const;
const SIZES: ScalingSize[] = ['small', 'medium', 'large'];

/** Batches: 8 sequences × 512 (4,096 tokens, one group of 8), 64 × 2048 (131,072) and 512 × 2048 (1M). */
const BATCHES = [
  [8, 512],
  [64, 2048],
  [512, 2048],
] as const;

function bySize(make: (k: number) => BenchCase, sizes: readonly number[]): ScalingEntry[] {
  return sizes.map((n, i) => ({ size: SIZES[i], benchCase: make(n) }));
}

function byBatch(make: (numSeqs: number, seqLen: number) => BenchCase): ScalingEntry[] {
  return BATCHES.map(([numSeqs, seqLen], i) => ({ size: SIZES[i], benchCase: make(numSeqs, seqLen) }));
}

const OTHER_LOSSES = POLICY_LOSSES.filter((l): l is Exclude<PolicyLoss, 'vanilla'> => l !== 'vanilla');

/** The sweep's cases, in report order: every op, every policy loss and every estimator. */
export function scalingCases(): ScalingEntry[] {
  return [
    ...byBatch((s, l) => ppoCase(s, l, false, ['full'])),
    ...OTHER_LOSSES.flatMap((loss) => byBatch((s, l) => policyLossCase(loss, s, l, ['full']))),
    ...bySize((t) => tokenLogprobsCase(t, 32_000, 'f32', false, ['full']), tokens(4, 64, 1024)),
    ...bySize((t) => tokenLogprobsCase(t, 32_000, 'bf16', false, ['full']), tokens(4, 64, 1024)),
    // A reward batch of 64, the full case's 65,536, and 1M rewards: where the scattered
    // sweeps stop cutting parts (kKeptPartRewards) and once ran slower on two threads.
    ...bySize((n) => groupCase(n), tokens(64, 65_536, 1 << 20)),
    ...bySize((n) => groupIdsCase(n), tokens(64, 65_536, 1 << 20)),
    ...ADVANTAGE_ESTIMATORS.flatMap((estimator) => byBatch((s, l) => advantagesCase(estimator, s, l, ['full']))),
    ...bySize((n) => dpoCase(n), tokens(64, 4096, 65_536)),
    ...byBatch((s, l) => feedbackMaskCase(s, l, ['full'])),
    ...byBatch((s, l) => sequenceCase(s, l, false, ['full'])),
    ...byBatch((s, l) => sequenceCase(s, l, true, ['full'])),
    ...byBatch((s, l) => rolloutCorrectionCase(s, l, ['full'])),
  ];
}

export interface ScalingRow {
  op: string;
  id: string;
  size: ScalingSize;
  threads: number;
  /** Best ms per call over the rounds, on one thread and on `threads`. */
  oneThreadMs: number;
  threadsMs: number;
  /** oneThreadMs / threadsMs: each side's least disturbed sample. */
  ratio: number;
  /**
   * The median over rounds of (1-thread time / `threads` time) within one round: the
   * verdict. The two sides of a round run back to back, so a burst of load on the shared
   * machine slows both or neither, and the median ignores the rounds it split. `ratio`
   * compares two extremes instead (each side's one least disturbed sample of the rounds) and moved
   * by ±15% between runs of the same code where neither side used a second thread.
   */
  pairedRatio: number;
  /** pairedRatio's interval over the rounds (medianRatioInterval). */
  pairedInterval: MedianInterval;
  rounds: number;
}

export interface ScalingOptions {
  threads: number;
  rounds: number;
  minSampleSeconds: number;
  ops?: string[];
  progress: Progress;
}

async function timed(peer: Peer, threads: number, inner: number, sweeper?: CacheSweeper): Promise<number> {
  setThreads(threads);
  sweeper?.evict();
  return (await peer.sample(inner)).wall;
}

/**
 * Our kernel's time a call on one thread and on `threads`, in `rounds` rounds of one sample
 * each side, back to back, after a warm-up on both; a sample repeats the call for at least
 * `minSampleSeconds`, or, given a `sweeper`, is one call after a sweep of the caches (as the
 * bench's cold cases). Leaves the thread count at `threads`.
 */
export async function pairedTimes(
  ours: Peer, threads: number, rounds: number, minSampleSeconds: number, sweeper?: CacheSweeper,
): Promise<{ one: number[]; many: number[] }> {
  let fastest = Infinity;
  for (let w = 0; w < 3; w++) {
    fastest = Math.min(fastest, await timed(ours, 1, 1, sweeper), await timed(ours, threads, 1, sweeper));
  }
  const inner = sweeper ? 1 : Math.max(1, Math.min(100_000, Math.ceil(minSampleSeconds / Math.max(fastest, 1e-9))));
  const one: number[] = [];
  const many: number[] = [];
  for (let r = 0; r < rounds; r++) {
    // Alternate which goes first, so that neither always follows the other.
    const first = r % 2 === 0;
    const a = first ? await timed(ours, 1, inner, sweeper) : 0;
    const b = await timed(ours, threads, inner, sweeper);
    const c = first ? a : await timed(ours, 1, inner, sweeper);
    one.push(c);
    many.push(b);
  }
  return { one, many };
}

/** Passes over every size of the sweep; a size's rounds are split among them. */
export const SCALING_PASSES = 3;

/**
 * Runs the sweep (our kernel only); restores the thread count it found. A size's rounds
 * are split among SCALING_PASSES passes over every size (each pass sets the case up
 * again), so that a spell of load on the shared machine, which lasts seconds, takes a
 * third of a size's rounds at most, where it took all of them: in one pass, a size that
 * stays on one thread (remax 8 × 512) read 0.91×, and gdpo 512 × 2048 0.87× best vs best.
 * `entries` defaults to scalingCases().
 */
export async function measureScaling(options: ScalingOptions, entries = scalingCases()): Promise<ScalingRow[]> {
  const ops = options.ops?.map((op) => op.toLowerCase());
  const chosen = entries.filter((e) => !ops || ops.includes(e.benchCase.op.toLowerCase()));
  const passes = Math.min(SCALING_PASSES, options.rounds);
  const one: number[][] = chosen.map(() => []);
  const many: number[][] = chosen.map(() => []);
  try {
    for (let pass = 0; pass < passes; pass++) {
      // Rounds of this pass: the rounds split as evenly as they go, the first passes longer.
      const rounds = Math.floor(options.rounds / passes) + (pass < options.rounds % passes ? 1 : 0);
      for (let i = 0; i < chosen.length; i++) {
        const { benchCase } = chosen[i];
        options.progress(`[${i + 1}/${chosen.length}] threads vs 1, pass ${pass + 1}/${passes}: ${benchCase.id}`);
        const times = await pairedTimes(benchCase.setup().peers[0], options.threads, rounds, options.minSampleSeconds);
        one[i].push(...times.one);
        many[i].push(...times.many);
      }
    }
    return chosen.map(({ size, benchCase }, i) => ({
      op: benchCase.op,
      id: benchCase.id,
      size,
      threads: options.threads,
      oneThreadMs: Math.min(...one[i]) * 1e3,
      threadsMs: Math.min(...many[i]) * 1e3,
      ratio: Math.min(...one[i]) / Math.min(...many[i]),
      pairedRatio: medianRatio(one[i], many[i]),
      pairedInterval: medianRatioInterval(one[i], many[i]),
      rounds: options.rounds,
    }));
  } finally {
    setThreads(options.threads);
  }
}
