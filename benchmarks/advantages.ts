/**
 * advantages cases on the tool-use batches of groupAdvantages' token case (512 sequences ×
 * 2048 tokens, or 64 / 16 with --quick; groups of 8, binary rewards), one per estimator:
 * GRPO (beside groupAdvantages expanded to tokens), GAE and REINFORCE++ (a backward
 * recurrence per sequence, then whitening), the optimal token baselines (per-column
 * baselines over each group), and the other outcome estimators. The TypeScript peer is the
 * op's float64 reference; the PyTorch peer is verl's code for the estimator.
 */
import { ADVANTAGE_ESTIMATORS, advantages, type AdvantageEstimator, type AdvantagesOptions } from '../lib/index.js';
import { Rng, sequenceSlices, toolUseBatch } from './data.js';
import { cCallPeer, compareArrays, syncPeer, type BenchCase, type SizeName } from './harness.js';
import { native } from '../lib/native.js';
import { reference } from './peers/advantages.js';

const GROUP_SIZE = 8;

function inputs(estimator: AdvantageEstimator, numSeqs: number, seqLen: number): AdvantagesOptions {
  const { mask, seqOffsets } = toolUseBatch(numSeqs, seqLen);
  const rng = new Rng(3);
  const n = numSeqs * seqLen;
  const rewards = new Float32Array(numSeqs).map(() => (rng.next() < 0.5 ? 0 : 1));
  const options: AdvantagesOptions = { estimator, rewards, mask, seqOffsets };
  if (estimator === 'gae') {
    options.values = new Float32Array(n).map(() => rng.next() - 0.5);
    options.gamma = 1;
    options.lam = 0.95;
  } else if (estimator !== 'reinforce_plus_plus' && estimator !== 'remax') {
    options.groupSize = GROUP_SIZE;
  }
  if (estimator === 'gdpo') {
    // Two reward components, the second the first shifted by one group, weighted 1 and 0.5.
    const second = rewards.map((_, i) => rewards[(i - GROUP_SIZE + numSeqs) % numSeqs]);
    options.rewards = Float32Array.from([...rewards, ...second]);
    options.rewardWeights = Float32Array.of(1, 0.5);
  }
  if (estimator === 'remax') options.rewardBaselines = new Float32Array(numSeqs).map(() => (rng.next() < 0.5 ? 0 : 1));
  if (estimator === 'optimal_token_baseline' || estimator === 'tir_optimal_token_baseline') {
    options.oldLogp = new Float32Array(n).map(() => -3 * rng.next());
    options.sumPiSquared = options.oldLogp.map((lp) => Math.exp(2 * lp) + 0.1 * rng.next());
  }
  return options;
}

export function advantagesCase(estimator: AdvantageEstimator, numSeqs: number, seqLen: number, sizes: SizeName[]): BenchCase {
  const tokens = numSeqs * seqLen;
  const otb = estimator === 'optimal_token_baseline' || estimator === 'tir_optimal_token_baseline';
  const perToken = estimator === 'gae' ? 9 : otb ? 13 : 5;
  const bytes = perToken * tokens + 8 * numSeqs + 4;
  return {
    op: 'advantages',
    id: `advantages/${estimator}/${numSeqs}x${seqLen}`,
    title: `advantages '${estimator}', ${numSeqs} sequences × ${seqLen}${estimator === 'gae' || estimator === 'reinforce_plus_plus' || estimator === 'remax' ? '' : ` (groups of ${GROUP_SIZE})`}`,
    sizes,
    bytes,
    // Issue 20: the estimators join the bench with groupAdvantages' target.
    bandwidthTarget: 0.6,
    byteModel: estimator === 'gae'
      ? '9 B/token (mask, values read; advantage written) + 8 B/sequence (reward, offset)'
      : otb
        ? '13 B/token (mask, oldLogp, sumPiSquared read; advantage written) + 8 B/sequence'
        : '5 B/token (mask read, advantage written) + 8 B/sequence (reward, offset)',
    torch: { op: 'advantages', params: { estimator, numSeqs, seqLen, groupSize: GROUP_SIZE } },
    setup() {
      const options = inputs(estimator, numSeqs, seqLen);
      const out = { advantages: new Float32Array(tokens) };
      const groupIds = options.groupSize ? Int32Array.from({ length: numSeqs }, (_, i) => Math.floor(i / GROUP_SIZE)) : undefined;
      const ts = () => reference({ ...options, estimator, groupIds });
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', () => advantages({ ...options, out })),
          syncPeer('tirl, allocating', 'tirl-alloc', () => advantages(options)),
          cCallPeer([[native.advantagesCCalls, { ...options, out }]]),
          syncPeer('TypeScript float64 reference, 1 thread', 'typescript', ts),
        ],
        // Whole groups: a slice's groups are the batch's first ones.
        arithmetic: sequenceSlices(advantages, { ...options, out }, options.seqOffsets!, bytes, GROUP_SIZE),
        check() {
          advantages({ ...options, out });
          return compareArrays('advantages', out.advantages, ts().advantages, 1e-5);
        },
      };
    },
  };
}

/** The three first measured keep their quick size of 64 sequences; the others run 16 there. */
const EARLIER: ReadonlySet<AdvantageEstimator> = new Set(['grpo', 'gae', 'optimal_token_baseline']);

export const cases: BenchCase[] = ADVANTAGE_ESTIMATORS.flatMap((estimator) => [
  advantagesCase(estimator, 512, 2048, ['full']),
  advantagesCase(estimator, EARLIER.has(estimator) ? 64 : 16, 2048, ['quick']),
]);
