/**
 * rolloutCorrection cases: verl's K3-RS-Token-TIS preset (RolloutCorrectionConfig
 * .decoupled_k3_rs_token_tis: token-level weights truncated at 2, sequences rejected when
 * their mean k3 exceeds 0.01) with every diagnostic, on a tool-use batch whose rollout
 * log-probs differ from the trainer's by bf16-like noise.
 */
import { rolloutCorrection, type RolloutCorrectionOptions } from '../lib/index.js';
import { Rng, sequenceSlices, toolUseBatch } from './data.js';
import { cCallPeer, compareArrays, compareNumbers, syncPeer, type BenchCase, type SizeName } from './harness.js';
import { native } from '../lib/native.js';
import { rolloutCorrectionReference } from './peers/rollout_correction.js';

export function rolloutCorrectionCase(numSeqs: number, seqLen: number, sizes: SizeName[]): BenchCase {
  const tokens = numSeqs * seqLen;
  const bytes = 14 * tokens + 4 * numSeqs + 4;
  return {
    op: 'rolloutCorrection',
    id: `rolloutCorrection/${numSeqs}x${seqLen}/k3-rs-token-tis`,
    title: `rolloutCorrection, ${numSeqs}×${seqLen} tokens, token TIS + seq_mean_k3 rejection`,
    sizes,
    bytes,
    // Issue 20: rollout correction joins the bench with the other ops' 60% target.
    bandwidthTarget: 0.6,
    byteModel: '14 B/token (logp, rolloutLogp, mask read; weights, mask written) + 4 B/sequence (offset)',
    torch: { op: 'rolloutCorrection', params: { numSeqs, seqLen } },
    setup() {
      const { mask, seqOffsets } = toolUseBatch(numSeqs, seqLen);
      const rng = new Rng(13);
      const logp = rng.uniform(tokens, -5, 0);
      const noise = rng.bell(tokens, 0, 0.1);
      const rolloutLogp = logp.map((x, i) => x + noise[i]);
      const options: RolloutCorrectionOptions = {
        logp, rolloutLogp, mask, seqOffsets,
        rolloutIs: 'token', rolloutIsThreshold: 2, rolloutRs: ['seq_mean_k3'], rolloutRsThreshold: 0.01,
      };
      const out = { weights: new Float32Array(tokens), mask: new Uint8Array(tokens) };
      return {
        peers: [
          syncPeer('tirl, out reused', 'tirl', () => rolloutCorrection({ ...options, out })),
          syncPeer('tirl, allocating', 'tirl-alloc', () => rolloutCorrection(options)),
          cCallPeer([[native.rolloutCorrectionCCalls, { ...options, out }]]),
          syncPeer('TypeScript, 1 thread', 'typescript', () => rolloutCorrectionReference(options)),
        ],
        arithmetic: sequenceSlices(rolloutCorrection, { ...options, out }, seqOffsets, bytes),
        check() {
          const ours = rolloutCorrection(options);
          const ts = rolloutCorrectionReference(options);
          return (
            compareArrays('weights', ours.weights, ts.weights, 1e-6) ??
            compareArrays('mask', ours.mask, ts.mask, 0) ??
            compareNumbers('rollout_is_eff_sample_size', ours.stats.rollout_is_eff_sample_size!, ts.stats.rollout_is_eff_sample_size, 1e-9) ??
            compareNumbers('rollout_rs_masked_fraction', ours.stats.rollout_rs_masked_fraction!, ts.stats.rollout_rs_masked_fraction, 1e-9) ??
            compareNumbers('kl', ours.stats.kl, ts.stats.kl, 1e-9)
          );
        },
      };
    },
  };
}

export const cases: BenchCase[] = [
  rolloutCorrectionCase(512, 2048, ['full']),
  rolloutCorrectionCase(64, 2048, ['quick']),
];
