/** feedbackMask cases: the loss mask of a tool-use batch from its token roles. */
import { feedbackMask } from '../lib/index.js';
import { Rng, sequenceSlices, toolUseBatch } from './data.js';
import { cCallPeer, syncPeer, type BenchCase, type SizeName } from './harness.js';
import { native } from '../lib/native.js';
import { reference as feedbackMaskReference } from '../test/reference/feedback_mask.js';

export function feedbackMaskCase(numSeqs: number, seqLen: number, sizes: SizeName[]): BenchCase {
  const tokens = numSeqs * seqLen;
  // Per token: roles read (1 B), mask written (1 B); per sequence: offsets, keep, count.
  const bytes = 2 * tokens + 9 * numSeqs + 4;
  return {
    op: 'feedbackMask',
    id: `feedbackMask/${numSeqs}x${seqLen}`,
    title: `feedbackMask, ${numSeqs}×${seqLen} tokens, 5% of sequences dropped`,
    sizes,
    bytes,
    byteModel: '2 B/token (roles in, mask out) + 9 B/sequence (offset, keep, count)',
    bandwidthTarget: 0.6,
    torch: { op: 'feedbackMask', params: { numSeqs, seqLen } },
    setup() {
      const { roles, seqOffsets } = toolUseBatch(numSeqs, seqLen);
      const rng = new Rng(5);
      const keep = new Uint8Array(numSeqs).map(() => (rng.next() < 0.05 ? 0 : 1));
      const out = { mask: new Uint8Array(tokens), actionTokens: new Int32Array(numSeqs) };
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', () => feedbackMask({ roles, seqOffsets, keep, out })),
          syncPeer('tirl, allocating', 'tirl-alloc', () => feedbackMask({ roles, seqOffsets, keep })),
          cCallPeer([[native.feedbackMaskCCalls, { roles, seqOffsets, keep, out }]]),
          syncPeer('TypeScript, 1 thread', 'typescript', () => feedbackMaskReference(roles, seqOffsets, keep)),
        ],
        arithmetic: sequenceSlices(feedbackMask, { roles, seqOffsets, keep, out }, seqOffsets, bytes),
        check() {
          feedbackMask({ roles, seqOffsets, keep, out });
          const theirs = feedbackMaskReference(roles, seqOffsets, keep);
          const same = out.mask.every((m, i) => m === theirs.mask[i]) && out.actionTokens.every((c, i) => c === theirs.actionTokens[i]);
          return same ? undefined : 'mask or counts differ';
        },
      };
    },
  };
}

export const cases: BenchCase[] = [
  feedbackMaskCase(512, 2048, ['full']),
  feedbackMaskCase(64, 2048, ['quick']),
];
