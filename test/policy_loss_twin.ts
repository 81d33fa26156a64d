/**
 * bypass_mode's IS weights do not depend on where a sequence lies in the batch: run by
 * test/policy_loss.test.ts in a child process under each SIMD path (TIRL_SIMD), it prints
 * `{ simd, failures }` as JSON. The CPU's token pass computes a sequence's weight as it
 * reaches it, and takes that of a sequence straddling a 16,384-token chunk from a pass
 * before it; the token-level batch mean is summed before the pass. Each is the same
 * compiled function of cpu/policy_loss_kernels.inc, so twins give the same bits.
 */
import { info, ppoLoss, type PpoLossOptions } from '../lib/index.js';
import { Random } from './support.js';

const CHUNK = 16384;

/** The failures, each one line; none when every check holds. */
function twinFailures(): string[] {
  const failures: string[] = [];
  const random = new Random(61);

  // Sequence level, the same 2-token sequence inside chunk k - 1 and across the edge of
  // chunks k - 1 and k, for every k; the other tokens masked out. Advantages -1 and
  // token-sum make each gradient its token's weight. An ulp between the fused and unfused
  // exp polynomials shows in about one sequence in 150: 63 twins a call, 60 calls.
  const chunks = 64;
  const n = CHUNK * chunks;
  const logp = new Float32Array(n);
  const oldLogp = new Float32Array(n);
  const advantages = new Float32Array(n).fill(-1);
  const mask = new Uint8Array(n);
  const offsets = [0];
  const pairs: [number, number][] = [];
  for (let k = 1; k < chunks; k++) {
    const inside = (k - 1) * CHUNK + 1000, across = k * CHUNK - 1;
    offsets.push(inside, inside + 2, across, across + 2);
    pairs.push([inside, across]);
    mask.fill(1, inside, inside + 2);
    mask.fill(1, across, across + 2);
  }
  offsets.push(n);
  const seqOffsets = Int32Array.from(offsets);
  for (let trial = 0; trial < 60; trial++) {
    for (const [inside, across] of pairs) {
      for (let j = 0; j < 2; j++) {
        logp[inside + j] = logp[across + j] = random.uniform(-5, 0);
        oldLogp[inside + j] = oldLogp[across + j] = logp[inside + j] + random.uniform(-2, 2);
      }
    }
    const o: PpoLossOptions = {
      logp, oldLogp, advantages, mask, seqOffsets, policyLoss: 'bypass_mode', lossType: 'reinforce',
      rolloutIs: 'sequence', rolloutIsThreshold: 1e6, aggregation: 'token-sum',
    };
    const { grad } = ppoLoss(o);
    for (const [inside, across] of pairs) {
      for (let j = 0; j < 2; j++) {
        if (!Object.is(grad[inside + j], grad[across + j])) {
          failures.push(`sequence level, trial ${trial}: weight at ${inside + j} ${grad[inside + j]}, its twin at ${across + j} ${grad[across + j]}`);
        }
      }
      // Against float64: exp of the float32 sum (the weight's float rounding).
      const sum = Math.fround(logp[inside] - oldLogp[inside]) + Math.fround(logp[inside + 1] - oldLogp[inside + 1]);
      const want = Math.exp(Math.max(-20, Math.min(20, Math.fround(sum))));
      if (Math.abs(grad[inside] - want) > 4e-7 * want) failures.push(`sequence level, trial ${trial}: weight ${grad[inside]}, float64 ${want}`);
    }
  }

  // A sequence of 1,000 tokens at [0, 1000) and again at [16000, 17000) of 20,000 tokens
  // (the other tokens different), REINFORCE's advantages: the same gradient bits at both
  // places, token- and sequence-level, batch-normalised or not.
  {
    const n2 = 20000, length = 1000, second = 16000;
    const logp2 = random.floats(n2, -5, 0);
    const oldLogp2 = logp2.map((x) => x + 0.05 * random.normal());
    const advantages2 = random.normals(n2);
    const mask2 = random.mask(n2, 0.7);
    logp2.copyWithin(second, 0, length);
    oldLogp2.copyWithin(second, 0, length);
    advantages2.copyWithin(second, 0, length);
    mask2.copyWithin(second, 0, length);
    const seqOffsets2 = Int32Array.of(0, length, second, second + length, n2);
    const cases: Partial<PpoLossOptions>[] = [
      { rolloutIs: 'sequence', rolloutIsThreshold: 5 },
      { rolloutIs: 'sequence', rolloutIsThreshold: 5, rolloutIsBatchNormalize: true },
      { rolloutIs: 'token', rolloutIsThreshold: 1.05 },
      { rolloutIs: 'token', rolloutIsThreshold: 1.05, rolloutIsBatchNormalize: true },
      { rolloutIs: 'token', rolloutIsThreshold: 1.05, rolloutIsThresholdLower: 0.97, rolloutIsBatchNormalize: true },
    ];
    for (const c of cases) {
      const { grad } = ppoLoss({
        logp: logp2, oldLogp: oldLogp2, advantages: advantages2, mask: mask2, seqOffsets: seqOffsets2,
        policyLoss: 'bypass_mode', lossType: 'reinforce', ...c,
      });
      for (let t = 0; t < length; t++) {
        if (!Object.is(grad[t], grad[second + t])) {
          failures.push(`${JSON.stringify(c)}: grad[${t}] ${grad[t]}, its twin grad[${second + t}] ${grad[second + t]}`);
          break;
        }
      }
    }

    // The token-level batch mean is the mean of the pass's own weights: the unnormalised
    // pass's gradients (advantages -1, token-sum: each masked-in token's weight) summed in
    // double in token order a 16,384-token chunk, the chunks' sums in order.
    for (const lower of [undefined, 0.97]) {
      const base = {
        logp: logp2, oldLogp: oldLogp2, advantages: new Float32Array(n2).fill(-1), mask: mask2,
        seqOffsets: seqOffsets2, policyLoss: 'bypass_mode' as const, lossType: 'reinforce' as const,
        rolloutIs: 'token' as const, rolloutIsThreshold: 1.05,
        ...(lower === undefined ? {} : { rolloutIsThresholdLower: lower }),
        aggregation: 'token-sum' as const,
      };
      const weights = ppoLoss(base).grad;
      let total = 0, masked = 0;
      for (let begin = 0; begin < n2; begin += CHUNK) {
        let part = 0;
        for (let t = begin; t < Math.min(n2, begin + CHUNK); t++) part += weights[t];
        total += part;
      }
      for (const m of mask2) masked += m;
      const want = total / masked;
      const got = ppoLoss({ ...base, rolloutIsBatchNormalize: true }).rolloutIsBatchNormFactor;
      if (!Object.is(got, want)) failures.push(`token level, lower ${lower}: batch mean ${got}, the mean of the pass's weights ${want}`);
    }
  }
  return failures;
}

process.stdout.write(JSON.stringify({ simd: info().simd, failures: twinFailures() }));
