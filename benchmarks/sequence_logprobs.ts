/**
 * sequenceLogprobs cases: per-sequence sums of masked token log-probs on a 512×2048 batch,
 * and the backward that broadcasts each sequence's gradient to its masked tokens.
 */
import { sequenceLogprobs, sequenceLogprobsBackward } from '../lib/index.js';
import { Rng, sequenceSlices, toolUseBatch } from './data.js';
import { cCallPeer, compareArrays, syncPeer, type BenchCase, type SizeName } from './harness.js';
import { native } from '../lib/native.js';
import { reference as sequenceLogprobsReference, referenceBackward as sequenceLogprobsBackwardReference } from '../test/reference/sequence_logprobs.js';

export function sequenceCase(numSeqs: number, seqLen: number, backward: boolean, sizes: SizeName[]): BenchCase {
  const tokens = numSeqs * seqLen;
  const bytes = 5 * tokens + 8 * numSeqs + 4;
  return {
    op: 'sequenceLogprobs',
    id: `sequenceLogprobs/${numSeqs}x${seqLen}/${backward ? 'bwd' : 'fwd'}`,
    title: `sequenceLogprobs${backward ? 'Backward' : ''}, ${numSeqs}×${seqLen} tokens`,
    sizes,
    bytes,
    byteModel: backward
      ? '5 B/token (mask read, gradient written) + 8 B/sequence (offset, gradSeq)'
      : '5 B/token (logp and mask read) + 8 B/sequence (offset, sum written)',
    bandwidthTarget: 0.6,
    torch: { op: 'sequenceLogprobs', params: { numSeqs, seqLen, backward } },
    setup() {
      const { mask, seqOffsets } = toolUseBatch(numSeqs, seqLen);
      const rng = new Rng(9);
      const logp = rng.uniform(tokens, -5, 0);
      const gradSeq = rng.bell(numSeqs, 0, 1);
      const out = new Float32Array(backward ? tokens : numSeqs);
      const ours = backward
        ? () => sequenceLogprobsBackward({ gradSeq, mask, seqOffsets, out })
        : () => sequenceLogprobs({ logp, mask, seqOffsets, out });
      const allocating = backward
        ? () => sequenceLogprobsBackward({ gradSeq, mask, seqOffsets })
        : () => sequenceLogprobs({ logp, mask, seqOffsets });
      const ts = backward
        ? () => sequenceLogprobsBackwardReference(gradSeq, mask, seqOffsets, false)
        : () => sequenceLogprobsReference(logp, mask, seqOffsets, false);
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', ours),
          syncPeer('tirl, allocating', 'tirl-alloc', allocating),
          backward
            ? cCallPeer([[native.sequenceLogprobsBackwardCCalls, { gradSeq, mask, seqOffsets, out }]])
            : cCallPeer([[native.sequenceLogprobsCCalls, { logp, mask, seqOffsets, out }]]),
          syncPeer('TypeScript, 1 thread', 'typescript', ts),
        ],
        arithmetic: backward
          ? sequenceSlices(sequenceLogprobsBackward, { gradSeq, mask, seqOffsets, out }, seqOffsets, bytes)
          : sequenceSlices(sequenceLogprobs, { logp, mask, seqOffsets, out }, seqOffsets, bytes),
        check() {
          ours();
          return compareArrays(backward ? 'gradLogp' : 'sums', out, ts(), 1e-5);
        },
      };
    },
  };
}

export const cases: BenchCase[] = [
  sequenceCase(512, 2048, false, ['full']),
  sequenceCase(512, 2048, true, ['full']),
  sequenceCase(64, 2048, false, ['quick']),
  sequenceCase(64, 2048, true, ['quick']),
];
