/**
 * The SIMD paths (TIRL_SIMD=baseline|avx2|avx512, see native/src/common/simd.h) give the
 * same results. Each path this CPU supports runs the key ops in a child process (the path
 * is chosen once per process); the results are compared with the baseline's.
 *
 * The avx2 and avx512 paths may fuse a * b + c into one FMA, the baseline cannot, so the
 * paths agree to rounding, not bitwise: f32 values to 1e-5 relative (the kernel tests'
 * own tolerance) plus 1e-6 of the array's largest magnitude, masks and counts exactly; the
 * outputs that bitwiseAcrossPaths names bitwise. Within one path results stay bitwise identical across
 * thread counts, which each child checks itself.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  ADVANTAGE_ESTIMATORS,
  advantages as estimate,
  dpoLoss,
  feedbackMask,
  groupAdvantages,
  info,
  ppoLoss,
  rolloutCorrection,
  type RolloutCorrectionOptions,
  sequenceLogprobs,
  setThreads,
  tokenLogprobs,
  tokenLogprobsBackward,
} from '../lib/index.js';
import { assertBitwiseEqual, assertClose, Random } from './support.js';

const CHILD = 'TIRL_SIMD_TEST_CHILD';

/** Named outputs of one run: f32 arrays and plain numbers. */
type Outputs = Record<string, Float32Array | Int32Array | Uint8Array | number>;

/** The key ops on fixed inputs large enough to reach every vector loop and its remainder. */
function runOps(): Outputs {
  const random = new Random(2024);
  const tokens = 37;
  const vocab = 5003;  // several 2048-entry blocks and a remainder
  const logits = random.normals(tokens * vocab, 3);
  logits[5] = -Infinity;
  logits[vocab + 7] = 80;
  const bf16 = new Uint16Array(tokens * vocab);
  const bits = new Uint32Array(logits.buffer);
  for (let i = 0; i < bits.length; i++) bf16[i] = bits[i] >>> 16;
  const labels = new Int32Array(tokens).map(() => random.int(0, vocab));
  const gradLogp = random.floats(tokens, -1, 1);
  const gradEntropy = random.floats(tokens, -1, 1);

  const n = 20011;
  const seqOffsets = Int32Array.from([0, 3, 3, 4100, 9000, 17000, n]);
  const logp = random.floats(n, -4, 0);
  const oldLogp = logp.map((x) => x + random.uniform(-0.4, 0.4));
  const refLogp = logp.map((x) => x + random.uniform(-0.3, 0.3));
  const advantages = random.normals(n);
  const mask = new Uint8Array(n).map(() => (random.next() < 0.6 ? 1 : 0));
  const roles = new Uint8Array(n).map(() => random.int(0, 4));
  const pairs = 3001;

  const out: Outputs = {};
  for (const dtype of ['f32', 'bf16'] as const) {
    const input = dtype === 'f32' ? logits : bf16;
    const forward = tokenLogprobs({ logits: input, dtype, vocabSize: vocab, labels, withEntropy: true });
    out[`tokenLogprobs ${dtype} logp`] = forward.logp;
    out[`tokenLogprobs ${dtype} entropy`] = forward.entropy!;
    out[`tokenLogprobsBackward ${dtype}`] = tokenLogprobsBackward({ logits: input, dtype, vocabSize: vocab, labels, gradLogp });
    out[`tokenLogprobsBackward ${dtype} entropy`] = tokenLogprobsBackward({
      logits: input, dtype, vocabSize: vocab, labels, gradLogp, gradEntropy,
    });
  }
  for (const aggregation of ['token-mean', 'seq-mean-token-mean'] as const) {
    const r = ppoLoss({
      logp, oldLogp, advantages, mask, seqOffsets, aggregation, refLogp, klCoef: 0.05, dualClip: 3,
    });
    for (const key of ['loss', 'pgLoss', 'klLoss', 'clipFraction', 'clipFractionLower', 'approxKl', 'maskedTokens'] as const) {
      out[`ppoLoss ${aggregation} ${key}`] = r[key]!;
    }
    out[`ppoLoss ${aggregation} grad`] = r.grad;
  }
  for (const variant of ['sigmoid', 'robust', 'ipo', 'hinge'] as const) {
    const r = dpoLoss({
      policyChosen: logp.subarray(0, pairs),
      policyRejected: oldLogp.subarray(0, pairs),
      refChosen: refLogp.subarray(0, pairs),
      refRejected: advantages.subarray(0, pairs),
      variant,
      labelSmoothing: variant === 'robust' ? 0.1 : 0,
    });
    out[`dpoLoss ${variant} loss`] = r.loss;
    out[`dpoLoss ${variant} rewardAccuracy`] = r.rewardAccuracy;
    out[`dpoLoss ${variant} gradChosen`] = r.gradChosen;
    out[`dpoLoss ${variant} chosenRewards`] = r.chosenRewards;
  }
  out['groupAdvantages'] = groupAdvantages({ rewards: advantages.subarray(0, 20000), groupSize: 8 });
  out['sequenceLogprobs'] = sequenceLogprobs({ logp, mask, seqOffsets, average: true });
  const feedback = feedbackMask({ roles, seqOffsets });
  out['feedbackMask mask'] = feedback.mask;
  out['feedbackMask actionTokens'] = feedback.actionTokens;
  // Dropped sequences, and the first out-of-range role as reported from inside a vector,
  // from a sequence's last partial vector and from a remainder (an integer on every path).
  const keep = new Uint8Array(seqOffsets.length - 1).map((_, s) => (s % 3 === 1 ? 0 : 1));
  const kept = feedbackMask({ roles, seqOffsets, keep });
  out['feedbackMask kept mask'] = kept.mask;
  out['feedbackMask kept actionTokens'] = kept.actionTokens;
  for (const [at, role] of [[70, 4], [4163, 255], [n - 3, 128]]) {
    const bad = roles.slice();
    bad[at] = role;
    bad[at + 1] = 9;
    out[`feedbackMask first bad role near ${at}`] = firstBadRole(() => feedbackMask({ roles: bad, seqOffsets }));
  }
  // Every advantage estimator on 21 sequences of 0 to 300 tokens (two full chunks of 8
  // sequences, whose recurrences run in vector lanes, and a partial one with an empty sequence; lengths unequal so
  // that each lane has a remainder), groups of 3, sequence scores and token rewards.
  const lengths = Array.from({ length: 21 }, (_, s) => (s === 20 ? 0 : random.int(1, 301)));
  const advOffsets = Int32Array.from([0, ...lengths.map(((sum) => (x: number) => (sum += x))(0))]);
  const advTokens = advOffsets[advOffsets.length - 1]!;
  const advMask = new Uint8Array(advTokens).map(() => (random.next() < 0.7 ? 1 : 0));
  const scores = random.normals(21 * 2);
  const tokenRewards = random.normals(advTokens);
  const sumPiSquared = logp.subarray(0, advTokens).map((lp) => Math.exp(2 * lp) + 0.1 * random.next());
  for (const estimator of ADVANTAGE_ESTIMATORS) {
    const grouped = !['reinforce_plus_plus', 'remax', 'gae'].includes(estimator);
    const tokenLevel = ['reinforce_plus_plus', 'remax', 'gae'].includes(estimator);
    for (const rewards of tokenLevel ? ['scores', 'token rewards'] : ['scores']) {
      const r = estimate({
        estimator,
        ...(rewards === 'scores' ? { rewards: scores.subarray(0, estimator === 'gdpo' ? 42 : 21) } : { tokenRewards }),
        mask: advMask,
        seqOffsets: advOffsets,
        ...(grouped ? { groupSize: 3 } : {}),
        ...(estimator === 'gdpo' ? { rewardWeights: Float32Array.of(1, 0.5) } : {}),
        ...(estimator === 'gae' ? { values: logp.subarray(0, advTokens), gamma: 0.9, lam: 0.8 } : {}),
        ...(estimator === 'reinforce_plus_plus' ? { gamma: 0.95 } : {}),
        ...(estimator === 'remax' ? { rewardBaselines: advantages.subarray(0, 21) } : {}),
        ...(estimator.endsWith('optimal_token_baseline')
          ? { oldLogp: logp.subarray(0, advTokens), sumPiSquared }
          : {}),
        withReturns: true,
      });
      out[`advantages ${estimator} ${rewards} advantages`] = r.advantages;
      out[`advantages ${estimator} ${rewards} returns`] = r.returns!;
    }
  }
  Object.assign(out, rolloutCorrectionOps(random));
  // reinforce_plus_plus at gamma 1 with sequence scores takes its closed form.
  const constant = estimate({ estimator: 'reinforce_plus_plus', rewards: scores.subarray(0, 21), mask: advMask, seqOffsets: advOffsets, gamma: 1, withReturns: true });
  out['advantages reinforce_plus_plus gamma 1 advantages'] = constant.advantages;
  out['advantages reinforce_plus_plus gamma 1 returns'] = constant.returns!;
  return out;
}

/**
 * rolloutCorrection's token loop (by hand on whole registers on the avx2 path, by the
 * compiler on the others) and statistics lanes (8, 4 or 2 a path) on 18 sequences of 0 to
 * 1,029 tokens, none but the empty one a multiple of 4 or 8 (each ends in a partial
 * register and a partial lane row; 257 and up span 256-token blocks); 15% masked out.
 * Log-ratios of bf16-like noise, every 37th token's far out (truncated, rejected), four
 * past the ±20 clamp; NaN and Inf in masked-out tokens (ignored), and in a second batch
 * in masked-in ones (propagated). Modes: the bench's (token TIS at 2 + seq_mean_k3), the
 * same with token_k3 and token_k1 rejection and batch normalisation, sequence-level IS
 * with seq_sum_k2 + token_k2, and IcePop with the geometric-mean criterion seq_mean_k1 +
 * seq_max_k2.
 */
function rolloutCorrectionOps(random: Random): Outputs {
  const lengths = [1, 2, 3, 5, 7, 9, 13, 0, 15, 17, 31, 63, 255, 257, 301, 513, 770, 1029];
  const seqOffsets = Int32Array.from([0, ...lengths.map(((sum) => (x: number) => (sum += x))(0))]);
  const n = seqOffsets[seqOffsets.length - 1]!;
  const logp = random.floats(n, -5, 0);
  const noise = random.normals(n, 0.1);
  for (let t = 0; t < n; t += 37) noise[t] = random.uniform(-3, 3);
  const rolloutLogp = logp.map((x, t) => x + noise[t]);
  const mask = new Uint8Array(n).map(() => (random.next() < 0.85 ? 1 : 0));
  for (const [t, d] of [[4, 25], [600, -30], [1500, 21], [n - 2, -1e4]]) {
    rolloutLogp[t] = logp[t] - d; // d = logp - rolloutLogp past the clamp at ±20
    mask[t] = 1;
  }
  const clean = { logp: logp.slice(), rolloutLogp: rolloutLogp.slice(), mask, seqOffsets };
  const dirty = { logp: logp.slice(), rolloutLogp: rolloutLogp.slice(), mask: mask.slice(), seqOffsets };
  [10, 11, 700, 1301, n - 1].forEach((t, k) => {
    clean.mask[t] = 0; // masked out: ignored, whatever they hold
    clean.logp[t] = [NaN, Infinity, -Infinity, NaN, Infinity][k]!;
    clean.rolloutLogp[t] = [Infinity, NaN, 0, -Infinity, NaN][k]!;
  });
  [[20, NaN], [900, Infinity], [2000, -Infinity]].forEach(([t, poison]) => {
    dirty.mask[t] = 1; // masked in: propagated
    dirty.logp[t] = poison;
  });
  const bench = { rolloutIs: 'token', rolloutIsThreshold: 2, rolloutRs: ['seq_mean_k3'], rolloutRsThreshold: 0.01 } as const;
  const modes: [string, Partial<RolloutCorrectionOptions>][] = [
    ['bench', bench],
    ['token k3 k1 normalized', {
      ...bench, rolloutRs: ['token_k3', 'seq_mean_k3', 'token_k1'], rolloutRsThreshold: [0.5, 0.01, 4], rolloutIsBatchNormalize: true,
    }],
    ['sequence', { rolloutIs: 'sequence', rolloutIsThreshold: 5, rolloutRs: ['seq_sum_k2', 'token_k2'], rolloutRsThreshold: [3, 1] }],
    ['geometric', {
      rolloutIs: 'token', rolloutIsThreshold: 2, rolloutIsThresholdLower: 0.5,
      rolloutRs: ['seq_mean_k1', 'seq_max_k2'], rolloutRsThreshold: [1.05, 2],
    }],
  ];
  const out: Outputs = {};
  for (const [batchName, batch] of [['clean', clean], ['NaN', dirty]] as const) {
    for (const [mode, options] of modes) {
      const r = rolloutCorrection({ ...batch, ...options });
      const key = `rolloutCorrection ${mode} ${batchName}`;
      out[`${key} weights`] = r.weights;
      out[`${key} mask`] = r.mask;
      out[`${key} maskedTokens`] = r.maskedTokens;
      out[`${key} validSeqs`] = r.validSeqs;
      out[`${key} nonFinite`] = r.nonFinite;
      for (const [stat, value] of Object.entries(r.stats)) out[`${key} ${stat}`] = value!;
    }
  }
  return out;
}

/**
 * Outputs every path computes with the same operations in the same order (no fused
 * multiply-add anywhere), so bitwise the same: the advantage estimators but the
 * optimal-token baselines (whose path variance's exp may fuse); rolloutCorrection's
 * per-token weights and masks (its token loop's two forms give the same bits) and counts.
 */
function bitwiseAcrossPaths(key: string): boolean {
  return (key.startsWith('advantages ') && !key.includes('optimal_token_baseline'))
    || (key.startsWith('rolloutCorrection ') && ROLLOUT_EXACT.test(key));
}
const ROLLOUT_EXACT = / (weights|mask|maskedTokens|validSeqs|nonFinite)$/;

/**
 * rolloutCorrection's statistics: double sums over 8, 4 or 2 lanes a path
 * (cpu/rollout_correction_kernels.inc), so the paths differ by rounding, within common/simd.h's
 * ~1e-7 relative for sums in double (here they differ in the last bits).
 */
function rolloutStatistic(key: string): boolean {
  return key.startsWith('rolloutCorrection ') && !ROLLOUT_EXACT.test(key);
}

/** The index in `roles[i] = ...` of the RangeError that `call` throws (-1 if none). */
function firstBadRole(call: () => unknown): number {
  try {
    call();
  } catch (error) {
    const match = /roles\[(\d+)\]/.exec((error as Error).message);
    assert.ok(error instanceof RangeError && match !== null, String(error));
    return Number(match[1]);
  }
  return -1;
}

function encode(outputs: Outputs): Record<string, [string, string | number]> {
  const encoded: Record<string, [string, string | number]> = {};
  for (const [key, value] of Object.entries(outputs)) {
    encoded[key] = typeof value === 'number'
      ? ['number', Number.isFinite(value) ? value : String(value)] // JSON has no NaN, Inf
      : [value.constructor.name, Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64')];
  }
  return encoded;
}

function decode(encoded: Record<string, [string, string | number]>): Outputs {
  const outputs: Outputs = {};
  for (const [key, [type, value]] of Object.entries(encoded)) {
    if (type === 'number') {
      outputs[key] = Number(value);
      continue;
    }
    const bytes = Buffer.from(value as string, 'base64');
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    outputs[key] = type === 'Float32Array' ? new Float32Array(buffer)
      : type === 'Int32Array' ? new Int32Array(buffer) : new Uint8Array(buffer);
  }
  return outputs;
}

/** Runs the ops in a child process with TIRL_SIMD = path; returns the path it reports. */
function runChild(path: string): { simd: string; outputs: Outputs } {
  const stdout = execFileSync(process.execPath, [fileURLToPath(import.meta.url)], {
    env: { ...process.env, [CHILD]: '1', TIRL_SIMD: path },
    encoding: 'utf8',
    maxBuffer: 256 << 20,
  });
  const { simd, outputs } = JSON.parse(stdout);
  return { simd, outputs: decode(outputs) };
}

if (process.env[CHILD]) {
  // The child: run on 1 and 3 threads, which must agree bitwise on any path.
  setThreads(1);
  const one = runOps();
  setThreads(3);
  const three = runOps();
  for (const [key, value] of Object.entries(one)) {
    const other = three[key];
    if (typeof value === 'number') assert.ok(Object.is(value, other), `${key}: 1 vs 3 threads`);
    else assertBitwiseEqual(value, other as typeof value, `${key} (1 vs 3 threads)`);
  }
  process.stdout.write(JSON.stringify({ simd: info().simd, outputs: encode(one) }));
} else {
  describe('SIMD paths', () => {
    const baseline = runChild('baseline');
    const names: Record<string, string> = { baseline: baseline.simd, avx2: 'avx2', avx512: 'avx512' };

    it('reports the path that runs; TIRL_SIMD is clamped to what the CPU supports', () => {
      assert.ok(['sse2', 'neon', 'scalar'].includes(baseline.simd), baseline.simd);
      // An unknown name runs the widest path, as does no TIRL_SIMD at all.
      const widest = runChild('no-such-path').simd;
      if (process.env.TIRL_SIMD === undefined) assert.equal(info().simd, widest);
      // A path the CPU lacks falls back to the widest it has: never an illegal instruction.
      for (const path of ['avx2', 'avx512']) {
        const { simd } = runChild(path);
        assert.ok(simd === path || simd === widest, `TIRL_SIMD=${path} ran ${simd}`);
      }
    });

    for (const path of ['avx2', 'avx512']) {
      it(`${path} agrees with the baseline (where this CPU has ${path})`, (t) => {
        const run = runChild(path);
        if (run.simd !== names[path]) {
          t.skip(`this CPU lacks ${path} (ran ${run.simd})`);
          return;
        }
        for (const [key, expected] of Object.entries(baseline.outputs)) {
          const actual = run.outputs[key];
          if (bitwiseAcrossPaths(key) && typeof expected === 'number') {
            assert.ok(Object.is(actual, expected), `${path} ${key}: ${actual} != ${expected}`);
          } else if (bitwiseAcrossPaths(key)) {
            assertBitwiseEqual(actual as ArrayBufferView, expected as ArrayBufferView, `${path} ${key}`);
          } else if (rolloutStatistic(key)) {
            assertClose(actual as number, expected as number, { rtol: 1e-7, atol: 0, label: `${path} ${key}` });
          } else if (expected instanceof Float32Array || typeof expected === 'number') {
            // An absolute floor scaled to the array: gradients of tokenLogprobs are ~1/V
            // but reach ~1 at the label, and the entropy term cancels near its zeros.
            const scale = typeof expected === 'number' ? Math.abs(expected)
              : expected.reduce((m, x) => (Number.isFinite(x) ? Math.max(m, Math.abs(x)) : m), 0);
            assertClose(actual as Float32Array | number, expected, {
              rtol: 1e-5, atol: 1e-6 * scale, label: `${path} ${key}`,
            });
          } else {
            assertBitwiseEqual(actual as typeof expected, expected, `${path} ${key}`);
          }
        }
      });
    }
  });
}
