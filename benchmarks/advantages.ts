/**
 * advantages cases on the tool-use batches of groupAdvantages' token case (64 or 512
 * sequences × 2048 tokens, groups of 8, binary rewards): GRPO (beside groupAdvantages
 * expanded to tokens), GAE (a backward recurrence per sequence, then whitening) and the
 * optimal token baseline (per-column baselines over each group). The TypeScript peer is the
 * op's float64 reference; the PyTorch peer is verl's code for the estimator.
 */
import { advantages, type AdvantageEstimator, type AdvantagesOptions } from '../lib/index.js';
import { Rng, toolUseBatch } from './data.js';
import { compareArrays, syncPeer, type BenchCase, type SizeName } from './harness.js';
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
  } else {
    options.groupSize = GROUP_SIZE;
  }
  if (estimator === 'optimal_token_baseline') {
    options.oldLogp = new Float32Array(n).map(() => -3 * rng.next());
    options.sumPiSquared = options.oldLogp.map((lp) => Math.exp(2 * lp) + 0.1 * rng.next());
  }
  return options;
}

export function advantagesCase(estimator: AdvantageEstimator, numSeqs: number, seqLen: number, sizes: SizeName[]): BenchCase {
  const tokens = numSeqs * seqLen;
  const perToken = estimator === 'gae' ? 9 : estimator === 'optimal_token_baseline' ? 13 : 5;
  return {
    op: 'advantages',
    id: `advantages/${estimator}/${numSeqs}x${seqLen}`,
    title: `advantages '${estimator}', ${numSeqs} sequences × ${seqLen}${estimator === 'gae' ? '' : ` (groups of ${GROUP_SIZE})`}`,
    sizes,
    bytes: perToken * tokens + 8 * numSeqs + 4,
    byteModel: estimator === 'gae'
      ? '9 B/token (mask, values read; advantage written) + 8 B/sequence (reward, offset)'
      : estimator === 'optimal_token_baseline'
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
          syncPeer('TypeScript float64 reference, 1 thread', 'typescript', ts),
        ],
        check() {
          advantages({ ...options, out });
          return compareArrays('advantages', out.advantages, ts().advantages, 1e-5);
        },
      };
    },
  };
}

export const cases: BenchCase[] = (['grpo', 'gae', 'optimal_token_baseline'] as const).flatMap((estimator) => [
  advantagesCase(estimator, 512, 2048, ['full']),
  advantagesCase(estimator, 64, 2048, ['quick']),
]);
