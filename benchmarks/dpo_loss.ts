/** dpoLoss cases: the sigmoid DPO loss and its gradients on 65,536 preference pairs. */
import { dpoLoss } from '../lib/index.js';
import { Rng } from './data.js';
import { cCallPeer, compareArrays, compareNumbers, sliceUnits, syncPeer, type BenchCase } from './harness.js';
import { native } from '../lib/native.js';
import { dpoLossTs } from '../test/reference/dpo_loss.js';

const BETA = 0.1;
const LABEL_SMOOTHING = 0;

export function dpoCase(numPairs: number): BenchCase {
  const bytes = 32 * numPairs;
  return {
    op: 'dpoLoss',
    id: `dpoLoss/${numPairs}`,
    title: `dpoLoss (sigmoid) with gradients, ${numPairs.toLocaleString('en-US')} pairs`,
    sizes: ['quick', 'full'],
    bytes,
    byteModel: '32 B/pair: 4 summed log-probs read, 2 gradients and 2 rewards written',
    bandwidthTarget: 0.6,
    torch: { op: 'dpoLoss', params: { numPairs, beta: BETA, labelSmoothing: LABEL_SMOOTHING } },
    setup() {
      const rng = new Rng(5);
      const policyChosen = rng.bell(numPairs, -200, 20);
      const policyRejected = rng.bell(numPairs, -200, 20);
      const noise = rng.bell(2 * numPairs, 0, 1);
      const refChosen = policyChosen.map((x, i) => x + noise[i]);
      const refRejected = policyRejected.map((x, i) => x + noise[numPairs + i]);
      const options = { policyChosen, policyRejected, refChosen, refRejected, beta: BETA, labelSmoothing: LABEL_SMOOTHING };
      const outputs = () => ({
        gradChosen: new Float32Array(numPairs),
        gradRejected: new Float32Array(numPairs),
        chosenRewards: new Float32Array(numPairs),
        rejectedRewards: new Float32Array(numPairs),
      });
      const reused = { ...options, out: outputs() };
      const tsOut = outputs();
      const ts = () =>
        dpoLossTs(
          policyChosen, policyRejected, refChosen, refRejected, BETA, LABEL_SMOOTHING,
          tsOut.gradChosen, tsOut.gradRejected, tsOut.chosenRewards, tsOut.rejectedRewards,
        );
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', () => dpoLoss(reused)),
          syncPeer('tirl, allocating', 'tirl-alloc', () => dpoLoss(options)),
          cCallPeer([[native.dpoLossCCalls, reused]]),
          syncPeer('TypeScript, 1 thread', 'typescript', ts),
        ],
        arithmetic: {
          slice(pairs) {
            const first = (x: Float32Array) => x.subarray(0, pairs);
            const out = reused.out;
            const head = {
              ...options,
              policyChosen: first(policyChosen), policyRejected: first(policyRejected),
              refChosen: first(refChosen), refRejected: first(refRejected),
              out: { gradChosen: first(out.gradChosen), gradRejected: first(out.gradRejected), chosenRewards: first(out.chosenRewards), rejectedRewards: first(out.rejectedRewards) },
            };
            return () => dpoLoss(head);
          },
          units: sliceUnits(bytes, numPairs),
          total: numPairs,
        },
        check() {
          const ours = dpoLoss(reused);
          const theirs = ts();
          return (
            compareNumbers('loss', ours.loss, theirs.loss, 1e-5) ??
            compareArrays('gradChosen', ours.gradChosen, tsOut.gradChosen, 1e-4)
          );
        },
      };
    },
  };
}

export const cases: BenchCase[] = [dpoCase(65_536)];
