/**
 * groupAdvantages cases: GRPO advantages of 65,536 rewards in groups of 8, and the same
 * expanded to the action tokens of a 512×2048 batch (groupAdvantages, then
 * sequenceLogprobsBackward broadcasting each sequence's advantage to its masked tokens).
 */
import { groupAdvantages, sequenceLogprobsBackward } from '../lib/index.js';
import { Rng, toolUseBatch } from './data.js';
import { cCallPeer, compareArrays, syncPeer, type BenchCase, type SizeName } from './harness.js';
import { native } from '../lib/native.js';
import { groupAdvantagesTs } from '../test/reference/group_advantages.js';
import { referenceBackward as sequenceLogprobsBackwardReference } from '../test/reference/sequence_logprobs.js';

const GROUP_SIZE = 8;
const EPSILON = 1e-6;

/** Outcome rewards: 0 or 1, as a verifier gives (zero-variance groups included). */
function binaryRewards(n: number): Float32Array {
  const rng = new Rng(3);
  return new Float32Array(n).map(() => (rng.next() < 0.5 ? 0 : 1));
}

export function groupCase(numRewards: number): BenchCase {
  return {
    op: 'groupAdvantages',
    id: `groupAdvantages/${numRewards}`,
    title: `groupAdvantages, ${numRewards.toLocaleString('en-US')} rewards in groups of ${GROUP_SIZE}`,
    sizes: ['quick', 'full'],
    bytes: 8 * numRewards,
    byteModel: '8 B/reward: reward read, advantage written',
    bandwidthTarget: 0.6,
    torch: { op: 'groupAdvantages', params: { numRewards, groupSize: GROUP_SIZE, seqLen: 0 } },
    setup() {
      const rewards = binaryRewards(numRewards);
      const out = new Float32Array(numRewards);
      const tsOut = new Float32Array(numRewards);
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', () => groupAdvantages({ rewards, groupSize: GROUP_SIZE, out })),
          syncPeer('tirl, allocating', 'tirl-alloc', () => groupAdvantages({ rewards, groupSize: GROUP_SIZE })),
          cCallPeer([[native.groupAdvantagesCCalls, { rewards, groupSize: GROUP_SIZE, out }]]),
          syncPeer('TypeScript, 1 thread', 'typescript', () => groupAdvantagesTs(rewards, GROUP_SIZE, EPSILON, tsOut)),
        ],
        check() {
          groupAdvantages({ rewards, groupSize: GROUP_SIZE, out });
          groupAdvantagesTs(rewards, GROUP_SIZE, EPSILON, tsOut);
          return compareArrays('advantages', out, tsOut, 1e-5);
        },
      };
    },
  };
}

/**
 * Groups of GROUP_SIZE given by ids in random order (rewards of one prompt scattered over
 * the batch, as after shuffling or a replay buffer): the scatter path.
 */
export function groupIdsCase(numRewards: number): BenchCase {
  return {
    op: 'groupAdvantages',
    id: `groupAdvantages/${numRewards}/random-ids`,
    title: `groupAdvantages, ${numRewards.toLocaleString('en-US')} rewards, groups of ${GROUP_SIZE} by random group ids`,
    sizes: ['quick', 'full'],
    bytes: 12 * numRewards,
    byteModel: '12 B/reward: reward and group id read, advantage written',
    bandwidthTarget: 0.6,
    setup() {
      const rewards = binaryRewards(numRewards);
      const rng = new Rng(4);
      const groupIds = Int32Array.from({ length: numRewards }, (_, i) => Math.floor(i / GROUP_SIZE));
      for (let i = numRewards - 1; i > 0; i--) {
        const j = Math.floor(rng.next() * (i + 1));
        [groupIds[i], groupIds[j]] = [groupIds[j], groupIds[i]];
      }
      const out = new Float32Array(numRewards);
      const tsOut = new Float32Array(numRewards);
      // The TypeScript peer on the same groups, gathered contiguous first (its fastest form).
      const order = Array.from({ length: numRewards }, (_, i) => i).sort((a, b) => groupIds[a] - groupIds[b] || a - b);
      const sorted = new Float32Array(numRewards);
      const ts = () => {
        for (let k = 0; k < numRewards; k++) sorted[k] = rewards[order[k]];
        groupAdvantagesTs(sorted, GROUP_SIZE, EPSILON, tsOut);
        for (let k = 0; k < numRewards; k++) out[order[k]] = tsOut[k];
        return out;
      };
      const ours = new Float32Array(numRewards);
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', () => groupAdvantages({ rewards, groupIds, out: ours })),
          syncPeer('tirl, allocating', 'tirl-alloc', () => groupAdvantages({ rewards, groupIds })),
          cCallPeer([[native.groupAdvantagesCCalls, { rewards, groupIds, out: ours }]]),
          syncPeer('TypeScript, 1 thread', 'typescript', ts),
        ],
        check() {
          groupAdvantages({ rewards, groupIds, out: ours });
          return compareArrays('advantages', ours, ts(), 1e-5);
        },
      };
    },
  };
}

function expandedCase(numSeqs: number, seqLen: number, sizes: SizeName[]): BenchCase {
  const tokens = numSeqs * seqLen;
  return {
    op: 'groupAdvantages',
    id: `groupAdvantages/${numSeqs}x${seqLen}/tokens`,
    title: `groupAdvantages expanded to tokens, ${numSeqs} sequences × ${seqLen} (groups of ${GROUP_SIZE})`,
    sizes,
    bytes: 5 * tokens + 12 * numSeqs + 4,
    byteModel: '5 B/token (mask read, token advantage written) + 12 B/sequence (reward, advantage, offset)',
    bandwidthTarget: 0.6,
    torch: { op: 'groupAdvantages', params: { numRewards: numSeqs, groupSize: GROUP_SIZE, seqLen } },
    setup() {
      const { mask, seqOffsets } = toolUseBatch(numSeqs, seqLen);
      const rewards = binaryRewards(numSeqs);
      const advantages = new Float32Array(numSeqs);
      const tokenAdvantages = new Float32Array(tokens);
      const tsAdvantages = new Float32Array(numSeqs);
      const ours = () => {
        groupAdvantages({ rewards, groupSize: GROUP_SIZE, out: advantages });
        sequenceLogprobsBackward({ gradSeq: advantages, mask, seqOffsets, out: tokenAdvantages });
      };
      const ts = () => {
        groupAdvantagesTs(rewards, GROUP_SIZE, EPSILON, tsAdvantages);
        return sequenceLogprobsBackwardReference(tsAdvantages, mask, seqOffsets, false);
      };
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', ours),
          syncPeer('tirl, allocating', 'tirl-alloc', () =>
            sequenceLogprobsBackward({ gradSeq: groupAdvantages({ rewards, groupSize: GROUP_SIZE }), mask, seqOffsets }),
          ),
          cCallPeer([
            [native.groupAdvantagesCCalls, { rewards, groupSize: GROUP_SIZE, out: advantages }],
            [native.sequenceLogprobsBackwardCCalls, { gradSeq: advantages, mask, seqOffsets, out: tokenAdvantages }],
          ]),
          syncPeer('TypeScript, 1 thread', 'typescript', ts),
        ],
        check() {
          ours();
          return compareArrays('token advantages', tokenAdvantages, ts(), 1e-5);
        },
      };
    },
  };
}

export const cases: BenchCase[] = [
  groupCase(65_536),
  groupIdsCase(65_536),
  expandedCase(512, 2048, ['full']),
  expandedCase(64, 2048, ['quick']),
];
