/**
 * ppoLoss's policy losses against the float64 reference (test/reference/policy_loss.ts),
 * which follows verl's verl/trainer/ppo/core_algos.py and rollout_corr_helper.py at commit
 * 1dda039b9c6311889a9c9a26040677e1254814f9: formulas, clamps, detached quantities, the
 * statistics (pg_clipfrac, pg_clipfrac_lower, ppo_kl), config defaults (actor.yaml).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  info,
  ppoLoss,
  ppoLossAsync,
  setThreads,
  type KlEstimator,
  type PolicyLoss,
  type PpoAggregation,
  type PpoLossOptions,
} from '../lib/index.js';
import { clipCovPick, klCovPick, policyFiniteDifference, policyReference } from './reference/policy_loss.js';
import { assertBitwiseEqual, assertClose, checkBadInputs, Random } from './support.js';

const AGGREGATIONS: PpoAggregation[] = [
  'token-mean',
  'token-sum',
  'seq-mean-token-sum',
  'seq-mean-token-mean',
  'seq-mean-token-sum-norm',
];

/** Every loss with options that exercise it (verl's defaults where they do). */
const LOSSES: { loss: PolicyLoss; options: Partial<PpoLossOptions> }[] = [
  { loss: 'vanilla', options: { clipLow: 0.2, clipHigh: 0.28, dualClip: 3 } },
  { loss: 'gspo', options: { clipLow: 0.05, clipHigh: 0.08 } },
  { loss: 'dppo_tv', options: { clipLow: 0.05, clipHigh: 0.08, clipRatioC: 1.6 } },
  { loss: 'dppo_kl', options: { clipLow: 0.02, clipHigh: 0.03, clipRatioC: 1.6 } },
  { loss: 'sapo', options: { tauPos: 1, tauNeg: 1.05 } },
  { loss: 'gpg', options: {} },
  { loss: 'clip_cov', options: { clipCovRatio: 0.2, clipCovLb: 0.05, clipCovUb: 5, seed: 7 } },
  { loss: 'kl_cov', options: { klCovRatio: 0.2, ppoKlCoef: 0.5 } },
  { loss: 'geo_mean', options: { clipLow: 0.4, clipHigh: 0.4 } },
  { loss: 'dro', options: { droBeta: 0.7 } },
  { loss: 'cispo', options: { clipLow: 0.2, clipHigh: 0.28 } },
  { loss: 'reinforce', options: {} },
  { loss: 'bypass_mode', options: { lossType: 'ppo_clip', clipLow: 0.2, dualClip: 3 } },
  { loss: 'bypass_mode', options: { lossType: 'reinforce', rolloutIs: 'token', rolloutIsThreshold: 1.5 } },
  { loss: 'bypass_mode', options: { lossType: 'reinforce', rolloutIs: 'sequence', rolloutIsThreshold: 3, rolloutIsBatchNormalize: true } },
  { loss: 'bypass_mode', options: { lossType: 'reinforce', rolloutIs: 'sequence', rolloutIsThreshold: 1.2 } },
  { loss: 'bypass_mode', options: { lossType: 'reinforce', rolloutIs: 'token', rolloutIsThreshold: 1.5, rolloutIsThresholdLower: 0.7, rolloutIsBatchNormalize: true } },
];

/** Whether a loss reads `weights` (bypass_mode computes its own). */
const takesWeights = (loss: PolicyLoss) => loss !== 'bypass_mode';

interface Batch {
  logp: Float32Array;
  oldLogp: Float32Array;
  advantages: Float32Array;
  mask: Uint8Array;
  seqOffsets: Int32Array;
  refLogp: Float32Array;
  weights: Float32Array;
}

/** A ragged batch with empty and fully masked sequences; per-sequence advantages (GMPO's setting). */
function randomBatch(rng: Random, b: number, maxLen: number): Batch {
  const seqOffsets = rng.seqOffsets(b, 0, maxLen);
  const n = seqOffsets[b];
  const logp = new Float32Array(n);
  const oldLogp = new Float32Array(n);
  const refLogp = new Float32Array(n);
  const advantages = new Float32Array(n);
  const weights = rng.floats(n, 0.1, 2);
  const mask = rng.mask(n, 0.75);
  for (let i = 0; i < b; i++) {
    const a = rng.normal() * 1.5;
    for (let t = seqOffsets[i]; t < seqOffsets[i + 1]; t++) {
      advantages[t] = a;
      logp[t] = rng.uniform(-3, -0.02);
      oldLogp[t] = Math.min(-0.01, logp[t] + rng.normal() * 0.3);
      refLogp[t] = logp[t] + rng.normal() * 0.6;
    }
  }
  if (b > 2) mask.fill(0, seqOffsets[1], seqOffsets[2]);
  return { logp, oldLogp, advantages, mask, seqOffsets, refLogp, weights };
}

function assertMatchesReference(o: PpoLossOptions, label: string): void {
  const got = ppoLoss(o);
  const want = policyReference(o);
  const atol = 2e-6 * want.magnitude;
  assertClose(got.loss, want.loss, { atol, label: `${label} loss` });
  assertClose(got.pgLoss, want.pgLoss, { atol, label: `${label} pgLoss` });
  if (o.refLogp) assertClose(got.klLoss!, want.klLoss, { atol, label: `${label} klLoss` });
  assertClose(got.clipFraction, want.clipFraction, { label: `${label} clipFraction` });
  assertClose(got.clipFractionLower, want.clipFractionLower, { label: `${label} clipFractionLower` });
  assertClose(got.approxKl, want.approxKl, { label: `${label} approxKl` });
  assert.equal(got.nonFinite, want.nonFinite, `${label} nonFinite`);
  assert.equal(got.maskedTokens, want.maskedTokens, `${label} maskedTokens`);
  if (o.policyLoss === 'clip_cov' || o.policyLoss === 'kl_cov') {
    assert.equal(got.selectedTokens, want.selectedTokens, `${label} selectedTokens`);
  }
  if (o.rolloutIsBatchNormalize) {
    assertClose(got.rolloutIsBatchNormFactor!, want.rolloutIsBatchNormFactor, { label: `${label} norm factor` });
  }

  const fd = policyFiniteDifference(o);
  let largest = 0;
  for (const g of fd) if (Number.isFinite(g)) largest = Math.max(largest, Math.abs(g));
  let kinks = 0;
  for (let t = 0; t < fd.length; t++) {
    if (Number.isNaN(fd[t])) {
      kinks++;
      continue;
    }
    if (!o.mask[t]) assert.equal(got.grad[t], 0, `${label} grad[${t}] masked out`);
    assertClose(got.grad[t], fd[t], { rtol: 2e-4, atol: 2e-5 * largest, label: `${label} grad[${t}]` });
  }
  assert.ok(kinks <= Math.max(2, fd.length * 0.1), `${label}: ${kinks} of ${fd.length} tokens on a kink`);
}

/** The tokens kl_cov penalised: those whose gradient the penalty moved. */
function klPicked(o: PpoLossOptions): number[] {
  const g = ppoLoss(o).grad;
  const h = ppoLoss({ ...o, ppoKlCoef: 0 }).grad;
  return [...g.keys()].filter((t) => g[t] !== h[t]);
}

function withThreads<T>(threads: number, body: () => T): T {
  const previous = info().threads;
  setThreads(threads);
  try {
    return body();
  } finally {
    setThreads(previous);
  }
}

const one = (x: number) => Float32Array.of(x);

describe('ppoLoss policy losses', () => {
  it('match the float64 reference and finite differences: every loss, aggregation, weights and KL', () => {
    const rng = new Random(16);
    const batch = randomBatch(rng, 10, 12);
    for (const { loss, options } of LOSSES) {
      for (const aggregation of [undefined, ...AGGREGATIONS]) {
        for (const weighted of takesWeights(loss) ? [false, true] : [false]) {
          for (const kl of [false, true]) {
            const o: PpoLossOptions = {
              logp: batch.logp,
              oldLogp: batch.oldLogp,
              advantages: batch.advantages,
              mask: batch.mask,
              seqOffsets: batch.seqOffsets,
              policyLoss: loss,
              ...options,
            };
            if (aggregation) o.aggregation = aggregation;
            if (weighted) o.weights = batch.weights;
            if (kl) Object.assign(o, { refLogp: batch.refLogp, klCoef: 0.3, klEstimator: 'k3' });
            assertMatchesReference(o, `${loss}/${JSON.stringify(options)}/${aggregation}/w ${weighted}/kl ${kl}`);
          }
        }
      }
    }
  });

  it('skip 16-token groups with no masked-in token: the reference\'s values, and the same bits whatever the masked-out tokens hold', () => {
    // A tool-use mask (a masked-out prompt, runs of action tokens between runs of tool
    // tokens, ragged lengths that are no multiple of 16), so that the CPU skips whole groups
    // and runs blocks shorter than 256 tokens; with the masked-out tokens' inputs replaced
    // by NaN, Inf and out-of-range log-probs (skipped, or computed and dropped, in either
    // case never seen) every result keeps its bits. (That a skipped group changes no bit of
    // the sums was checked against the unskipping build, every loss: see the CHANGELOG.)
    const rng = new Random(29);
    const seqOffsets = Int32Array.of(0, 37, 301, 333, 590, 700);
    const n = seqOffsets[5];
    const batch: Batch = {
      logp: new Float32Array(n),
      oldLogp: new Float32Array(n),
      advantages: new Float32Array(n),
      mask: new Uint8Array(n),
      seqOffsets,
      refLogp: new Float32Array(n),
      weights: rng.floats(n, 0.1, 2),
    };
    for (let s = 0; s < 5; s++) {
      const a = rng.normal() * 1.5;
      for (let t = seqOffsets[s]; t < seqOffsets[s + 1]; t++) {
        batch.advantages[t] = a;
        batch.logp[t] = rng.uniform(-3, -0.02);
        batch.oldLogp[t] = Math.min(-0.01, batch.logp[t] + rng.normal() * 0.3);
        batch.refLogp[t] = batch.logp[t] + rng.normal() * 0.6;
      }
      let t = seqOffsets[s] + 20;
      for (let action = true; t < seqOffsets[s + 1]; action = !action) {
        const end = Math.min(seqOffsets[s + 1], t + (action ? rng.int(5, 60) : rng.int(10, 80)));
        if (action) batch.mask.fill(1, t, end);
        t = end;
      }
    }
    const poisoned = { ...batch };
    for (const key of ['logp', 'oldLogp', 'advantages', 'refLogp', 'weights'] as const) {
      poisoned[key] = batch[key].slice();
      for (let t = 0; t < n; t++) if (!batch.mask[t]) poisoned[key][t] = [NaN, Infinity, -Infinity, -95, 3e38][t % 5];
    }
    for (const { loss, options } of LOSSES) {
      for (const aggregation of ['token-mean', 'seq-mean-token-mean'] as const) {
        for (const extra of [false, true]) {
          const label = `${loss}/${JSON.stringify(options)}/${aggregation}/weights and kl ${extra}`;
          const o = (b: Batch): PpoLossOptions => ({
            logp: b.logp,
            oldLogp: b.oldLogp,
            advantages: b.advantages,
            mask: b.mask,
            seqOffsets: b.seqOffsets,
            policyLoss: loss,
            ...options,
            aggregation,
            ...(extra ? { refLogp: b.refLogp, klCoef: 0.3, klEstimator: 'k3' as const } : {}),
            ...(extra && takesWeights(loss) ? { weights: b.weights } : {}),
          });
          assertMatchesReference(o(batch), label);
          const clean = ppoLoss(o(batch));
          // Into a gradient buffer of NaN: a skipped token's 0 is written, not left.
          const dirty = ppoLoss({ ...o(poisoned), out: { grad: new Float32Array(n).fill(NaN) } });
          assertBitwiseEqual(dirty.grad, clean.grad, `${label}: grad`);
          for (const key of ['loss', 'pgLoss', 'klLoss', 'clipFraction', 'clipFractionLower', 'approxKl', 'nonFinite', 'maskedTokens'] as const) {
            assert.ok(Object.is(dirty[key], clean[key]), `${label}: ${key} ${dirty[key]} vs ${clean[key]}`);
          }
        }
      }
    }
  });

  it('take the global normalisers and dpSize', () => {
    const batch = randomBatch(new Random(3), 8, 10);
    for (const { loss, options } of LOSSES) {
      for (const aggregation of AGGREGATIONS) {
        const o: PpoLossOptions = {
          ...batch,
          weights: takesWeights(loss) ? batch.weights : undefined,
          refLogp: undefined,
          policyLoss: loss,
          ...options,
          aggregation,
          tokenNormalizer: 91,
          seqNormalizer: 13,
          horizon: 17,
          dpSize: 4,
        };
        assertMatchesReference(o, `${loss}/${aggregation}/normalisers`);
      }
    }
  });

  it('hand-worked values of verl\'s formulas', () => {
    const mask = Uint8Array.of(1);
    // DPPO-TV: A = 1, p = e^-1 vs old e^-1.1: p - op = 0.0346 <= 0.05, kept; r = e^0.1.
    const tv = ppoLoss({ policyLoss: 'dppo_tv', logp: one(-1), oldLogp: one(-1.1), advantages: one(1), mask, clipLow: 0.05 });
    assertClose(tv.loss, -Math.exp(0.1) * -1, { label: 'dppo_tv loss' });
    assertClose(tv.grad, [-Math.exp(0.1)], { label: 'dppo_tv grad' });
    // ... with clipHigh 0.02 it is outside the region: loss and gradient 0, clipFraction 1.
    const out = ppoLoss({ policyLoss: 'dppo_tv', logp: one(-1), oldLogp: one(-1.1), advantages: one(1), mask, clipLow: 0.02 });
    assert.ok(out.loss === 0, `dppo_tv outside: ${out.loss}`);
    assert.equal(out.clipFraction, 1);
    // SAPO at r = 1: gate = sigmoid(0) * 4 / tau = 2 / tau; dgate/dr = tau/4 * 4/tau = 1.
    const sapo = ppoLoss({ policyLoss: 'sapo', logp: one(-1), oldLogp: one(-1), advantages: one(2), mask, seqOffsets: Int32Array.of(0, 1) });
    assertClose(sapo.loss, -2 * 2, { label: 'sapo loss' });
    assertClose(sapo.grad, [-2], { label: 'sapo grad' });
    // CISPO: r = e^0.5 clipped to 1.28; loss = -1.28 * A * logp, gradient -1.28 A.
    const cispo = ppoLoss({ policyLoss: 'cispo', logp: one(-1), oldLogp: one(-1.5), advantages: one(1), mask, clipHigh: 0.28 });
    assertClose(cispo.loss, 1.28, { label: 'cispo loss' });
    assertClose(cispo.grad, [-1.28], { label: 'cispo grad' });
    assert.equal(cispo.clipFraction, 1);
    // DRO: -(logp A - beta/2 d^2), gradient -(A - beta d).
    const dro = ppoLoss({ policyLoss: 'dro', logp: one(-1), oldLogp: one(-1.5), advantages: one(2), mask, droBeta: 0.4 });
    assertClose(dro.loss, -(-2 - 0.2 * 0.25), { label: 'dro loss' });
    assertClose(dro.grad, [-(2 - 0.4 * 0.5)], { label: 'dro grad' });
    // GPG and REINFORCE: -A logp, gradient -A.
    for (const policyLoss of ['gpg', 'reinforce'] as const) {
      const r = ppoLoss({ policyLoss, logp: one(-1), oldLogp: one(-1.5), advantages: one(2), mask });
      assertClose(r.loss, 2, { label: `${policyLoss} loss` });
      assertClose(r.grad, [-2], { label: `${policyLoss} grad` });
    }
    // GMPO: one sequence, d = [0.1, 0.6] with A = 1: clipped at 0.4 -> mean 0.25.
    const geo = ppoLoss({
      policyLoss: 'geo_mean',
      logp: Float32Array.of(-1, -1),
      oldLogp: Float32Array.of(-1.1, -1.6),
      advantages: Float32Array.of(1, 1),
      mask: Uint8Array.of(1, 1),
      seqOffsets: Int32Array.of(0, 2),
      clipLow: 0.4,
      clipHigh: 0.4,
    });
    assertClose(geo.loss, -Math.exp(0.25), { label: 'geo_mean loss' });
    assertClose(geo.grad, [-Math.exp(0.25) / 2, 0], { label: 'geo_mean grad' });
    assertClose(geo.clipFraction, 0.5, { label: 'geo_mean clipFraction' });
  });

  it('dppo_tv, dppo_kl: tokens whose log-ratio the clamp holds at ±20 (e^logp itself, not e^oldLogp times the ratio)', () => {
    // math/policy_loss.h, dppo_term: the trust region's e^logp is e^oldLogp r where the
    // ratio's clamp is inactive; a clamped token sends its block to the unbounded pass.
    const batch = randomBatch(new Random(17), 10, 12);
    const far = [3, 9, 20];
    batch.oldLogp[3] = -26; // log-ratio +25
    batch.logp[3] = -1;
    batch.oldLogp[9] = -2; // log-ratio -28
    batch.logp[9] = -30;
    batch.oldLogp[20] = -0.5; // log-ratio -21, e^logp near 0
    batch.logp[20] = -21.5;
    for (const t of far) batch.mask[t] = 1;
    for (const { loss, options } of LOSSES.filter((l) => l.loss === 'dppo_tv' || l.loss === 'dppo_kl')) {
      for (const advantage of [1, -1]) {
        for (const t of far) batch.advantages[t] = advantage;
        assertMatchesReference({ ...batch, refLogp: undefined, weights: undefined, policyLoss: loss, ...options }, `${loss}, A ${advantage}`);
      }
    }
  });

  it('clip_cov: the pick is the documented seeded subset, the same on 1 and 4 threads, and moves with the seed', () => {
    const batch = randomBatch(new Random(5), 40, 60);
    const base: PpoLossOptions = {
      ...batch,
      refLogp: undefined,
      weights: undefined,
      policyLoss: 'clip_cov',
      clipCovRatio: 0.05,
      clipCovLb: 0.02,
      clipCovUb: 10,
      seed: 11,
    };
    const one1 = withThreads(1, () => ppoLoss(base));
    const four = withThreads(4, () => ppoLoss(base));
    assertBitwiseEqual(one1.grad, four.grad, 'grad on 1 and 4 threads');
    assert.equal(one1.loss, four.loss);
    const picked = clipCovPick(base);
    assert.ok(picked.size > 3, `picked ${picked.size}`);
    assert.equal(one1.selectedTokens, picked.size);
    for (const t of picked) assert.ok(one1.grad[t] === 0, `picked token ${t} has gradient 0`);
    const other = ppoLoss({ ...base, seed: 12 });
    const otherPick = clipCovPick({ ...base, seed: 12 });
    assert.notDeepEqual([...picked].sort(), [...otherPick].sort(), 'another seed, another pick');
    assert.equal(other.selectedTokens, otherPick.size);
  });

  it('kl_cov: the penalty goes to the top-covariance tokens, the same on 1 and 4 threads', () => {
    const batch = randomBatch(new Random(6), 40, 60);
    const base: PpoLossOptions = { ...batch, refLogp: undefined, weights: undefined, policyLoss: 'kl_cov', klCovRatio: 0.03, ppoKlCoef: 1 };
    const a = withThreads(1, () => ppoLoss(base));
    const b = withThreads(4, () => ppoLoss(base));
    assertBitwiseEqual(a.grad, b.grad, 'grad on 1 and 4 threads');
    const picked = klCovPick(base);
    const masked = batch.mask.reduce((s, m) => s + m, 0);
    assert.equal(picked.size, Math.max(1, Math.floor(masked * 0.03)));
    assert.equal(a.selectedTokens, picked.size);
    // Exactly one token (klCovRatio tiny): the largest covariance.
    const single = ppoLoss({ ...base, klCovRatio: 1e-9 });
    assert.equal(single.selectedTokens, 1);
  });

  it('clip_cov, kl_cov on 65,536 tokens: the picks of the sampled threshold, and of the full pass where the sample misleads', () => {
    // The CPU picks keep only the keys under a threshold drawn from 16 tokens in every
    // 2,048 (cpu/policy_loss.cc, sample_run_start) and redo the pass with every key when too
    // few fall under it.
    const n = 1 << 16;
    const rng = new Random(21);
    const logp = rng.floats(n, -5, 0);
    const oldLogp = logp.map((x) => x + 0.1 * rng.normal());
    const advantages = rng.normals(n);
    const mask = rng.mask(n, 0.6);
    const checkClipCov = (o: PpoLossOptions, label: string) => {
      const got = withThreads(1, () => ppoLoss(o));
      assertBitwiseEqual(got.grad, withThreads(4, () => ppoLoss(o)).grad, `${label}: 1 and 4 threads`);
      const want = clipCovPick(o);
      assert.equal(got.selectedTokens, want.size, `${label} selectedTokens`);
      for (const t of want) assert.ok(got.grad[t] === 0, `${label}: picked token ${t} has gradient 0`);
      return want.size;
    };
    const clipCov: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'clip_cov', clipCovRatio: 0.002, clipCovLb: 1, clipCovUb: 5, seed: 3 };
    assert.ok(checkClipCov(clipCov, 'clip_cov') > 40);
    const klCov: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'kl_cov', klCovRatio: 0.002, ppoKlCoef: 1 };
    assert.deepEqual(klPicked(klCov), [...klCovPick(klCov)].sort((x, y) => x - y), 'kl_cov');
    assertBitwiseEqual(withThreads(1, () => ppoLoss(klCov)).grad, withThreads(4, () => ppoLoss(klCov)).grad, 'kl_cov: 1 and 4 threads');

    // The sampled tokens have the largest covariance, or are the only clip_cov candidates:
    // the threshold passes too few, and the full pass must find the rest.
    const sampled = (t: number) => {
      const w = Math.floor(t / 2048);
      const first = w * 2048 + ((Math.imul(w, 2654435761 | 0) >>> 0) % 2032);
      return t >= first && t < first + 16;
    };
    const all = new Uint8Array(n).fill(1);
    const tilted = {
      logp: logp.map((x, t) => (sampled(t) ? -0.1 : -1 - 0.8 * -x)),
      advantages: advantages.map((a, t) => (sampled(t) ? 10 : 0.1 * a)),
    };
    const klTilted: PpoLossOptions = { ...klCov, ...tilted, mask: all, klCovRatio: 0.1 };
    const klWant = [...klCovPick(klTilted)].sort((x, y) => x - y);
    assert.equal(klWant.length, n / 10 | 0);
    assert.deepEqual(klPicked(klTilted), klWant, 'kl_cov, misleading sample');
    const clipTilted: PpoLossOptions = {
      ...clipCov,
      mask: all,
      logp: logp.map((x, t) => (sampled(t) ? -1.5 : -1 - 0.8 * -x)),
      oldLogp: logp.map((x, t) => (sampled(t) ? -1.5 : -1 - 0.8 * -x)),
      advantages: advantages.map((a, t) => (sampled(t) ? 2 : 0.05 * a)),
      clipCovRatio: 0.05,
    };
    assert.equal(checkClipCov(clipTilted, 'clip_cov, misleading sample'), (n / 2048) * 16);
  });

  it('clip_cov, kl_cov on 589,824 tokens: the sample in parts on the threads gives the reference picks', () => {
    // The sample that sets the threshold runs in parts of 64 runs of 16 tokens (one run in
    // every 2,048), on the threads from 4 parts (cpu/policy_loss.cc, over_sample_parts): here
    // 5 parts, the last short; each part's counts (clip_cov) or orders (kl_cov) joined.
    const n = 288 * 2048;
    const rng = new Random(41);
    const logp = rng.floats(n, -5, 0);
    const oldLogp = logp.map((x) => x + 0.1 * rng.normal());
    const advantages = rng.normals(n);
    const mask = rng.mask(n, 0.6);
    const clipCov: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'clip_cov', clipCovRatio: 0.001, clipCovLb: 1, clipCovUb: 5, seed: 9 };
    const got = withThreads(1, () => ppoLoss(clipCov));
    assertBitwiseEqual(got.grad, withThreads(4, () => ppoLoss(clipCov)).grad, 'clip_cov: 1 and 4 threads');
    const want = clipCovPick(clipCov);
    assert.ok(want.size > 300, `picked ${want.size}`);
    assert.equal(got.selectedTokens, want.size, 'clip_cov selectedTokens');
    for (const t of want) assert.ok(got.grad[t] === 0, `clip_cov: picked token ${t} has gradient 0`);
    const klCov: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'kl_cov', klCovRatio: 0.001, ppoKlCoef: 1 };
    assertBitwiseEqual(withThreads(1, () => ppoLoss(klCov)).grad, withThreads(4, () => ppoLoss(klCov)).grad, 'kl_cov: 1 and 4 threads');
    assert.deepEqual(withThreads(4, () => klPicked(klCov)), [...klCovPick(klCov)].sort((x, y) => x - y), 'kl_cov');
  });

  it('clip_cov, kl_cov on 10 chunks of 16,384 tokens (the last short): the batch means, summed 8 chunks at once, give the reference picks', () => {
    // The means' chunk sums run 8 chunks in vector lanes, each lane kSkew tokens behind the
    // last (cpu/policy_loss_kernels.inc, interleaved_chunk_sums): here a full group of 8,
    // then one of 2 whose second is short. A block of 8 tokens left out or counted twice
    // moves the means by ~1e-4, far more than their rounding to float, and with them the
    // covariances that kl_cov ranks (30% of the tokens picked, among covariances ~1e-5
    // apart at the cut).
    const n = 9 * 16384 + 1234;
    const rng = new Random(33);
    const advantages = rng.normals(n);
    const logp = rng.floats(n, -5, 0);
    const oldLogp = logp.map((x) => x + 0.05 * rng.normal());
    const mask = rng.mask(n, 0.7);
    const klCov: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'kl_cov', klCovRatio: 0.3, ppoKlCoef: 1 };
    assert.deepEqual(klPicked(klCov), [...klCovPick(klCov)].sort((x, y) => x - y), 'kl_cov');
    const clipCov: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'clip_cov', clipCovRatio: 0.01, clipCovLb: 0.5, clipCovUb: 5, seed: 4 };
    const got = withThreads(1, () => ppoLoss(clipCov));
    assertBitwiseEqual(got.grad, withThreads(4, () => ppoLoss(clipCov)).grad, 'clip_cov: 1 and 4 threads');
    const want = clipCovPick(clipCov);
    assert.ok(want.size > 500, `picked ${want.size}`);
    assert.equal(got.selectedTokens, want.size);
    for (const t of want) assert.ok(got.grad[t] === 0, `clip_cov: picked token ${t} has gradient 0`);
  });

  it('clip_cov, kl_cov on 65,536 tokens with weights, a KL term and a per-sequence aggregation: the pass that picks as it computes', () => {
    // Where the sampled threshold leaves keys out, the loss pass computes every token
    // unpicked and settles the few under the threshold after the pick (cpu/policy_loss.cc,
    // pick_while_computing): their weighted, scaled losses and, with the KL term, gradients.
    const n = 1 << 16;
    const rng = new Random(23);
    const logp = rng.floats(n, -5, 0);
    const oldLogp = logp.map((x) => x + 0.1 * rng.normal());
    const refLogp = logp.map((x) => x + 0.05 * rng.normal());
    const advantages = rng.normals(n);
    const mask = rng.mask(n, 0.6);
    const weights = rng.floats(n, 0.5, 1.5);
    const seqOffsets = Int32Array.from({ length: 129 }, (_, i) => i * 512);
    const base = { logp, oldLogp, advantages, mask, seqOffsets, refLogp, klCoef: 0.1, weights, aggregation: 'seq-mean-token-mean' as const };
    for (const o of [
      { ...base, policyLoss: 'clip_cov' as const, clipCovRatio: 0.002, clipCovLb: 1, clipCovUb: 5, seed: 3 },
      { ...base, policyLoss: 'kl_cov' as const, klCovRatio: 0.002, ppoKlCoef: 1 },
    ]) {
      const label = o.policyLoss;
      const got = withThreads(1, () => ppoLoss(o));
      assertBitwiseEqual(got.grad, withThreads(4, () => ppoLoss(o)).grad, `${label}: 1 and 4 threads`);
      const want = policyReference(o);
      const atol = 2e-6 * want.magnitude;
      assertClose(got.loss, want.loss, { atol, label: `${label} loss` });
      assertClose(got.pgLoss, want.pgLoss, { atol, label: `${label} pgLoss` });
      assertClose(got.klLoss!, want.klLoss, { atol, label: `${label} klLoss` });
      assertClose(got.clipFraction, want.clipFraction, { label: `${label} clipFraction` });
      assert.equal(got.selectedTokens, want.selectedTokens, `${label} selectedTokens`);
      // The picked tokens' gradients: clip_cov's the KL term's alone, kl_cov's moved by the
      // penalty (and only theirs).
      const picked = [...(o.policyLoss === 'clip_cov' ? clipCovPick(o) : klCovPick(o))].sort((x, y) => x - y);
      assert.ok(picked.length > 40, `${label}: picked ${picked.length}`);
      if (o.policyLoss === 'clip_cov') {
        const klOnly = ppoLoss({ ...o, advantages: new Float32Array(n) }).grad;
        for (const t of picked) assert.equal(got.grad[t], klOnly[t], `${label}: picked token ${t}, the KL term's gradient`);
      } else {
        const unpenalised = ppoLoss({ ...o, ppoKlCoef: 0 }).grad;
        assert.deepEqual([...got.grad.keys()].filter((t) => got.grad[t] !== unpenalised[t]), picked, `${label}: the penalised tokens`);
      }
    }
  });

  it('bypass_mode on 60,000 tokens, sequences across the 16,384-token chunks: each token weighed by its sequence\'s IS weight, the same on 1 and 4 threads', () => {
    // The token pass computes a sequence's weight as it reaches the sequence, and takes
    // those of the sequences that straddle a chunk from a pass before it
    // (cpu/policy_loss.cc, sequence_is_weights_aside): the same weights either way, so each
    // gradient is REINFORCE's with that sequence's weight passed in.
    const rng = new Random(29);
    const lengths = [0, 7000, 9000, 1, 12000, 5000, 3000, 0, 16384, 7615];
    const seqOffsets = Int32Array.from({ length: lengths.length + 1 }, (_, i) => lengths.slice(0, i).reduce((a, b) => a + b, 0));
    const n = seqOffsets[lengths.length];
    const logp = rng.floats(n, -5, 0);
    const oldLogp = logp.map((x) => x + 0.002 * rng.normal());
    const advantages = rng.normals(n);
    const mask = rng.mask(n, 0.7);
    mask.fill(0, seqOffsets[6], seqOffsets[7]);  // a fully masked sequence
    for (const rolloutIsBatchNormalize of [false, true]) {
      const o = { logp, oldLogp, advantages, mask, seqOffsets, policyLoss: 'bypass_mode' as const, lossType: 'reinforce' as const, rolloutIs: 'sequence' as const, rolloutIsThreshold: 1.05, rolloutIsBatchNormalize };
      const label = `normalize ${rolloutIsBatchNormalize}`;
      const got = withThreads(1, () => ppoLoss(o));
      assertBitwiseEqual(got.grad, withThreads(4, () => ppoLoss(o)).grad, `${label}: 1 and 4 threads`);
      const want = policyReference(o);
      const atol = 2e-6 * want.magnitude;
      assertClose(got.loss, want.loss, { atol, label: `${label} loss` });
      assertClose(got.approxKl, want.approxKl, { label: `${label} approxKl` });
      assert.equal(got.maskedTokens, want.maskedTokens, `${label} maskedTokens`);
      // Each sequence's weight, in float64, as REINFORCE's weights (some truncated at 1.05).
      const weights = new Float32Array(n);
      const perSequence: number[] = [];
      for (let s = 0; s < lengths.length; s++) {
        let sum = 0;
        for (let t = seqOffsets[s]; t < seqOffsets[s + 1]; t++) if (mask[t]) sum += logp[t] - oldLogp[t];
        perSequence.push(Math.min(Math.exp(Math.max(-20, Math.min(20, sum))), 1.05));
      }
      const nonEmpty = perSequence.filter((_, s) => mask.subarray(seqOffsets[s], seqOffsets[s + 1]).some((m) => m !== 0));
      const mean = nonEmpty.reduce((a, b) => a + b, 0) / nonEmpty.length;
      for (let s = 0; s < lengths.length; s++) {
        weights.fill(rolloutIsBatchNormalize ? perSequence[s] / mean : perSequence[s], seqOffsets[s], seqOffsets[s + 1]);
      }
      assert.ok(perSequence.some((w) => w === 1.05) && perSequence.some((w) => w < 1.05), `${label}: truncated and kept weights`);
      const reinforce = ppoLoss({ logp, oldLogp, advantages, mask, seqOffsets, policyLoss: 'reinforce', weights });
      for (let t = 0; t < n; t++) {
        assertClose(got.grad[t], reinforce.grad[t], { rtol: 1e-5, atol: 1e-12, label: `${label} grad[${t}]` });
      }
    }
  });

  it('bypass_mode: a sequence gets the same IS weight and gradient bits wherever it lies (inside a chunk or across one), on every SIMD path; the token-level mean is that of the pass\'s weights', () => {
    // test/policy_loss_twin.ts in a child process a path (TIRL_SIMD, as test/simd.test.ts):
    // the pass and the weights computed before it (sequences across a chunk, the
    // token-level mean) call one compiled function of cpu/policy_loss_kernels.inc, so the
    // FMA-contracted AVX2 / AVX-512 exps agree with themselves.
    const script = fileURLToPath(new URL('./policy_loss_twin.js', import.meta.url));
    for (const path of ['baseline', 'avx2', 'avx512']) {
      const stdout = execFileSync(process.execPath, [script], { env: { ...process.env, TIRL_SIMD: path }, encoding: 'utf8' });
      const { simd, failures } = JSON.parse(stdout) as { simd: string; failures: string[] };
      assert.deepEqual(failures, [], `TIRL_SIMD=${path} (ran ${simd})`);
    }
  });

  it('a block with an exponent beyond ±80 (logp -90, a steep SAPO gate) is computed again unbounded: the same bits for its other tokens', () => {
    // cpu/policy_loss_kernels.inc runs a block of 256 tokens with exp_bounded first and
    // again with exp_any where an exponent leaves [-80, 80] (math/policy_loss.h, policy_exp).
    const rng = new Random(31);
    const n = 600;
    const logp = rng.floats(n, -3, -0.05);
    const oldLogp = logp.map((x) => x + 0.05 * rng.normal());
    const advantages = rng.normals(n);
    const mask = rng.mask(n, 0.8);
    mask[300] = 1;
    // Token 300's exponent leaves [-80, 80]: DPPO's exp(logp), SAPO's gate (tau (r - 1) =
    // 40 (e^1.5 - 1) = 139), Clip-Cov's and KL-Cov's unclamped exp(logp - old_logp).
    const farAt = (l: number, o: number) => {
      const f = { logp: logp.slice(), oldLogp: oldLogp.slice() };
      f.logp[300] = l;
      f.oldLogp[300] = o;
      return f;
    };
    for (const [loss, options, far] of [
      ['dppo_tv', { clipRatioC: 3 }, farAt(-90, -91.5)],
      ['dppo_kl', { clipRatioC: 3 }, farAt(-90, -91.5)],
      ['sapo', { tauPos: 40, tauNeg: 40 }, farAt(-1, -2.5)],
      ['clip_cov', { clipCovRatio: 0.01, clipCovLb: 0.5, clipCovUb: 5 }, farAt(-90, -2)],
      ['kl_cov', { klCovRatio: 0.01 }, farAt(-90, -2)],
    ] as const) {
      const base: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: loss, aggregation: 'token-sum', ...options };
      const near = ppoLoss(base);
      const steep = ppoLoss({ ...base, ...far });
      // The picks move with the batch means: only the losses without one compare tokens.
      const moved = loss === 'clip_cov' || loss === 'kl_cov' ? [] : [...near.grad.keys()].filter((t) => t !== 300 && near.grad[t] !== steep.grad[t]);
      assert.deepEqual(moved, [], `${loss}: the other tokens' gradients`);
      const want = policyReference({ ...base, ...far });
      assertClose(steep.loss, want.loss, { atol: 2e-6 * want.magnitude, label: `${loss} loss` });
    }
  });

  it('kl_cov: covariance ties (+0 and -0 alike, or all NaN) go to the earlier tokens', () => {
    // All advantages 1: every covariance is 0 * (lp - mean lp), +0 or -0 by the sign of the
    // second factor; a NaN advantage makes every covariance NaN. Either way the pick is the
    // first k masked-in tokens (cf. torch.topk over equal values in verl, 1dda039b).
    const n = 10;
    const logp = Float32Array.from({ length: n }, (_, t) => -0.5 - 0.3 * ((t * 7) % 10));
    const oldLogp = logp.map((x) => x + 0.1);
    const mask = new Uint8Array(n).fill(1);
    mask[1] = 0;
    for (const nan of [false, true]) {
      const advantages = new Float32Array(n).fill(1);
      if (nan) advantages[6] = NaN;
      const base: PpoLossOptions = { logp, oldLogp, advantages, mask, policyLoss: 'kl_cov', klCovRatio: 0.3, ppoKlCoef: 1 };
      const withPenalty = ppoLoss(base);
      const without = ppoLoss({ ...base, ppoKlCoef: 0 });
      const picked = [...withPenalty.grad.keys()].filter((t) => t !== 6 && withPenalty.grad[t] !== without.grad[t]);
      assert.equal(withPenalty.selectedTokens, 2);
      assert.deepEqual(picked, [0, 2], nan ? 'NaN covariances' : '±0 covariances');
      assert.deepEqual([...klCovPick(base)].sort(), [0, 2]);
    }
  });

  it('KL estimators: low_var_kl is k3, mse is k2, the + forms take k2\'s gradient', () => {
    const batch = randomBatch(new Random(8), 6, 10);
    const base: PpoLossOptions = { ...batch, weights: undefined, policyLoss: 'gpg', klCoef: 0.5 };
    const same = (a: KlEstimator, b: KlEstimator) => {
      const x = ppoLoss({ ...base, klEstimator: a });
      const y = ppoLoss({ ...base, klEstimator: b });
      assert.equal(x.loss, y.loss, `${a} = ${b}`);
      assertBitwiseEqual(x.grad, y.grad, `${a} = ${b} grad`);
    };
    same('low_var_kl', 'k3');
    same('mse', 'k2');
    same('low_var_kl+', 'k3+');
    for (const [plus, base1] of [['k1+', 'k1'], ['k3+', 'k3'], ['abs+', 'abs']] as const) {
      const p = ppoLoss({ ...base, klEstimator: plus });
      const v = ppoLoss({ ...base, klEstimator: base1 });
      const k2 = ppoLoss({ ...base, klEstimator: 'k2' });
      assert.equal(p.klLoss, v.klLoss, `${plus} has ${base1}'s value`);
      assertClose(p.grad, k2.grad, { label: `${plus} has k2's gradient` });
      assertMatchesReference({ ...base, klEstimator: plus }, plus);
    }
    // Also through vanilla's kernel.
    const v = ppoLoss({ ...base, policyLoss: 'vanilla', klEstimator: 'k3+' });
    const k2 = ppoLoss({ ...base, policyLoss: 'vanilla', klEstimator: 'k2' });
    assertClose(v.grad, k2.grad, { label: 'vanilla k3+ gradient' });
  });

  it('edge cases: empty batch, fully masked, extreme ratios, NaN and Inf counted', () => {
    const empty = { logp: new Float32Array(0), oldLogp: new Float32Array(0), advantages: new Float32Array(0), mask: new Uint8Array(0), seqOffsets: Int32Array.of(0) };
    for (const { loss, options } of LOSSES) {
      const r = ppoLoss({ ...empty, policyLoss: loss, ...options });
      assert.equal(r.loss, 0, `${loss} empty`);
      assert.equal(r.maskedTokens, 0);
      const masked = ppoLoss({
        logp: Float32Array.of(-1, -2),
        oldLogp: Float32Array.of(-1, -2),
        advantages: Float32Array.of(1, NaN),
        mask: Uint8Array.of(0, 0),
        seqOffsets: Int32Array.of(0, 2),
        policyLoss: loss,
        ...options,
      });
      assert.equal(masked.loss, 0, `${loss} fully masked`);
      assert.deepEqual([...masked.grad], [0, 0], `${loss} fully masked grad`);
      assert.equal(masked.nonFinite, 0);
    }
    // Extreme log-ratios (+-30): clamped where verl clamps, the reference agrees.
    const extreme: PpoLossOptions = {
      logp: Float32Array.of(-0.5, -31, -1, -2),
      oldLogp: Float32Array.of(-30.5, -1, -1.2, -2),
      advantages: Float32Array.of(1, -1, 0.5, -0.5),
      mask: Uint8Array.of(1, 1, 1, 1),
      seqOffsets: Int32Array.of(0, 2, 4),
    };
    for (const loss of ['dppo_tv', 'dppo_kl', 'sapo', 'cispo', 'gpg', 'reinforce', 'dro'] as PolicyLoss[]) {
      const o = { ...extreme, policyLoss: loss, droBeta: loss === 'dro' ? 0.1 : undefined };
      const got = ppoLoss(o);
      const want = policyReference(o);
      assertClose(got.loss, want.loss, { rtol: 1e-5, atol: 1e-6 * want.magnitude, label: `${loss} extreme` });
      assert.ok(got.grad.every(Number.isFinite), `${loss} extreme grad finite`);
    }
    // NaN and Inf inputs propagate and are counted.
    for (const { loss, options } of LOSSES) {
      const r = ppoLoss({
        logp: Float32Array.of(-1, NaN, -1),
        oldLogp: Float32Array.of(-1, -1, -Infinity),
        advantages: Float32Array.of(1, 1, 1),
        mask: Uint8Array.of(1, 1, 1),
        seqOffsets: Int32Array.of(0, 3),
        policyLoss: loss,
        ...options,
      });
      assert.equal(r.nonFinite, 2, `${loss} nonFinite`);
    }
  });

  it('async form gives the same result', async () => {
    const batch = randomBatch(new Random(9), 6, 10);
    for (const { loss, options } of LOSSES) {
      const o: PpoLossOptions = { ...batch, weights: undefined, refLogp: undefined, policyLoss: loss, ...options };
      const sync = ppoLoss(o);
      const async = await ppoLossAsync(o);
      assert.equal(async.loss, sync.loss, loss);
      assertBitwiseEqual(async.grad, sync.grad, `${loss} grad`);
    }
  });

  it('an option the loss does not read, a misspelt one, or a bad value is an error naming it', () => {
    const base = { logp: one(-1), oldLogp: one(-1), advantages: one(1), mask: Uint8Array.of(1), seqOffsets: Int32Array.of(0, 1) };
    const call = (extra: Record<string, unknown>) => () => ppoLoss({ ...base, ...extra } as PpoLossOptions);
    checkBadInputs([
      { name: 'tauPos on vanilla', call: call({ tauPos: 1 }), error: TypeError, message: /Expected no tauPos \(not read by policyLoss 'vanilla'\)/ },
      { name: 'dualClip on dppo_tv', call: call({ policyLoss: 'dppo_tv', dualClip: 3 }), error: TypeError, message: /Expected no dualClip \(not read by policyLoss 'dppo_tv'\)/ },
      { name: 'clipRatioC on vanilla', call: call({ clipRatioC: 3 }), error: TypeError, message: /Expected no clipRatioC \(not read by policyLoss 'vanilla'\)/ },
      { name: 'seed on kl_cov', call: call({ policyLoss: 'kl_cov', seed: 1 }), error: TypeError, message: /Expected no seed \(not read by policyLoss 'kl_cov'\)/ },
      { name: 'weights on bypass_mode', call: call({ policyLoss: 'bypass_mode', weights: one(1) }), error: TypeError, message: /Expected no weights \(not read by policyLoss 'bypass_mode' with lossType 'ppo_clip'\)/ },
      { name: 'rolloutIs with ppo_clip', call: call({ policyLoss: 'bypass_mode', rolloutIs: 'token' }), error: TypeError, message: /Expected no rolloutIs \(not read by policyLoss 'bypass_mode' with lossType 'ppo_clip'\)/ },
      { name: 'ratioLevel on gspo', call: call({ policyLoss: 'gspo', ratioLevel: 'token' }), error: TypeError, message: /Expected no ratioLevel \(not read by policyLoss 'gspo'\)/ },
      { name: 'misspelt clipLo', call: call({ clipLo: 0.1 }), error: TypeError, message: /Expected no option named 'clipLo'/ },
      { name: 'unknown policyLoss', call: call({ policyLoss: 'ppo' }), error: RangeError, message: /policyLoss/ },
      { name: 'dro without droBeta', call: call({ policyLoss: 'dro' }), error: TypeError, message: /droBeta/ },
      { name: 'droBeta 0', call: call({ policyLoss: 'dro', droBeta: 0 }), error: RangeError, message: /droBeta/ },
      { name: 'tauNeg <= 0', call: call({ policyLoss: 'sapo', tauNeg: -1 }), error: RangeError, message: /tauNeg/ },
      { name: 'clipCovRatio > 1', call: call({ policyLoss: 'clip_cov', clipCovRatio: 2 }), error: RangeError, message: /clipCovRatio/ },
      { name: 'clipCovUb <= lb', call: call({ policyLoss: 'clip_cov', clipCovLb: 2, clipCovUb: 1 }), error: RangeError, message: /clipCovUb/ },
      { name: 'klCovRatio 0', call: call({ policyLoss: 'kl_cov', klCovRatio: 0 }), error: RangeError, message: /klCovRatio/ },
      { name: 'seed fraction', call: call({ policyLoss: 'clip_cov', seed: 1.5 }), error: RangeError, message: /seed/ },
      { name: 'clipRatioC 0', call: call({ policyLoss: 'dppo_kl', clipRatioC: 0 }), error: RangeError, message: /clipRatioC/ },
      { name: 'lossType', call: call({ policyLoss: 'bypass_mode', lossType: 'ppo' }), error: RangeError, message: /lossType/ },
      { name: 'IcePop band upside down', call: call({ policyLoss: 'bypass_mode', lossType: 'reinforce', rolloutIs: 'token', rolloutIsThreshold: 1, rolloutIsThresholdLower: 2 }), error: RangeError, message: /rolloutIsThresholdLower/ },
      { name: 'geo_mean without seqOffsets', call: () => ppoLoss({ logp: one(-1), oldLogp: one(-1), advantages: one(1), mask: Uint8Array.of(1), policyLoss: 'geo_mean' }), error: TypeError, message: /seqOffsets/ },
      { name: 'sequence IS without seqOffsets', call: () => ppoLoss({ logp: one(-1), oldLogp: one(-1), advantages: one(1), mask: Uint8Array.of(1), policyLoss: 'bypass_mode', lossType: 'reinforce', rolloutIs: 'sequence' }), error: TypeError, message: /seqOffsets/ },
      { name: 'bad klEstimator', call: call({ klEstimator: 'full' }), error: RangeError, message: /klEstimator/ },
    ]);
  });
});
