/**
 * What the fuzzer knows about each op: how to build a valid call of random size, the
 * arguments it takes (for the adversarial mutations and to check that an error names one),
 * and how to check a result against the float64 references of test/reference/.
 */
import assert from 'node:assert/strict';

import type { KlEstimator, PolicyLoss, PpoAggregation, PpoLossOptions, RolloutCorrectionOptions, RolloutRejectionOption } from '../../lib/index.js';
import { finiteDifferenceGradient as dpoGradient, referenceLoss as dpoReference, referenceRewards } from '../reference/dpo_loss.js';
import { reference as feedbackReference } from '../reference/feedback_mask.js';
import { reference as advantagesReference, type Estimator, type ReferenceInputs } from '../reference/advantages.js';
import { reference as groupReference } from '../reference/group_advantages.js';
import { policyFiniteDifference as ppoGradient, policyReference as ppoReference } from '../reference/policy_loss.js';
import { rolloutCorrectionReference } from '../../benchmarks/peers/rollout_correction.js';
import { reference as sequenceReference, referenceBackward as sequenceBackwardReference } from '../reference/sequence_logprobs.js';
import { fromBf16, reference as tokenReference, referenceGrad as tokenGradReference, toBf16 } from '../reference/token_logprobs.js';
import { assertClose, Random } from '../support.js';

export const OP_NAMES = [
  'ppoLoss',
  'groupAdvantages',
  'advantages',
  'dpoLoss',
  'feedbackMask',
  'sequenceLogprobs',
  'sequenceLogprobsBackward',
  'tokenLogprobs',
  'tokenLogprobsBackward',
  'rolloutCorrection',
] as const;
export type OpName = (typeof OP_NAMES)[number];

/** Element type of an array argument. */
export type ArrayKind = 'f32' | 'u8' | 'i32' | 'u16';
/** How an argument is read: an array of a kind, or a scalar of a kind. */
export type ArgumentKind = ArrayKind | 'number' | 'integer' | 'boolean' | 'choice';

export interface Argument {
  name: string;
  kind: ArgumentKind;
  required?: boolean;
  /** For 'choice': the accepted strings. */
  choices?: readonly string[];
}

export type Options = Record<string, unknown>;

export interface OpSpec {
  name: OpName;
  arguments: readonly Argument[];
  /** Members of `out` when it is an object of arrays; absent when `out` is one array. */
  outMembers?: Readonly<Record<string, ArrayKind>>;
  /** Element type of `out` when it is one array. */
  outKind?: ArrayKind;
  /** A valid call; the same `rng` state always builds the same call. */
  build(rng: Random): Options;
  /**
   * Throws (an AssertionError) unless `result` holds the op's correct values for `options`
   * (a fresh build of the call, its inputs untouched by the kernel).
   */
  check(options: Options, result: unknown): void;
}

export type Constructor = new (n: number) => Float32Array | Uint8Array | Int32Array | Uint16Array;
export const ARRAY_TYPES: Record<ArrayKind, Constructor> = {
  f32: Float32Array,
  u8: Uint8Array,
  i32: Int32Array,
  u16: Uint16Array,
};

/** Largest token count of a ragged call: several kernel chunks, yet quick to check. */
const MAX_TOKENS = 40_000;

/** Ragged offsets of `b` sequences, up to MAX_TOKENS tokens in all. */
function offsets(rng: Random, b: number, lengths: readonly number[]): Int32Array {
  return rng.seqOffsets(b, 0, Math.max(1, Math.min(rng.pick(lengths), Math.floor(MAX_TOKENS / Math.max(b, 1)))));
}

/** Mostly small sizes, sometimes a few thousand (several kernel chunks). */
function size(rng: Random, small: number, large: number): number {
  const u = rng.next();
  if (u < 0.1) return 0;
  if (u < 0.75) return rng.int(1, small + 1);
  if (u < 0.97) return rng.int(1, 8 * small);
  return rng.int(1, large);
}

const F32 = { rtol: 1e-5, atol: 1e-6 };

/** Sometimes puts one of `values` in `array` (valid inputs: they propagate as IEEE says). */
function poison(rng: Random, array: Float32Array, values = [NaN, Infinity, -Infinity]): Float32Array {
  if (array.length > 0 && rng.next() < 0.05) array[rng.int(0, array.length)] = rng.pick(values);
  return array;
}

const AGGREGATIONS: readonly PpoAggregation[] = ['token-mean', 'token-sum', 'seq-mean-token-sum', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'];
const ESTIMATORS: readonly KlEstimator[] = ['k1', 'k2', 'k3', 'abs', 'low_var_kl', 'mse', 'k1+', 'k3+', 'low_var_kl+', 'abs+'];
const POLICY_LOSSES: readonly PolicyLoss[] = ['vanilla', 'gspo', 'dppo_tv', 'dppo_kl', 'sapo', 'gpg', 'clip_cov', 'kl_cov', 'geo_mean', 'dro', 'cispo', 'reinforce', 'bypass_mode'];
const DPO_VARIANTS = ['sigmoid', 'hinge', 'ipo', 'robust'] as const;

/** Gradients by finite differences cost O(N^2): checked for calls up to this many tokens. */
const GRADIENT_CHECK_LIMIT = 48;

const ppoLoss: OpSpec = {
  name: 'ppoLoss',
  arguments: [
    { name: 'logp', kind: 'f32', required: true },
    { name: 'oldLogp', kind: 'f32', required: true },
    { name: 'advantages', kind: 'f32', required: true },
    { name: 'mask', kind: 'u8', required: true },
    { name: 'seqOffsets', kind: 'i32' },
    { name: 'refLogp', kind: 'f32' },
    { name: 'weights', kind: 'f32' },
    { name: 'clipLow', kind: 'number' },
    { name: 'clipHigh', kind: 'number' },
    { name: 'dualClip', kind: 'number' },
    { name: 'aggregation', kind: 'choice', choices: AGGREGATIONS },
    { name: 'tokenNormalizer', kind: 'number' },
    { name: 'seqNormalizer', kind: 'number' },
    { name: 'horizon', kind: 'number' },
    { name: 'dpSize', kind: 'number' },
    { name: 'klCoef', kind: 'number' },
    { name: 'klEstimator', kind: 'choice', choices: ESTIMATORS },
    { name: 'ratioLevel', kind: 'choice', choices: ['token', 'sequence'] },
    { name: 'policyLoss', kind: 'choice', choices: POLICY_LOSSES },
    { name: 'clipRatioC', kind: 'number' },
    { name: 'tauPos', kind: 'number' },
    { name: 'tauNeg', kind: 'number' },
    { name: 'clipCovRatio', kind: 'number' },
    { name: 'clipCovLb', kind: 'number' },
    { name: 'clipCovUb', kind: 'number' },
    { name: 'seed', kind: 'integer' },
    { name: 'klCovRatio', kind: 'number' },
    { name: 'ppoKlCoef', kind: 'number' },
    { name: 'droBeta', kind: 'number' },
    { name: 'lossType', kind: 'choice', choices: ['ppo_clip', 'reinforce'] },
    { name: 'rolloutIs', kind: 'choice', choices: ['none', 'token', 'sequence'] },
    { name: 'rolloutIsThreshold', kind: 'number' },
    { name: 'rolloutIsThresholdLower', kind: 'number' },
    { name: 'rolloutIsBatchNormalize', kind: 'boolean' },
  ],
  outMembers: { grad: 'f32' },
  build(rng) {
    const b = size(rng, 6, 300);
    const seqOffsets = offsets(rng, b, [1, 8, 40]);
    const n = seqOffsets[b];
    const logp = new Float32Array(n);
    const oldLogp = new Float32Array(n);
    const refLogp = new Float32Array(n);
    for (let t = 0; t < n; t++) {
      logp[t] = rng.uniform(-4, -0.01);
      oldLogp[t] = logp[t] + rng.normal() * 0.4;
      refLogp[t] = logp[t] + rng.normal() * 0.6;
    }
    const o: Options = { logp: poison(rng, logp), oldLogp: poison(rng, oldLogp), advantages: poison(rng, rng.normals(n)), mask: rng.mask(n, rng.next()) };
    const aggregation = rng.pick(AGGREGATIONS);
    // Half the calls the original PPO clip (policyLoss absent), else any policy loss with
    // only the options it reads.
    const loss: PolicyLoss = rng.next() < 0.5 ? 'vanilla' : rng.pick(POLICY_LOSSES);
    if (loss !== 'vanilla' || rng.next() < 0.1) o.policyLoss = loss;
    const lossType = loss === 'bypass_mode' && rng.next() < 0.6 ? 'reinforce' : 'ppo_clip';
    if (loss === 'bypass_mode' && (lossType === 'reinforce' || rng.next() < 0.3)) o.lossType = lossType;
    const clips = loss === 'vanilla' || loss === 'gspo' || loss === 'dppo_tv' || loss === 'dppo_kl' || loss === 'clip_cov' || loss === 'geo_mean' || loss === 'cispo' || (loss === 'bypass_mode' && lossType === 'ppo_clip');
    const sequence = loss === 'gspo' || (loss === 'vanilla' && rng.next() < 0.25);
    if (rng.next() < 0.8) o.aggregation = aggregation;
    if (loss === 'vanilla') {
      if (sequence) o.ratioLevel = 'sequence';
      else if (rng.next() < 0.2) o.ratioLevel = 'token';
    }
    switch (loss) {
      case 'dppo_tv':
      case 'dppo_kl':
        if (rng.next() < 0.6) o.clipRatioC = rng.uniform(0.5, 5);
        break;
      case 'sapo':
        if (rng.next() < 0.6) o.tauPos = rng.uniform(0.2, 3);
        if (rng.next() < 0.6) o.tauNeg = rng.uniform(0.2, 3);
        break;
      case 'clip_cov':
        if (rng.next() < 0.8) o.clipCovRatio = rng.uniform(0.001, 0.5);
        if (rng.next() < 0.6) o.clipCovLb = rng.uniform(-1, 0.5);
        if (rng.next() < 0.6) o.clipCovUb = rng.uniform(1, 6);
        if (rng.next() < 0.6) o.seed = rng.int(0, 1000);
        break;
      case 'kl_cov':
        if (rng.next() < 0.8) o.klCovRatio = rng.uniform(0.001, 0.5);
        if (rng.next() < 0.6) o.ppoKlCoef = rng.uniform(0, 2);
        break;
      case 'dro':
        o.droBeta = rng.uniform(0.01, 2);
        break;
      case 'bypass_mode':
        if (lossType === 'reinforce') {
          if (rng.next() < 0.8) o.rolloutIs = rng.pick(['none', 'token', 'sequence']);
          if (rng.next() < 0.5) o.rolloutIsThreshold = rng.uniform(0.5, 5);
          if (rng.next() < 0.3) o.rolloutIsThresholdLower = rng.uniform(0.05, 0.5);
          if (rng.next() < 0.3) o.rolloutIsBatchNormalize = rng.next() < 0.5;
        }
        break;
    }
    const needsSequences = sequence || loss === 'geo_mean' || o.rolloutIs === 'sequence' || (o.aggregation !== undefined && aggregation.startsWith('seq')) || (loss === 'sapo' && o.aggregation === undefined);
    if (needsSequences || rng.next() < 0.5) o.seqOffsets = seqOffsets;
    if (clips && rng.next() < 0.5) o.clipLow = sequence ? 0.05 : rng.uniform(0, 0.4);
    if (clips && rng.next() < 0.3) o.clipHigh = sequence ? 0.08 : rng.uniform(0, 0.5);
    if ((loss === 'vanilla' || (loss === 'bypass_mode' && lossType === 'ppo_clip')) && !sequence && rng.next() < 0.3) o.dualClip = rng.uniform(1.1, 5);
    if (rng.next() < 0.4) {
      o.refLogp = poison(rng, refLogp);
      if (rng.next() < 0.7) o.klCoef = rng.uniform(0, 0.5);
      if (rng.next() < 0.7) o.klEstimator = rng.pick(ESTIMATORS);
    }
    if (loss !== 'bypass_mode' && rng.next() < 0.3) o.weights = poison(rng, rng.floats(n, 0.1, 2));
    if (rng.next() < 0.2) o.tokenNormalizer = rng.uniform(1, 1000);
    if (rng.next() < 0.2) o.seqNormalizer = rng.uniform(1, 100);
    if (rng.next() < 0.2) o.horizon = rng.uniform(1, 4096);
    if (rng.next() < 0.2) o.dpSize = rng.int(1, 9);
    if (rng.next() < 0.3) o.out = { grad: new Float32Array(n).fill(NaN) };
    return o;
  },
  check(options, result) {
    const o = options as unknown as PpoLossOptions;
    const got = result as Record<string, number> & { grad: Float32Array };
    const want = ppoReference(o);
    const atol = 1e-6 * want.magnitude;
    assertClose(got.loss, want.loss, { atol, label: 'loss' });
    assertClose(got.pgLoss, want.pgLoss, { atol, label: 'pgLoss' });
    if (o.refLogp) assertClose(got.klLoss, want.klLoss, { atol, label: 'klLoss' });
    else assert.equal(got.klLoss, undefined, 'klLoss without refLogp');
    assertClose(got.clipFraction, want.clipFraction, { label: 'clipFraction' });
    assertClose(got.clipFractionLower, want.clipFractionLower, { label: 'clipFractionLower' });
    assertClose(got.approxKl, want.approxKl, { label: 'approxKl' });
    assert.equal(got.nonFinite, want.nonFinite, 'nonFinite');
    assert.equal(got.maskedTokens, want.maskedTokens, 'maskedTokens');
    if (o.policyLoss === 'clip_cov' || o.policyLoss === 'kl_cov') assert.equal(got.selectedTokens, want.selectedTokens, 'selectedTokens');
    assert.ok(got.grad instanceof Float32Array && got.grad.length === o.logp.length, 'grad length');
    if (o.logp.length > GRADIENT_CHECK_LIMIT) return;
    const fd = ppoGradient(o);
    // The policy and KL terms of a token's gradient may nearly cancel: f32 rounds each term,
    // so the tolerance scales with the terms, not with their difference.
    const policyOnly = o.refLogp && o.klCoef ? ppoGradient({ ...o, klCoef: 0 }) : fd;
    const termScale = (t: number): number => {
      const scale = Math.abs(policyOnly[t]) + Math.abs(fd[t] - policyOnly[t]);
      return Number.isFinite(scale) ? scale : 0;
    };
    let largest = 0;
    for (const g of fd) if (Number.isFinite(g)) largest = Math.max(largest, Math.abs(g));
    // Central differences of a float64 loss L carry a rounding error of about 1e-16 |L| / h.
    const fdNoise = 1e-11 * want.magnitude;
    for (let t = 0; t < fd.length; t++) {
      // A non-finite input: PyTorch's autograd gives what IEEE gives (0 * Inf = NaN through
      // an unclamped exp), which differences of the loss do not see.
      const finiteInputs = [o.logp[t], o.oldLogp[t], o.advantages[t]].every(Number.isFinite);
      if (!o.mask[t]) assert.equal(got.grad[t], 0, `grad[${t}] masked out`);
      else if (!finiteInputs) continue;
      // NaN: a kink (one-sided derivative); Inf: a normaliser so small that the loss overflows.
      else if (Number.isFinite(fd[t])) assertClose(got.grad[t], fd[t], { rtol: 1e-5, atol: 1e-6 * largest + 1e-6 * termScale(t) + fdNoise, label: `grad[${t}]` });
    }
  },
};

const groupAdvantages: OpSpec = {
  name: 'groupAdvantages',
  arguments: [
    { name: 'rewards', kind: 'f32', required: true },
    { name: 'groupIds', kind: 'i32' },
    { name: 'groupSize', kind: 'integer' },
    { name: 'scaleByStd', kind: 'boolean' },
    { name: 'epsilon', kind: 'number' },
  ],
  outKind: 'f32',
  build(rng) {
    const groupSize = rng.int(1, 17);
    const b = size(rng, 4, 500) * groupSize;
    const o: Options = { rewards: poison(rng, rng.normals(b, 2)) };
    if (rng.next() < 0.5) {
      o.groupSize = groupSize;
    } else {
      const pool = Int32Array.from({ length: Math.max(1, b >> 2) }, () => rng.int(-(2 ** 31), 2 ** 31 - 1));
      o.groupIds = Int32Array.from({ length: b }, () => pool[rng.int(0, pool.length)]);
    }
    if (rng.next() < 0.3) o.scaleByStd = rng.next() < 0.5;
    if (rng.next() < 0.3) o.epsilon = rng.pick([0, 1e-6, 0.5]);
    if (rng.next() < 0.3) o.out = new Float32Array(b).fill(NaN);
    return o;
  },
  check(options, result) {
    const rewards = options.rewards as Float32Array;
    const ids = (options.groupIds as Int32Array | undefined) ?? Int32Array.from({ length: rewards.length }, (_, i) => Math.floor(i / (options.groupSize as number)));
    const want = groupReference(rewards, ids, (options.scaleByStd as boolean | undefined) ?? true, (options.epsilon as number | undefined) ?? 1e-6);
    assert.ok(result instanceof Float32Array, 'a Float32Array');
    assertClose(result, want, { label: 'advantages' });
  },
};

const ADVANTAGE_ESTIMATORS: readonly Estimator[] = [
  'grpo', 'grpo_passk', 'gdpo', 'rloo', 'reinforce_plus_plus', 'reinforce_plus_plus_baseline',
  'remax', 'opo', 'gpg', 'gae', 'optimal_token_baseline', 'tir_optimal_token_baseline',
];
const UNGROUPED_ESTIMATORS: readonly Estimator[] = ['reinforce_plus_plus', 'remax', 'gae'];

const advantages: OpSpec = {
  name: 'advantages',
  arguments: [
    { name: 'estimator', kind: 'choice', choices: ADVANTAGE_ESTIMATORS },
    { name: 'rewards', kind: 'f32' },
    { name: 'tokenRewards', kind: 'f32' },
    { name: 'mask', kind: 'u8', required: true },
    { name: 'seqOffsets', kind: 'i32', required: true },
    { name: 'groupIds', kind: 'i32' },
    { name: 'groupSize', kind: 'integer' },
    { name: 'normAdvByStdInGrpo', kind: 'boolean' },
    { name: 'epsilon', kind: 'number' },
    { name: 'rewardWeights', kind: 'f32' },
    { name: 'gamma', kind: 'number' },
    { name: 'lam', kind: 'number' },
    { name: 'values', kind: 'f32' },
    { name: 'rewardBaselines', kind: 'f32' },
    { name: 'fNorm', kind: 'number' },
    { name: 'oldLogp', kind: 'f32' },
    { name: 'sumPiSquared', kind: 'f32' },
    { name: 'rolloutIsWeights', kind: 'f32' },
    { name: 'handleZeroTail', kind: 'boolean' },
    { name: 'withReturns', kind: 'boolean' },
  ],
  outMembers: { advantages: 'f32', returns: 'f32' },
  build(rng) {
    const estimator = rng.pick(ADVANTAGE_ESTIMATORS);
    const groupSize = rng.int(1, 9);
    const b = size(rng, 12, 400) * groupSize;
    const seqOffsets = offsets(rng, b, [1, 4, 16, 200]);
    const n = seqOffsets[b]!;
    const o: Options = { estimator, mask: rng.mask(n, 0.8), seqOffsets };
    const keys = estimator === 'gdpo' ? rng.int(1, 4) : 1;
    if (rng.next() < 0.5 || keys > 1) o.rewards = poison(rng, Float32Array.from({ length: keys * b }, () => (rng.next() < 0.5 ? Math.round(rng.next()) : rng.normal())));
    else o.tokenRewards = poison(rng, Float32Array.from({ length: n }, () => (rng.next() < 0.2 ? rng.normal() : 0)));
    if (!UNGROUPED_ESTIMATORS.includes(estimator)) {
      if (rng.next() < 0.3) o.groupSize = groupSize;
      else {
        const pool = Int32Array.from({ length: Math.max(1, b >> 1) }, () => rng.int(-(2 ** 31), 2 ** 31 - 1));
        o.groupIds = Int32Array.from({ length: b }, () => pool[rng.int(0, pool.length)]!);
      }
    }
    if (['grpo', 'grpo_passk', 'gdpo'].includes(estimator)) {
      if (rng.next() < 0.3) o.normAdvByStdInGrpo = rng.next() < 0.5;
      if (rng.next() < 0.3) o.epsilon = rng.pick([0, 1e-6, 0.5]);
    }
    if (estimator === 'gdpo' && rng.next() < 0.5) o.rewardWeights = rng.normals(keys);
    if (estimator === 'gae' || estimator === 'reinforce_plus_plus') o.gamma = rng.pick([0, 0.9, 1]);
    if (estimator === 'gae') {
      o.lam = rng.pick([0, 0.95, 1]);
      o.values = rng.normals(n);
    }
    if (estimator === 'remax') o.rewardBaselines = rng.normals(b);
    if (estimator === 'gpg' && rng.next() < 0.5) o.fNorm = rng.pick([0.5, 1, 3]);
    if (estimator.endsWith('optimal_token_baseline')) {
      const oldLogp = Float32Array.from({ length: n }, () => Math.log(rng.uniform(0.01, 1)));
      o.oldLogp = oldLogp;
      o.sumPiSquared = Float32Array.from(oldLogp, (lp) => Math.exp(2 * lp) + rng.uniform(0, 1 - Math.exp(2 * lp)));
      if (rng.next() < 0.5) o.rolloutIsWeights = rng.floats(n, 0.5, 2);
      if (rng.next() < 0.3) o.handleZeroTail = rng.next() < 0.5;
      if (rng.next() < 0.3) o.epsilon = rng.pick([0, 1e-8, 0.5]);
    }
    if (rng.next() < 0.5) o.withReturns = true;
    if (rng.next() < 0.3) o.out = { advantages: new Float32Array(n).fill(NaN), ...(o.withReturns ? { returns: new Float32Array(n).fill(NaN) } : {}) };
    return o;
  },
  check(options, result) {
    const seqOffsets = options.seqOffsets as Int32Array;
    const groupIds = (options.groupIds as Int32Array | undefined) ??
      (options.groupSize === undefined ? undefined : Int32Array.from({ length: seqOffsets.length - 1 }, (_, i) => Math.floor(i / (options.groupSize as number))));
    const want = advantagesReference({ ...(options as unknown as ReferenceInputs), estimator: (options.estimator as Estimator | undefined) ?? 'grpo', groupIds });
    const got = result as { advantages: Float32Array; returns?: Float32Array };
    assert.ok(got.advantages instanceof Float32Array, 'advantages: a Float32Array');
    assertClose(got.advantages, want.advantages, { rtol: 2e-5, atol: 2e-5 + 1e-6 * want.magnitude, label: 'advantages' });
    if (options.withReturns) assertClose(got.returns!, want.returns, { rtol: 2e-5, atol: 2e-5, label: 'returns' });
    else assert.equal(got.returns, undefined, 'no returns');
  },
};

const dpoLoss: OpSpec = {
  name: 'dpoLoss',
  arguments: [
    { name: 'policyChosen', kind: 'f32', required: true },
    { name: 'policyRejected', kind: 'f32', required: true },
    { name: 'refChosen', kind: 'f32', required: true },
    { name: 'refRejected', kind: 'f32', required: true },
    { name: 'beta', kind: 'number' },
    { name: 'labelSmoothing', kind: 'number' },
    { name: 'variant', kind: 'choice', choices: DPO_VARIANTS },
  ],
  outMembers: { gradChosen: 'f32', gradRejected: 'f32', chosenRewards: 'f32', rejectedRewards: 'f32' },
  build(rng) {
    const n = size(rng, 24, 5000);
    const policyChosen = rng.floats(n, -300, -20);
    const policyRejected = rng.floats(n, -300, -20);
    const o: Options = {
      policyChosen: poison(rng, policyChosen),
      policyRejected,
      refChosen: Float32Array.from(policyChosen, (x) => x + rng.normal() * 8),
      refRejected: Float32Array.from(policyRejected, (x) => x + rng.normal() * 8),
    };
    if (rng.next() < 0.7) o.beta = rng.pick([0.01, 0.1, 0.3, 0.5]);
    if (rng.next() < 0.5) o.labelSmoothing = rng.pick([0, 0.1, 0.25, 0.45]);
    if (rng.next() < 0.7) o.variant = rng.pick(DPO_VARIANTS);
    if (rng.next() < 0.3) {
      const out: Record<string, Float32Array> = {};
      for (const member of Object.keys(this.outMembers!)) if (rng.next() < 0.6) out[member] = new Float32Array(n).fill(NaN);
      o.out = out;
    }
    return o;
  },
  check(options, result) {
    const p = options as unknown as Parameters<typeof dpoReference>[0];
    const beta = (options.beta as number | undefined) ?? 0.1;
    const ls = (options.labelSmoothing as number | undefined) ?? 0;
    const variant = (options.variant as (typeof DPO_VARIANTS)[number] | undefined) ?? 'sigmoid';
    const got = result as { loss: number; rewardAccuracy: number } & Record<'gradChosen' | 'gradRejected' | 'chosenRewards' | 'rejectedRewards', Float32Array>;
    const loss = dpoReference(p, beta, ls, variant);
    const rewards = referenceRewards(p, beta);
    // Per-pair math runs in f32 (as TRL's): with a beta so large that a reward leaves the f32
    // range, Inf and NaN are the documented IEEE outcome, not comparable to float64 values.
    const F32_MAX = 3.4028234663852886e38;
    if ([loss, ...rewards.chosen, ...rewards.rejected].some((x) => Math.abs(x) > F32_MAX / 4)) return;
    assertClose(got.loss, loss, { label: 'loss' });
    assertClose(got.chosenRewards, rewards.chosen, { label: 'chosenRewards' });
    assertClose(got.rejectedRewards, rewards.rejected, { label: 'rejectedRewards' });
    assertClose(got.rewardAccuracy, rewards.accuracy, { label: 'rewardAccuracy' });
    // A NaN or infinite pair makes the mean loss, and so every finite difference, non-finite.
    if (p.policyChosen.length > GRADIENT_CHECK_LIMIT || !Number.isFinite(loss)) return;
    // The kernel's f32 exp floors at about 1.6e-38 (math/dpo_loss.h), so a saturated sigmoid
    // gradient is beta * 1.6e-38 rather than 0: visible only with an absurd beta.
    const tolerance = { rtol: 1e-4, atol: 1e-8 + beta * 2e-38 };
    const h = 1e-3; // the finite-difference step of the reference
    // The sigmoid bends over 1 / beta: a step of h resolves it only while beta * h is small.
    if (beta * h > 1e-2) return;
    for (const which of ['policyChosen', 'policyRejected'] as const) {
      const fd = dpoGradient(p, which, beta, ls, variant);
      const grad = which === 'policyChosen' ? got.gradChosen : got.gradRejected;
      for (let i = 0; i < fd.length; i++) {
        // The hinge's kink at beta * delta = 1: a central difference across it is no derivative.
        const delta = p.policyChosen[i] - p.refChosen[i] - (p.policyRejected[i] - p.refRejected[i]);
        if (variant === 'hinge' && Math.abs(1 - beta * delta) <= 2 * beta * h) continue;
        // IPO's gradient 2 (delta - 1 / (2 beta)) / n cancels near its minimum: f32 rounds
        // each term (and beta) to a few ulps, however small their difference.
        const ipoRounding = variant === 'ipo' ? (8 * 2 ** -24 * (Math.abs(delta) + 1 / (2 * beta))) / fd.length : 0;
        assertClose(grad[i], fd[i], { ...tolerance, atol: tolerance.atol + ipoRounding, label: `${which} gradient[${i}]` });
      }
    }
  },
};

const feedbackMask: OpSpec = {
  name: 'feedbackMask',
  arguments: [
    { name: 'roles', kind: 'u8', required: true },
    { name: 'seqOffsets', kind: 'i32', required: true },
    { name: 'keep', kind: 'u8' },
  ],
  outMembers: { mask: 'u8', actionTokens: 'i32' },
  build(rng) {
    const b = size(rng, 6, 2000);
    const seqOffsets = offsets(rng, b, [1, 10, 300]);
    const n = seqOffsets[b];
    const roles = new Uint8Array(n);
    for (let i = 0; i < n; i++) roles[i] = rng.int(0, 4);
    const o: Options = { roles, seqOffsets };
    if (rng.next() < 0.5) o.keep = rng.mask(b, 0.7);
    if (rng.next() < 0.3) {
      o.out = {};
      if (rng.next() < 0.6) (o.out as Options).mask = new Uint8Array(n).fill(9);
      if (rng.next() < 0.6) (o.out as Options).actionTokens = new Int32Array(b).fill(-1);
    }
    return o;
  },
  check(options, result) {
    const want = feedbackReference(options.roles as Uint8Array, options.seqOffsets as Int32Array, options.keep as Uint8Array | undefined);
    const got = result as { mask: Uint8Array; actionTokens: Int32Array };
    assert.deepEqual(got.mask, want.mask);
    assert.deepEqual(got.actionTokens, want.actionTokens);
  },
};

const sequenceLogprobs: OpSpec = {
  name: 'sequenceLogprobs',
  arguments: [
    { name: 'logp', kind: 'f32', required: true },
    { name: 'mask', kind: 'u8', required: true },
    { name: 'seqOffsets', kind: 'i32', required: true },
    { name: 'average', kind: 'boolean' },
  ],
  outKind: 'f32',
  build(rng) {
    const b = size(rng, 6, 2000);
    const seqOffsets = offsets(rng, b, [1, 10, 300]);
    const n = seqOffsets[b];
    const o: Options = { logp: poison(rng, rng.floats(n, -12, 0)), mask: rng.mask(n, 0.6), seqOffsets };
    if (rng.next() < 0.5) o.average = rng.next() < 0.5;
    if (rng.next() < 0.3) o.out = new Float32Array(b).fill(NaN);
    return o;
  },
  check(options, result) {
    const want = sequenceReference(options.logp as Float32Array, options.mask as Uint8Array, options.seqOffsets as Int32Array, options.average === true);
    assert.ok(result instanceof Float32Array, 'a Float32Array');
    assertClose(result, want, { label: 'sequence log-probs' });
  },
};

const sequenceLogprobsBackward: OpSpec = {
  name: 'sequenceLogprobsBackward',
  arguments: [
    { name: 'gradSeq', kind: 'f32', required: true },
    { name: 'mask', kind: 'u8', required: true },
    { name: 'seqOffsets', kind: 'i32', required: true },
    { name: 'average', kind: 'boolean' },
  ],
  outKind: 'f32',
  build(rng) {
    const b = size(rng, 6, 2000);
    const seqOffsets = offsets(rng, b, [1, 10, 300]);
    const n = seqOffsets[b];
    const o: Options = { gradSeq: poison(rng, rng.normals(b)), mask: rng.mask(n, 0.6), seqOffsets };
    if (rng.next() < 0.5) o.average = rng.next() < 0.5;
    if (rng.next() < 0.3) o.out = new Float32Array(n).fill(NaN);
    return o;
  },
  check(options, result) {
    const want = sequenceBackwardReference(options.gradSeq as Float32Array, options.mask as Uint8Array, options.seqOffsets as Int32Array, options.average === true);
    assert.ok(result instanceof Float32Array, 'a Float32Array');
    assertClose(result, want, { rtol: 1e-6, atol: 0, label: 'gradient' });
  },
};

const LOGITS_ARGUMENTS: readonly Argument[] = [
  { name: 'logits', kind: 'f32', required: true },
  { name: 'vocabSize', kind: 'integer', required: true },
  { name: 'labels', kind: 'i32', required: true },
  { name: 'temperature', kind: 'number' },
  { name: 'dtype', kind: 'choice', choices: ['f32', 'bf16'] },
];

/** Logits of random shape, f32 or bf16, with labels in range. */
function buildLogits(rng: Random): Options {
  const vocabSize = rng.next() < 0.05 ? rng.int(2049, 5000) : rng.int(1, 300);
  const n = Math.min(size(rng, 6, 40), Math.floor(20_000 / vocabSize));
  const logits = poison(rng, rng.normals(n * vocabSize, 3));
  const labels = Int32Array.from({ length: n }, () => rng.int(0, vocabSize));
  const o: Options = { logits, vocabSize, labels };
  if (rng.next() < 0.3) {
    o.logits = toBf16(logits);
    o.dtype = 'bf16';
  } else if (rng.next() < 0.2) {
    o.dtype = 'f32';
  }
  if (rng.next() < 0.5) o.temperature = rng.pick([0.7, 1, 2]);
  return o;
}

/** The logits as float32 values, as the kernel reads them. */
function logitValues(options: Options): Float32Array {
  return options.dtype === 'bf16' ? fromBf16(options.logits as Uint16Array) : (options.logits as Float32Array);
}

const tokenLogprobs: OpSpec = {
  name: 'tokenLogprobs',
  arguments: [...LOGITS_ARGUMENTS, { name: 'withEntropy', kind: 'boolean' }],
  outMembers: { logp: 'f32', entropy: 'f32' },
  build(rng) {
    const o = buildLogits(rng);
    const n = (o.labels as Int32Array).length;
    if (rng.next() < 0.5) o.withEntropy = rng.next() < 0.7;
    if (rng.next() < 0.3) {
      o.out = {};
      if (rng.next() < 0.6) (o.out as Options).logp = new Float32Array(n).fill(NaN);
      if (rng.next() < 0.6) (o.out as Options).entropy = new Float32Array(n).fill(NaN);
    }
    return o;
  },
  check(options, result) {
    const labels = options.labels as Int32Array;
    const want = tokenReference(logitValues(options), options.vocabSize as number, labels, (options.temperature as number | undefined) ?? 1);
    const got = result as { logp: Float32Array; entropy?: Float32Array };
    assertClose(got.logp, want.logp, { ...F32, label: 'logp' });
    if (options.withEntropy === true) assertClose(got.entropy!, want.entropy, { ...F32, label: 'entropy' });
    else assert.equal(got.entropy, undefined, 'no entropy without withEntropy');
  },
};

const tokenLogprobsBackward: OpSpec = {
  name: 'tokenLogprobsBackward',
  arguments: [...LOGITS_ARGUMENTS, { name: 'gradLogp', kind: 'f32', required: true }, { name: 'gradEntropy', kind: 'f32' }],
  outKind: 'f32',
  build(rng) {
    const o = buildLogits(rng);
    const n = (o.labels as Int32Array).length;
    // NaN only: with an infinite gradient the kernel makes the row NaN (PyTorch: NaN at the
    // label, -Inf elsewhere) where the reference's closed form g * (1 - p) gives +-Inf.
    o.gradLogp = poison(rng, rng.normals(n), [NaN]);
    if (rng.next() < 0.5) o.gradEntropy = poison(rng, rng.normals(n), [NaN]);
    const u = rng.next();
    // The documented in-place backward: `out` is the f32 logits array itself.
    if (u < 0.15 && o.dtype !== 'bf16') o.out = o.logits;
    else if (u < 0.35) o.out = new Float32Array(n * (o.vocabSize as number)).fill(NaN);
    return o;
  },
  check(options, result) {
    const want = tokenGradReference(
      logitValues(options),
      options.vocabSize as number,
      options.labels as Int32Array,
      (options.temperature as number | undefined) ?? 1,
      options.gradLogp as Float32Array,
      options.gradEntropy as Float32Array | undefined,
    );
    assert.ok(result instanceof Float32Array, 'a Float32Array');
    // In place with gradEntropy agrees to float rounding, not bitwise (see the op's docs).
    assertClose(result, want, { ...F32, label: 'dlogits' });
  },
};


const REJECTION_OPTIONS: readonly RolloutRejectionOption[] = [
  'token_k1', 'token_k2', 'token_k3', 'seq_sum_k1', 'seq_sum_k2', 'seq_sum_k3',
  'seq_mean_k1', 'seq_mean_k2', 'seq_mean_k3', 'seq_max_k2', 'seq_max_k3',
];

const rolloutCorrection: OpSpec = {
  name: 'rolloutCorrection',
  arguments: [
    { name: 'logp', kind: 'f32', required: true },
    { name: 'rolloutLogp', kind: 'f32', required: true },
    { name: 'mask', kind: 'u8', required: true },
    { name: 'seqOffsets', kind: 'i32', required: true },
    { name: 'rolloutIs', kind: 'choice', choices: ['none', 'token', 'sequence'] },
    { name: 'rolloutIsThreshold', kind: 'number' },
    { name: 'rolloutIsThresholdLower', kind: 'number' },
    { name: 'rolloutIsBatchNormalize', kind: 'boolean' },
    { name: 'rolloutRs', kind: 'choice', choices: REJECTION_OPTIONS },
    { name: 'rolloutRsThreshold', kind: 'number' },
    { name: 'rolloutRsThresholdLower', kind: 'number' },
  ],
  outMembers: { weights: 'f32', mask: 'u8' },
  build(rng) {
    const b = size(rng, 6, 300);
    const seqOffsets = offsets(rng, b, [1, 8, 40, 400]);
    const n = seqOffsets[b];
    const logp = new Float32Array(n);
    const rolloutLogp = new Float32Array(n);
    const scale = rng.pick([0.01, 0.3, 3, 30]);
    for (let t = 0; t < n; t++) {
      logp[t] = rng.uniform(-6, -0.01);
      rolloutLogp[t] = logp[t] + rng.normal() * scale;
    }
    const o: Options = { logp: poison(rng, logp), rolloutLogp: poison(rng, rolloutLogp), mask: rng.mask(n, rng.next()), seqOffsets };
    const level = rng.pick(['none', 'token', 'sequence', undefined] as const);
    if (level !== undefined) o.rolloutIs = level;
    if (level !== 'none') {
      if (rng.next() < 0.6) o.rolloutIsThreshold = rng.pick([1, 1.5, 2, 5, 100]);
      if (rng.next() < 0.3) o.rolloutIsThresholdLower = rng.uniform(0.1, (o.rolloutIsThreshold as number | undefined) ?? 2);
      if (rng.next() < 0.4) o.rolloutIsBatchNormalize = rng.next() < 0.7;
    }
    if (rng.next() < 0.7) {
      const chosen = REJECTION_OPTIONS.filter(() => rng.next() < 0.25);
      if (chosen.length === 0) chosen.push(rng.pick(REJECTION_OPTIONS));
      o.rolloutRs = rng.next() < 0.2 ? chosen.join(',') : chosen;
      const bound = () => rng.pick([1, 1.01, 1.5, 4, 0.001, 0.05, 2]);
      const thresholds = chosen.map((option) => (option.endsWith('k1') ? Math.max(1, bound()) : bound()));
      o.rolloutRsThreshold = chosen.length === 1 || rng.next() < 0.5 ? Math.max(...thresholds) : thresholds;
      if (chosen.some((option) => option.endsWith('k1')) && rng.next() < 0.3) o.rolloutRsThresholdLower = rng.uniform(0.2, 1);
    }
    const u = rng.next();
    if (u < 0.2) o.out = { weights: new Float32Array(n).fill(NaN), mask: new Uint8Array(n).fill(7) };
    else if (u < 0.3) o.out = { mask: o.mask }; // the documented in-place mask
    return o;
  },
  check(options, result) {
    const o = options as unknown as RolloutCorrectionOptions;
    const got = result as { weights: Float32Array; mask: Uint8Array; stats: Record<string, number>; nonFinite: number; maskedTokens: number };
    const want = rolloutCorrectionReference(o);
    // The kernel writes float32: the reference rounded to float32 (a bound of 5e-324 is 0).
    assertClose(got.weights, Float32Array.from(want.weights), { rtol: 2e-7, atol: 0, label: 'weights' });
    assert.deepEqual([...got.mask], [...want.mask], 'mask');
    assert.deepEqual(Object.keys(got.stats).sort(), Object.keys(want.stats).sort(), 'stats keys');
    for (const [key, value] of Object.entries(want.stats)) {
      // Sums of up to 40,000 doubles in another order. A std of equal values is 0 in the
      // kernel's moments and rounding noise of the mean in the reference's two passes: its
      // tolerance scales with the values.
      const prefix = key.replace(/_(seq_)?std$/, '');
      const scale = key.endsWith('_seq_std')
        ? Math.abs(want.stats[`${prefix}_seq_max`]) + Math.abs(want.stats[`${prefix}_seq_min`])
        : key.endsWith('_std') ? Math.abs(want.stats[`${prefix}_max`] ?? 0) + Math.abs(want.stats[`${prefix}_mean`] ?? 0) : 0;
      const atol = 1e-8 + (Number.isFinite(scale) ? 1e-12 * scale : 0);
      assertClose(got.stats[key], value, { rtol: 1e-7, atol, label: key });
    }
    assert.equal(got.nonFinite, want.nonFinite, 'nonFinite');
  },
};

export const OPS: Readonly<Record<OpName, OpSpec>> = {
  ppoLoss,
  groupAdvantages,
  advantages,
  dpoLoss,
  feedbackMask,
  sequenceLogprobs,
  sequenceLogprobsBackward,
  tokenLogprobs,
  tokenLogprobsBackward,
  rolloutCorrection,
};
